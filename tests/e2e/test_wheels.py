"""The sandbox wheel index: the training stack installs from it alone, as roles/python_stack installs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.sandbox import amdwheels, config, web, wheels


@contextmanager
def serving(directory: Path) -> Iterator[str]:
    """Serve `directory` on loopback; yields its base URL."""
    server = web.serve(directory, port=0)
    try:
        yield server.url.rstrip("/")
    finally:
        server.stop()


def cached_stack_venv() -> Path:
    """A venv with the stack installed from the sandbox index, kept under CACHE_DIR per lock inputs, so
    tests that only need to run LLaMA-Factory do not reinstall it."""
    venv = config.CACHE_DIR / "venvs" / f"stack-{wheels.inputs_digest()}"
    done = venv / ".radeonlab-complete"
    if done.exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    state = config.CACHE_DIR / "venvs" / "index-state"
    info = wheels.build_wheel_index(state)
    with serving(config.www_dir(state)) as url:
        wheels.install_stack(venv, info.settings(url)["python_stack_index_url"])
    done.write_text("ok\n")
    return venv


def test_lock_matches_python_stack_defaults() -> None:
    """Changing roles/python_stack/defaults.py without relocking must be caught."""
    pins = {p.name: p.version for p in wheels.check_lock()}
    for req in DEFAULTS["python_stack_requirements"]:  # type: ignore[attr-defined]
        name, version = req.split("==")
        assert pins[wheels.normalize(name)] == version
    assert pins["llamafactory"] == DEFAULTS["llamafactory_version"]
    assert "torch" not in pins  # the local CPU wheel, not PyPI's CUDA build
    for extra in wheels.SANDBOX_EXTRAS:  # served at the pin python_stack_extras installs
        assert pins[extra] == DEFAULTS["python_stack_extras_versions"][extra]  # type: ignore[index]


def test_isolated_pip_env_drops_machine_settings() -> None:
    env = wheels.isolated_pip_env({"PIP_FIND_LINKS": "/srv/wheels", "PIP_CONSTRAINT": "x", "PATH": "/bin"})
    assert env["PIP_CONFIG_FILE"] == "/dev/null"
    assert "PIP_FIND_LINKS" not in env and "PIP_CONSTRAINT" not in env
    assert env["PATH"] == "/bin"


def test_target_platforms_cover_manylinux_2_28_and_2014() -> None:
    plats = wheels.target_platforms()
    assert plats[0] == "manylinux_2_36_x86_64"
    assert "manylinux_2_28_x86_64" in plats and "manylinux2014_x86_64" in plats
    assert "manylinux_2_37_x86_64" not in plats


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> wheels.WheelIndexInfo:
    return wheels.build_wheel_index(tmp_path_factory.mktemp("state"))


@pytest.mark.slow
def test_index_layout_and_simulated_markers(index: wheels.WheelIndexInfo) -> None:
    assert (index.simple_dir / "llamafactory" / "index.html").exists()
    assert "SIMULATED" in (index.root / "README.txt").read_text()
    torch_page = (index.simple_dir / "torch" / "index.html").read_text()
    assert "SIMULATED" in torch_page and "+cpu" in torch_page and "2.13.0+rocm10.0.0" in torch_page
    # AMD's shape: device extras that pull stand-in device packages, each marked SIMULATED
    amd = next((index.root / "files").glob("torch-2.13.0+rocm10.0.0-*.whl"))
    with zipfile.ZipFile(amd) as z:
        metadata = z.read("torch-2.13.0+rocm10.0.0.dist-info/METADATA").decode()
        assert z.read(amdwheels.TORCH_REPACK_MARKER).startswith(b"SIMULATED")
        assert b"import rocm_sdk" in z.read(amdwheels.ROCM_INIT)  # torch/__init__.py calls its initialize()
    # AMD's graph (amdworld/python-packages.yaml): torch -> rocm[libraries]; device-T -> amd-torch-device-T
    assert "Summary: SIMULATED" in metadata and "Requires-Dist: rocm[libraries]==10.0.0" in metadata
    assert "Provides-Extra: device-gfx1151" in metadata
    assert 'Requires-Dist: amd-torch-device-gfx1151==2.13.0+rocm10.0.0; extra == "device-gfx1151"' in metadata
    assert "2.14.0+rocm10.1.0" in torch_page  # every release the data pairs with a torch
    with zipfile.ZipFile(index.files["rocm-sdk-device-gfx1100"]) as z:
        assert z.read("rocm_sdk_device_gfx1100/SIMULATED.txt").startswith(b"SIMULATED")
        assert (
            "Requires-Dist: rocm-sdk-libraries=="
            in z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
        )
    assert index.files["rocm"].name.endswith(".tar.gz")  # AMD publishes the selector only as an sdist
    with zipfile.ZipFile(index.files["torchaudio"]) as z:
        names = z.namelist()
        record = z.read(next(n for n in names if n.endswith("RECORD"))).decode()
    assert wheels.REPACK_MARKER in names and wheels.REPACK_MARKER in record
    assert not [n for n in names if wheels.TORCHAUDIO_DROPPED.match(n)]
    assert not [line for line in record.splitlines() if wheels.TORCHAUDIO_DROPPED.match(line.split(",")[0])]
    # Rebuilding from the cache downloads nothing and gives the same files.
    again = wheels.build_wheel_index(index.root.parent.parent)
    assert again.downloaded_bytes == 0
    assert sorted(p.name for p in again.files.values()) == sorted(p.name for p in index.files.values())


@pytest.mark.slow
def test_stack_installs_from_the_index_alone() -> None:
    """install_stack (the role's three pip steps) from the sandbox index only; the venv is the one
    tests/unit/test_tinymodel.py trains in (cached per lock inputs: one install per session on a fresh
    machine)."""
    venv = cached_stack_venv()
    py = str(venv / "bin" / "python")
    env = wheels.isolated_pip_env()
    subprocess.run([py, "-c", "import llamafactory.train.tuner, torchaudio, peft"], check=True, env=env)
    out = subprocess.run([str(venv / "bin" / "llamafactory-cli"), "version"], check=True, env=env,
                         capture_output=True, text=True).stdout  # fmt: skip
    assert DEFAULTS["llamafactory_version"] in out
    torch_version = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], check=True, env=env,
                                   capture_output=True, text=True).stdout  # fmt: skip
    assert torch_version.strip() == f"{wheels.standin_torch_version()}+cpu"
    marker = venv / "lib" / "python3.11" / "site-packages" / wheels.REPACK_MARKER
    assert marker.read_text().startswith("SIMULATED")


@pytest.mark.slow
def test_missing_wheels_are_downloaded_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what the cache lacks is fetched (hash-checked), and its bytes are counted."""
    monkeypatch.setattr(config, "CACHE_DIR", tmp_path)
    pin = next(p for p in wheels.check_lock() if p.name == "cycler")  # a small pure-Python wheel
    files, downloaded = wheels.fetch_locked([pin])
    assert downloaded == files["cycler"].stat().st_size > 0
    assert wheels.sha256_file(files["cycler"]) == pin.sha256
    assert wheels.fetch_locked([pin])[1] == 0


@pytest.mark.slow
def test_one_resolution_over_the_index_locks_what_it_serves_by_target(
    index: wheels.WheelIndexInfo, tmp_path: Path
) -> None:
    """The sandbox makes no lock: the product's resolution step (pip's report, roles/python_stack/resolve.py)
    over the served index locks served files only, AMD's (SIMULATED) torch once, the device package on its
    target's line."""
    from radeonlab.roles.python_stack import resolve

    url = index.simple_dir.as_uri()
    data = {**DEFAULTS, "python_stack_index_url": url, "pytorch_index_url": url}
    roots = resolve.stack_roots(data, "10.1", ["gfx1100"], [])
    reports = []
    for name, args in (("all", roots.all()), ("no-deps", ["--no-deps", roots.common[-1]])):
        out = tmp_path / f"{name}.json"
        pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        pip += ["--report", str(out), "--index-url", url, *args]
        subprocess.run(pip, check=True, env=wheels.isolated_pip_env())
        reports.append(json.loads(out.read_text()))
    pins = resolve.pins_from_reports(reports, roots)
    served = {wheels.sha256_file(f) for f in (index.root / "files").iterdir()}
    assert {p.sha256 for p in pins} <= served
    assert [p.version for p in pins if p.name == "torch"] == [
        "2.14.0+rocm10.1.0"
    ]  # the default release's, not the CPU one beside it
    # AMD's graph: torch[device-gfx1100] -> amd-torch-device-gfx1100 -> rocm-sdk-device-gfx1100
    assert {p.name for p in pins if p.target} == {"amd-torch-device-gfx1100", "rocm-sdk-device-gfx1100"}
    assert all(p.url.startswith(url.rsplit("/", 1)[0]) for p in pins)
