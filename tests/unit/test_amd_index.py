"""The SIMULATED AMD index is generated from AMD's documents (sandbox/amdworld/*.yaml), never from the
product's tables: what it serves per release, the `rocm` selector sdist's build (requirements per extra,
target selection, the rocm_sdk module and `rocm-sdk targets`), and the verify check a host fails without
amd-torch-device-<gfx>."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from radeonlab.roles.verify import record as rec
from radeonlab.sandbox import amddata, amdsdist, amdwheels, wheels

SANDBOX = Path(amddata.__file__).parent


def test_the_amd_generation_reads_amds_data_not_the_products_tables() -> None:
    for module in ("amddata.py", "amdwheels.py", "amdsdist.py"):
        assert "radeonlab.roles" not in (SANDBOX / module).read_text(), module
    by_version = {r.version: r for r in amddata.releases()}
    assert by_version["10.1.0"].torch_version == "2.14.0+rocm10.1.0"  # newest production, its torch 2.14
    assert by_version["10.0.0"].torch_version == "2.13.0+rocm10.0.0"
    assert amddata.newest_production() == "10.1.0"
    assert {"gfx1100", "gfx1201", "gfx1031", "gfx1151"} <= set(amddata.device_targets())
    extras = amddata.rocm_extras("10.1.0", ("gfx1100", "gfx1201"))
    assert extras[""] == ["rocm-sdk-core==10.1.0"]
    assert extras["libraries"] == ["rocm-sdk-core==10.1.0", "rocm-sdk-libraries==10.1.0"]
    assert extras["device-gfx1201"] == ["rocm-sdk-device-gfx1201==10.1.0"]
    assert extras["device-all"] == ["rocm-sdk-device-gfx1100==10.1.0", "rocm-sdk-device-gfx1201==10.1.0"]
    assert amddata.requires("rocm-sdk-device-T", "10.1.0") == ["rocm-sdk-libraries==10.1.0"]


def _build(sdist: Path, out: Path, env: dict[str, str]) -> dict[str, object]:
    """Build the sdist's wheel with its own backend, as pip does; its METADATA and _dist_info."""
    with tarfile.open(sdist) as tar:
        tar.extractall(out, filter="data")
    src = next(out.glob("rocm-*"))
    code = f"import rocm_backend; print(rocm_backend.build_wheel({str(out)!r}))"
    name = subprocess.run(
        [sys.executable, "-c", code], cwd=src, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    with zipfile.ZipFile(out / name) as z:
        meta = email.message_from_string(z.read(f"rocm-{name.split('-')[1]}.dist-info/METADATA").decode())
        info = z.read("rocm_sdk/_dist_info.py").decode()
        labelled = z.read("rocm_sdk/SIMULATED.txt").decode()
    return {"name": name, "meta": meta, "info": info, "labelled": labelled}


def test_the_rocm_sdist_builds_requirements_per_extra_and_selects_a_target(tmp_path: Path) -> None:
    targets = ("gfx1100", "gfx1201")
    sdist = amdsdist.rocm_sdist("10.1.0", amddata.rocm_extras("10.1.0", targets), "gfx1100", tmp_path)
    again = amdsdist.rocm_sdist("10.1.0", amddata.rocm_extras("10.1.0", targets), "gfx1100", tmp_path / "b")
    assert sdist.read_bytes() == again.read_bytes()  # the same bytes each time: its sha256 can be locked
    env = {**os.environ, "ROCM_SDK_TARGET_FAMILY": "gfx1201"}
    built = _build(sdist, tmp_path / "env", env)
    meta = built["meta"]
    assert built["name"] == "rocm-10.1.0-py3-none-any.whl" and meta["Summary"].startswith("SIMULATED")
    requires = meta.get_all("Requires-Dist")
    assert "rocm-sdk-core==10.1.0" in requires
    assert 'rocm-sdk-libraries==10.1.0; extra == "libraries"' in requires
    assert 'rocm-sdk-device-gfx1201==10.1.0; extra == "device-gfx1201"' in requires
    assert "SELECTED_TARGET = 'gfx1201'" in built["info"] and "ROCM_SDK_TARGET_FAMILY" in built["info"]
    assert built["labelled"].startswith("SIMULATED")
    env.pop("ROCM_SDK_TARGET_FAMILY")
    # no variable: the GPU found in the KFD topology, else the default (this machine has no AMD GPU node)
    fallback = _build(sdist, tmp_path / "env2", env)["info"]
    assert "SELECTED_TARGET = 'gfx" in fallback


@pytest.mark.slow
def test_rocm_installs_from_its_sdist_and_rocm_sdk_lists_the_installed_targets(tmp_path: Path) -> None:
    """pip builds the sdist (its own backend, no build requirement) and resolves the data's graph;
    `rocm-sdk targets` and rocm_sdk.initialize_process work as AMD's; a wrong version warns."""
    links = tmp_path / "links"
    extras = amddata.rocm_extras("10.0.0", ("gfx1100", "gfx1201"))
    amdsdist.rocm_sdist("10.0.0", extras, "gfx1100", links)
    for project in ("rocm-sdk-core", "rocm-sdk-libraries"):
        amdwheels.standin_wheel(project, "10.0.0", [], links)
    amdwheels.standin_wheel("rocm-sdk-device-gfx1100", "10.0.0", ["rocm-sdk-libraries==10.0.0"], links)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(links)]
    subprocess.run(
        [*pip, "rocm[libraries,device-gfx1100]==10.0.0"], check=True, env=wheels.isolated_pip_env()
    )
    targets = subprocess.run([str(venv / "bin/rocm-sdk"), "targets"], capture_output=True, text=True)
    assert targets.stdout.strip() == "gfx1100", targets
    code = (
        "import warnings, rocm_sdk\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    rocm_sdk.initialize_process(preload_shortnames=['amdhip64'], check_version='10.0.0')\n"
        "    rocm_sdk.initialize_process(check_version='10.1.0')\n"
        "print(len(w), str(w[0].message))"
    )
    said = subprocess.run([str(venv / "bin/python"), "-c", code], capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "1 rocm_sdk 10.0.0 is installed, torch was built for ROCm 10.1.0"


def test_verify_fails_amds_torch_without_the_hosts_device_package_in_one_line() -> None:
    report = {  # as check_stack.py writes it for the SIMULATED stand-in: AMD's distribution, CPU code inside
        "torch": "2.13.0+cpu",  # torch.__version__ of the stand-in's code
        "versions": {"torch": "2.14.0+rocm10.1.0"},  # the installed distribution (importlib.metadata)
        "cpu_build": True,  # a real AMD build fails the same way before any GPU check
        "packages": {"torch": "2.14.0+rocm10.1.0", "rocm-sdk-device-gfx1100": "10.1.0", "rocm": "10.1.0"},
    }
    gpus = [object()]  # stack_problem only asks whether there is a GPU
    problem = rec.stack_problem(report, gpus, False, True, ["gfx1100"])  # type: ignore[arg-type]
    assert problem is not None and "\n" not in problem
    assert problem.startswith("amd-torch-device-gfx1100 not installed: AMD's torch 2.14.0+rocm10.1.0")
    report["packages"]["amd-torch-device-gfx1100"] = "2.14.0+rocm10.1.0"  # type: ignore[index]
    assert rec.stack_problem(report, gpus, False, True, ["gfx1100"]) is None  # type: ignore[arg-type]
    cpu = {**report, "versions": {"torch": "2.13.0+cpu"}, "packages": {}}  # not AMD's build: none needed
    assert rec.stack_problem(cpu, gpus, False, True, ["gfx1100"]) is None  # type: ignore[arg-type]


def test_builders_of_the_same_sdist_at_once_both_finish_with_the_same_bytes(tmp_path: Path) -> None:
    """Two test workers (or sessions) building one cached artefact at once: each writes its own partial
    file, so neither finds its partial renamed away by the other (FileNotFoundError before)."""
    targets = ["gfx1100"]
    extras = amddata.rocm_extras("10.1.0", targets)

    def build(_: int) -> bytes:
        return amdsdist.rocm_sdist("10.1.0", extras, "gfx1100", tmp_path).read_bytes()

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = list(pool.map(build, range(16)))
    assert len(set(made)) == 1 and not list(tmp_path.glob("*.partial"))
