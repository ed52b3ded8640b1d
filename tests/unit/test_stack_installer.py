"""python_stack_installer: the commands the role emits for uv and for pip, uv's errors as one line (recorded
uv 0.13.9 output), and a real uv run refusing a changed wheel from a local file index (--require-hashes)."""

from __future__ import annotations

import functools
import hashlib
import html
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from radeonlab.roles.python_stack import pip_locked, plan
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.sandbox.wheelfiles import cache_dir

FIXTURES = Path(__file__).parents[1] / "fixtures" / "uv"
RUNNER = Path(pip_locked.__file__)
INDEX = ["--index-url", "http://10.0.0.5:8765/simple/"]


def test_uv_is_the_default_installer_and_pip_the_documented_fallback() -> None:
    assert plan.installer(DEFAULTS) == "uv"
    assert plan.installer({"python_stack_installer": "pip"}) == "pip"
    with pytest.raises(ValueError, match="python_stack_installer must be one of uv, pip, not 'conda'"):
        plan.installer({"python_stack_installer": "conda"})
    readme = (Path(plan.__file__).parent / "README.md").read_text()
    assert '| `python_stack_installer` | `"uv"` |' in readme


def test_the_uv_install_command_is_uv_pip_with_hashes_into_the_venv_with_its_cache() -> None:
    cmd = plan.install_command("uv", "/h/v", "/h/v/run.py", "/h/.cache/uv", INDEX)
    assert cmd[:2] == ["/h/v/bin/python", "/h/v/run.py"]  # through the one-line runner
    assert cmd[2] == pip_locked.CACHE_FIRST  # from uv's cache alone first (--offline), then online
    assert cmd[3:6] == ["/h/v/bin/uv", "pip", "install"]
    assert {"--require-hashes", "--no-deps"} <= set(cmd)
    assert cmd[cmd.index("--python") + 1] == "/h/v/bin/python"  # the venv, not uv's own choice
    assert cmd[cmd.index("--cache-dir") + 1] == "/h/.cache/uv"  # kept between deploys: re-installs link
    assert cmd[-2:] == INDEX and "--disable-pip-version-check" not in cmd
    # no uv.toml found from the working folder (root's home in a root deploy, unreadable to the training user)
    assert "--no-config" in cmd


def test_the_pip_install_command_is_unchanged_pip() -> None:
    cmd = plan.install_command("pip", "/h/v", "/h/v/run.py", "/h/.cache/uv", INDEX)
    assert cmd == [
        "/h/v/bin/python", "/h/v/run.py", "/h/v/bin/python", "-m", "pip", "install", "--require-hashes",
        "--no-deps", "--disable-pip-version-check", *INDEX,
    ]  # fmt: skip


def test_uv_itself_is_one_hash_pinned_line() -> None:
    line = plan.uv_pin_line(DEFAULTS)
    assert (
        line
        == f"uv=={DEFAULTS['python_stack_uv_version']} --hash=sha256:{DEFAULTS['python_stack_uv_sha256']}"
    )
    assert len(DEFAULTS["python_stack_uv_sha256"]) == 64


def test_uvs_hash_mismatch_by_url_becomes_one_line_with_file_and_host() -> None:
    lines = pip_locked.uv_mismatch_lines((FIXTURES / "hash-mismatch-by-url.txt").read_text())
    assert lines == [
        "radeonlab: hash mismatch: idna-3.20-py3-none-any.whl from 127.0.0.1:8799: expected sha256 "
        f"{'1' * 64}, received ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c; nothing "
        "from this install was installed"
    ]
    assert pip_locked.uv_mismatch_lines("error: No solution found when resolving dependencies") == []


def test_uvs_hash_mismatch_by_name_names_the_requirement_and_the_index() -> None:
    output = (FIXTURES / "hash-mismatch-by-name.txt").read_text()
    assert pip_locked.uv_mismatch_lines(output, "127.0.0.1:8799") == [
        f"radeonlab: hash mismatch: idna==3.20 from 127.0.0.1:8799: expected sha256 {'0' * 64}, received "
        "ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c; nothing from this install was "
        "installed"
    ]


def test_a_cache_refusal_seen_by_uv_becomes_the_same_one_line() -> None:
    body = (
        f"radeonlab wheel cache: idna-3.20-py3-none-any.whl: expected sha256 {'b' * 64}, received {'c' * 64}"
    )
    lock = f"idna==3.20 --hash=sha256:{'b' * 64}\n"
    output = (FIXTURES / "http-409.txt").read_text()
    assert pip_locked.refusal_lines(output, lock, fetch=lambda url: body) == [
        "radeonlab: hash mismatch: idna-3.20-py3-none-any.whl from 127.0.0.1:8798: expected sha256 "
        f"{'b' * 64}, received {'c' * 64} (the wheel cache refused to serve it); nothing from this install "
        "was installed"
    ]


# --- a real uv, PyPI's pinned wheel as the sandbox index serves it ------------------------------------------
def _uv(tmp: Path) -> Path:
    """The uv binary of the pinned wheel, from the sandbox's wheel cache (checked against the pin)."""
    wheel = next((cache_dir() / "pypi").glob(f"uv-{DEFAULTS['python_stack_uv_version']}-*.whl"), None)
    if wheel is None:
        pytest.skip(
            "the pinned uv wheel is not in the sandbox wheel cache (python -m radeonlab.sandbox.wheels)"
        )
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == DEFAULTS["python_stack_uv_sha256"]
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
        out = tmp / "uv"
        out.write_bytes(z.read(name))
    out.chmod(0o755)
    return out


def _wheel(folder: Path, value: int = 1) -> Path:
    """A minimal valid wheel (made here): demo-pkg 1.0 whose module holds VALUE = `value`."""
    files = {
        "demo_pkg/__init__.py": f"VALUE = {value}\n".encode(),
        "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        "demo_pkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [f"{n},,{len(b)}" for n, b in files.items()] + ["demo_pkg-1.0.dist-info/RECORD,,"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr("demo_pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _index(root: Path, wheel: Path) -> str:
    """A PEP 503 simple index on disk (file:// URL) linking the wheel with its sha256 now."""
    page = root / "simple" / "demo-pkg" / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    href = html.escape(f"../../files/{wheel.name}#sha256={sha}")
    page.write_text(f'<!DOCTYPE html><html><body><a href="{href}">{wheel.name}</a></body></html>\n')
    return f"file://{root}/simple"


def _install(
    tmp: Path, uv: Path, index: str, lock: Path, name: str
) -> tuple[subprocess.CompletedProcess, Path]:
    venv = tmp / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    os.symlink(uv, venv / "bin" / "uv")
    cmd = plan.install_command("uv", str(venv), str(RUNNER), str(tmp / "uv-cache"), ["--index-url", index])
    cmd[0] = sys.executable  # the runner needs only the standard library
    done = subprocess.run([*cmd, "-r", str(lock)], capture_output=True, text=True, timeout=120)
    return done, venv


def _installed(venv: Path) -> list[Path]:
    return list((venv / "lib").glob("python*/site-packages/demo_pkg/__init__.py"))


def test_uv_refuses_another_wheel_under_the_locked_name_in_one_line(tmp_path: Path) -> None:
    uv = _uv(tmp_path)
    original = _wheel(tmp_path / "orig-idx" / "files")
    locked = hashlib.sha256(original.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    lock.write_text(f"demo-pkg==1.0 --hash=sha256:{locked}\n")
    other = _wheel(tmp_path / "idx" / "files", value=2)  # same name and version, other bytes
    refused, venv = _install(tmp_path, uv, _index(tmp_path / "idx", other), lock, "refused")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.splitlines() == [
        f"radeonlab: hash mismatch: demo-pkg==1.0 from this host's disk: expected sha256 {locked}, received "
        f"{hashlib.sha256(other.read_bytes()).hexdigest()}; nothing from this install was installed"
    ]
    assert not _installed(venv)
    ok, venv = _install(tmp_path, uv, _index(tmp_path / "orig-idx", original), lock, "ok")
    assert ok.returncode == 0 and ok.stdout.startswith("Installed 1 package in"), ok.stdout + ok.stderr
    assert _installed(venv)


def test_uv_refuses_a_changed_byte_in_a_file_locked_by_url_in_one_line(tmp_path: Path) -> None:
    """As the deploy's own lock installs (`name @ URL --hash=...`): a flipped byte stops uv's unpacking
    before its hash check; the runner hashes the file and says the same one line."""
    uv = _uv(tmp_path)
    wheel = _wheel(tmp_path / "files")
    locked = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = tmp_path / "lock.txt"
    lock.write_text(f"demo-pkg @ file://{wheel} --hash=sha256:{locked}\n")
    changed = bytearray(wheel.read_bytes())
    changed[len(changed) // 2] ^= 0xFF
    wheel.write_bytes(changed)
    (tmp_path / "empty" / "simple").mkdir(parents=True)  # no index page is read for a line by URL
    refused, venv = _install(tmp_path, uv, f"file://{tmp_path}/empty/simple", lock, "refused")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.splitlines() == [
        f"radeonlab: hash mismatch: {wheel.name} from this host's disk: expected sha256 {locked}, received "
        f"{hashlib.sha256(changed).hexdigest()}; nothing from this install was installed"
    ]
    assert not _installed(venv)


class _StaleHandler(SimpleHTTPRequestHandler):
    """Python's file server (as the sandbox's index), every answer stale at once (max-age=0): uv revalidates
    what it cached, and this server's 304 carries no Last-Modified (uv 0.13.9: "unusable 304")."""

    requests: list[tuple[str, str]]

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=0")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        self.requests.append((self.command, str(args[1]) if len(args) > 1 else "?"))


@contextmanager
def _stale_server(root: Path) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    requests: list[tuple[str, str]] = []
    handler = type("Handler", (_StaleHandler,), {"requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_reinstall_from_the_same_lock_links_from_uvs_cache_and_asks_no_index(tmp_path: Path) -> None:
    """A new venv, the same lock by URL, the cache the first install left, its answers stale: the role's
    command (--cache-first) makes no request; the same uv command online fetches the wheel again to read
    its METADATA (the cause: the server's 304 is unusable to uv, and it takes no range requests)."""
    uv = _uv(tmp_path)
    wheel = _wheel(tmp_path / "www" / "files")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with _stale_server(tmp_path / "www") as (url, requests):
        lock = tmp_path / "lock.txt"
        lock.write_text(f"demo-pkg @ {url}/files/{wheel.name} --hash=sha256:{sha}\n")
        first, venv = _install(tmp_path, uv, f"{url}/simple", lock, "first")
        assert first.returncode == 0 and first.stdout.startswith("Installed 1 package in"), first.stdout
        assert pip_locked.FROM_CACHE not in first.stdout  # an empty cache: the run online fetched it
        assert ("GET", "200") in requests and _installed(venv)
        requests.clear()
        again, venv = _install(tmp_path, uv, f"{url}/simple", lock, "again")
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.strip().endswith(f"({pip_locked.FROM_CACHE})"), again.stdout
        assert requests == [] and _installed(venv)
        venv = tmp_path / "online"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        os.symlink(uv, venv / "bin" / "uv")
        cmd = plan.install_command("uv", str(venv), str(RUNNER), str(tmp_path / "uv-cache"), [])
        uv_alone = cmd[cmd.index(pip_locked.CACHE_FIRST) + 1 :]  # the same uv command, without the runner
        done = subprocess.run([*uv_alone, "-r", str(lock)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert requests.count(("GET", "200")) >= 1, requests  # uv's behaviour the runner steps around
