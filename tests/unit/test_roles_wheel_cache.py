"""roles/wheel_cache without hosts: which host is the cache, the URL hosts install from, the pip downloads,
and the index builder run locally on a folder of (empty, test-made) wheel files."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK
from radeonlab.roles.python_stack.plan import PythonChoice
from radeonlab.roles.wheel_cache import plan, serve
from radeonlab.roles.wheel_cache.defaults import DEFAULTS

BUILD_INDEX = Path(plan.__file__).with_name("build_index.py")


def test_cache_host_from_setting_then_group() -> None:
    groups = {"wheel_cache": ["ws3", "ws4"], "all": ["ws1", "ws3", "ws4"]}
    assert plan.cache_host_name(DEFAULTS, groups) == "ws3"
    assert plan.cache_host_name({**DEFAULTS, "wheel_cache_host": "ws1"}, groups) == "ws1"
    assert plan.cache_host_name(DEFAULTS, {"all": ["ws1"]}) is None


def test_url_composed_from_the_cache_hosts_address_unless_given() -> None:
    assert plan.cache_url(DEFAULTS, "ws3", {"ssh_hostname": "10.0.0.3"}) == "http://10.0.0.3:8765/simple/"
    assert plan.cache_url(DEFAULTS, "ws3", {}) == "http://ws3:8765/simple/"
    given = {**DEFAULTS, "wheel_cache_url": "http://mirror.lan/simple/"}
    assert plan.cache_url(given, "ws3", {"ssh_hostname": "10.0.0.3"}) == "http://mirror.lan/simple/"
    sources = plan.python_stack_sources("http://c:1/simple/")
    assert sources == {
        "pytorch_index_url": "http://c:1/simple/",
        "python_stack_index_url": "http://c:1/simple/",
        "pytorch_find_links": [],
    }


def test_python_version_follows_what_python_stack_trains_with() -> None:
    assert plan.python_version(DEFAULTS, PythonChoice("python3", False), "3.12.3") == "3.12"
    assert plan.python_version(DEFAULTS, PythonChoice("python3.11", True), "3.10.12") == "3.11"
    assert (
        plan.python_version(
            {**DEFAULTS, "wheel_cache_python_version": "3.13"}, PythonChoice("python3", False), "3.12.3"
        )
        == "3.13"
    )


PT = {**STACK, "pytorch_source": "pytorch"}


def test_one_hash_checked_download_of_the_labs_lines_of_the_lock() -> None:
    upstream = plan.Upstream.from_stack(STACK, "10.0", ["gfx1100", "gfx1031", "gfx1100"])
    assert upstream.targets == ("gfx1031", "gfx1100")
    cmd = shlex.split(plan.download_command(upstream, "/c", "3.11"))
    assert cmd[:2] == ["/c/.pip-venv/bin/pip", "download"]
    assert {"--require-hashes", "--no-deps"} <= set(cmd)
    assert "--only-binary=:all:" not in cmd  # AMD's `rocm` selector is an sdist: locked by hash like a wheel
    assert cmd[-2:] == ["-r", "/c/lock.txt"] and cmd[cmd.index("--dest") + 1] == "/c/files"
    assert cmd[cmd.index("--python-version") + 1] == "3.11"
    assert "--index-url" not in cmd  # python_stack_index_url's default: pip's own index
    assert cmd[cmd.index("--extra-index-url") + 1] == "https://stable.repo.amd.com/rocm/whl-next/"
    same = plan.Upstream("http://mirror/simple/", (), "http://mirror/simple/")
    assert "--extra-index-url" not in plan.download_command(same, "/c", "3.11")


def test_digest_changes_with_the_labs_lock_and_sources() -> None:
    upstream = plan.Upstream.from_stack(PT, "7.2.4")
    base = plan.lock_digest("a==1 --hash=sha256:00\n", upstream, "3.11")
    assert base == plan.lock_digest("a==1 --hash=sha256:00\n", upstream, "3.11")
    assert base != plan.lock_digest("a==1 --hash=sha256:01\n", upstream, "3.11")  # a new hash: fetch again
    assert base != plan.lock_digest("a==1 --hash=sha256:00\n", plan.Upstream.from_stack(PT, "7.1.0"), "3.11")
    assert base != plan.lock_digest("a==1 --hash=sha256:00\n", upstream, "3.12")


def test_the_cache_serves_every_hosts_extras() -> None:
    extras = plan.lab_extras(PT, [["tensorboard"], [], ["wandb", "TensorBoard"]])
    assert extras == ["tensorboard==2.21.0", "wandb==0.31.0"]  # the union, each once, at its pin


def test_an_unpinned_extra_on_any_host_is_refused() -> None:
    with pytest.raises(ValueError, match="'flash-attn' has no pinned version"):
        plan.lab_extras(STACK, [["tensorboard"], ["flash-attn"]])


def _lock_for(files: dict[str, bytes]) -> str:
    return "".join(
        f"{n.split('-')[0].lower()}=={n.split('-')[1]} --hash=sha256:{hashlib.sha256(b).hexdigest()}\n"
        for n, b in files.items()
    )


def test_index_builder_writes_pep503_pages_for_the_locked_files_only(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    wheels = {"torch-2.13.0+rocm7.2-cp311-cp311-linux_x86_64.whl": b"t", "PyYAML-6.0.4-cp311-x.whl": b"y"}
    for name, body in wheels.items():
        (files / name).write_bytes(body)
    (files / "stray-1.0-py3-none-any.whl").write_bytes(b"s")  # not in the lock: never indexed nor served
    (tmp_path / "lock.txt").write_text(_lock_for(wheels))
    (tmp_path / "simple" / "gone").mkdir(parents=True)  # a project no longer cached
    build = [sys.executable, str(BUILD_INDEX), str(tmp_path), str(tmp_path / "lock.txt")]
    for _ in range(2):  # idempotent
        subprocess.run(build, check=True, capture_output=True)
    torch_page = (tmp_path / "simple/torch/index.html").read_text()
    digest = hashlib.sha256(b"t").hexdigest()
    assert (
        f'href="../../files/torch-2.13.0+rocm7.2-cp311-cp311-linux_x86_64.whl#sha256={digest}"' in torch_page
    )
    assert (tmp_path / "simple/pyyaml/index.html").exists()
    assert not (tmp_path / "simple/gone").exists() and not (tmp_path / "simple/stray").exists()
    assert '<a href="pyyaml/">' in (tmp_path / "simple/index.html").read_text()
    served = json.loads((tmp_path / ".lock-hashes.json").read_text())
    assert (
        sorted(served) == sorted(wheels)
        and served["PyYAML-6.0.4-cp311-x.whl"] == hashlib.sha256(b"y").hexdigest()
    )


def test_index_builder_refuses_a_file_that_does_not_match_the_lock(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files/peft-0.18.1-py3-none-any.whl").write_bytes(b"changed")
    (tmp_path / "lock.txt").write_text(_lock_for({"peft-0.18.1-py3-none-any.whl": b"original"}))
    build = [sys.executable, str(BUILD_INDEX), str(tmp_path), str(tmp_path / "lock.txt")]
    done = subprocess.run(build, capture_output=True, text=True)
    assert done.returncode == 1
    assert (
        "peft-0.18.1-py3-none-any.whl" in done.stderr
        and hashlib.sha256(b"original").hexdigest() in done.stderr
    )
    assert not (tmp_path / ".lock-hashes.json").exists()


def test_server_refuses_a_file_that_no_longer_matches_and_one_the_lock_lacks(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    wheel = tmp_path / "files/peft-0.18.1-py3-none-any.whl"
    wheel.write_bytes(b"original")
    (tmp_path / ".lock-hashes.json").write_text(
        json.dumps({wheel.name: hashlib.sha256(b"original").hexdigest()})
    )
    assert serve.check(str(tmp_path), f"/files/{wheel.name}") is None
    (tmp_path / "simple/peft").mkdir(parents=True)
    (tmp_path / "simple/peft/index.html").write_text("<a>peft</a>")
    assert serve.check(str(tmp_path), "/simple/peft/") is None  # pages are served as they are
    wheel.write_bytes(b"origina!")  # one byte changed, same size
    os.utime(wheel, ns=(1, 1))  # a new mtime even where writes land within one timestamp tick
    status, reason = serve.check(str(tmp_path), f"/files/{wheel.name}")  # type: ignore[misc]
    assert status == 409 and hashlib.sha256(b"origina!").hexdigest() in reason and "\n" not in reason
    wheel.write_bytes(b"original")
    os.utime(wheel, ns=(2, 2))
    assert serve.check(str(tmp_path), f"/files/{wheel.name}") is None  # restored: served again
    assert serve.check(str(tmp_path), "/files/other-1.0-py3-none-any.whl")[0] == 404  # type: ignore[index]


def test_server_reads_the_path_as_http_server_will_and_serves_index_and_locks_only(tmp_path: Path) -> None:
    """`/./files/X` and `/simple/../files/X` open the same file as `/files/X`: they are checked as it is (a
    tampered file got out with 200 through them); the lock, pip's venv and folder listings are not served."""
    (tmp_path / "files").mkdir()
    (tmp_path / "simple/peft").mkdir(parents=True)
    (tmp_path / "simple/peft/index.html").write_text("<a>peft</a>")
    (tmp_path / "venv").mkdir()
    wheel = tmp_path / "files/peft-0.18.1-py3-none-any.whl"
    wheel.write_bytes(b"tampered")
    locked = {wheel.name: hashlib.sha256(b"original").hexdigest()}
    (tmp_path / ".lock-hashes.json").write_text(json.dumps(locked))
    for spelling in ("/files/", "/./files/", "/simple/../files/", "//files/", "/files/./", "/%2e/files/"):
        refused = serve.check(str(tmp_path), f"{spelling}{wheel.name}")
        assert refused is not None and refused[0] == 409, spelling
    unlocked = tmp_path / "files/other-1.0-py3-none-any.whl"
    unlocked.write_bytes(b"x")
    refused = serve.check(str(tmp_path), "/simple/../files/other-1.0-py3-none-any.whl")
    assert refused is not None and refused[0] == 404
    for path in ("/", "/.lock-hashes.json", "/venv/", "/files/", "/simple/nope/", "/lock.txt"):
        refused = serve.check(str(tmp_path), path)
        assert refused is not None and refused[0] == 404, path
    assert serve.check(str(tmp_path), "/simple/peft/") is None


# --- the cache's server and the workstations' pip runner, for real, on loopback (no sandbox host) ---------
PIP_LOCKED = Path(plan.__file__).parent.parent / "python_stack" / "pip_locked.py"


def _tiny_wheel(folder: Path) -> Path:
    """A real, installable wheel of one module."""
    info = "radeonlab_tiny-1.0.dist-info"
    files = {
        "radeonlab_tiny.py": "X = 1\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: radeonlab-tiny\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    path = folder / "radeonlab_tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(name, text)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(argv: list[str], url: str) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1)
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{argv} does not answer")


def _install(tmp_path: Path, index: str) -> subprocess.CompletedProcess:
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir"]
    pip += ["--target", str(tmp_path / "target"), "--index-url", index]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    argv = [sys.executable, str(PIP_LOCKED), *pip, "--require-hashes", "--no-deps"]
    argv += ["-r", str(tmp_path / "lock.txt")]
    return subprocess.run(argv, capture_output=True, text=True, env={**env, "PIP_CONFIG_FILE": os.devnull})


def test_a_changed_wheel_is_refused_by_the_cache_and_by_pip_in_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "files").mkdir(parents=True)
    wheel = _tiny_wheel(cache / "files")
    locked = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (tmp_path / "lock.txt").write_text(f"radeonlab-tiny==1.0 --hash=sha256:{locked}\n")
    build = [sys.executable, str(BUILD_INDEX), str(cache), str(tmp_path / "lock.txt")]
    subprocess.run(build, check=True, capture_output=True)
    port = _free_port()
    index = f"http://127.0.0.1:{port}/simple/"
    server = _serve([sys.executable, str(Path(plan.__file__).with_name("serve.py")), "--bind", "127.0.0.1",
                     "--directory", str(cache), str(port)], index)  # fmt: skip
    try:
        ok = _install(tmp_path, index)
        assert ok.returncode == 0 and ok.stdout.startswith("Successfully installed radeonlab-tiny-1.0"), ok
        data = bytearray(wheel.read_bytes())
        data[-30] ^= 0xFF  # one byte, inside the zip's central directory
        wheel.write_bytes(bytes(data))
        changed = hashlib.sha256(bytes(data)).hexdigest()
        refused = _install(tmp_path, index)
    finally:
        server.kill()
        server.wait()
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"radeonlab: hash mismatch: {wheel.name} from 127.0.0.1:{port}: expected sha256 {locked}, received "
        f"{changed} (the wheel cache refused to serve it); nothing from this install was installed"
    ]
    # A cache that hands the changed file out anyway (a spoofed address, a plain static server): pip's own
    # hash check refuses it, and the runner says it in the same one line.
    spoofed = _serve([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(cache),
                      str(port)], index)  # fmt: skip
    try:
        pip_refused = _install(tmp_path, index)
    finally:
        spoofed.kill()
        spoofed.wait()
    assert pip_refused.returncode == 1
    assert pip_refused.stderr.splitlines() == [
        f"radeonlab: hash mismatch: {wheel.name} from 127.0.0.1:{port}: expected sha256 {locked}, received "
        f"{changed}; nothing from this install was installed"
    ]


def test_the_server_binds_the_lab_address_the_inventory_gives_not_every_interface() -> None:
    """It listened on 0.0.0.0 by default (every interface, lists and the lock too): now on the cache host's
    own lab address unless the inventory asks otherwise; a name that does not resolve is one line."""
    assert plan.bind_address({}, "ws1", {"ssh_hostname": "192.168.1.50"}) == "192.168.1.50"
    assert plan.bind_address({"wheel_cache_address": "10.0.0.7"}, "ws1", {"ssh_hostname": "x"}) == "10.0.0.7"
    assert plan.bind_address({}, "localhost", {}) == "127.0.0.1"  # a name, resolved where the deploy runs
    assert plan.bind_address({"wheel_cache_bind_address": "0.0.0.0"}, "ws1", {}) == "0.0.0.0"
    with pytest.raises(ValueError, match="does not resolve here: set wheel_cache_bind_address"):
        plan.bind_address({}, "no-such-host.invalid", {})


def test_the_running_server_refuses_every_spelling_of_a_tampered_or_unlocked_path(tmp_path: Path) -> None:
    """Issue 27 S8 against the real server on loopback: the request paths go out byte for byte
    (http.client does not normalise them), as a hostile pip or curl would send them."""
    cache = tmp_path / "cache"
    (cache / "files").mkdir(parents=True)
    wheel = _tiny_wheel(cache / "files")
    locked = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (tmp_path / "lock.txt").write_text(f"radeonlab-tiny==1.0 --hash=sha256:{locked}\n")
    subprocess.run([sys.executable, str(BUILD_INDEX), str(cache), str(tmp_path / "lock.txt")], check=True)
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    (cache / "files/unlocked-1.0-py3-none-any.whl").write_bytes(b"x")
    port = _free_port()
    server = _serve([sys.executable, str(Path(plan.__file__).with_name("serve.py")), "--bind", "127.0.0.1",
                     "--directory", str(cache), str(port)], f"http://127.0.0.1:{port}/simple/")  # fmt: skip

    def status(path: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        finally:
            conn.close()

    try:
        for spelling in ("/files/", "/./files/", "/simple/../files/", "//files/", "/%2e/files/"):
            assert status(f"{spelling}{wheel.name}") == 409, spelling
        assert status("/simple/../files/unlocked-1.0-py3-none-any.whl") == 404
        for path in ("/", "/files/", "/.lock-hashes.json", "/lock.txt"):
            assert status(path) == 404, path
        assert status("/simple/") == 200
    finally:
        server.kill()
        server.wait()
