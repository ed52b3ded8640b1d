"""End to end: no lock anywhere. The first deploy resolves the stack once per GPU target set against the
SIMULATED AMD index (generated from sandbox/amdworld/*.yaml), writes the lab's lock, and every later host
installs from it with --require-hashes and reads no index page; a changed byte in a served file fails the
next host in one line and leaves nothing of that install.

The index's request log (sandbox/web.py, served in this process) tells a resolution (GETs of /simple/<name>/
pages) from a locked install (files only: its lines name the recorded files, lock.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from radeonlab.roles.python_stack import RUNNER_FILE, pip_locked, plan
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.sandbox import aptrepo, web, wheels
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.wheelfiles import standin_torch_version
from tests.support.provisioned import Run, run_deploy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

CARDS = {"fd-1100": "rx7900xtx", "fd-1201": "rx9070xt", "fd-1151": "strixhalo"}
KEY = "amd-rocm10.1-py3.11-torch2.14.0-lf0.9.5"
VENV = "/home/lab/radeonlab/venv"
RUNNER = f"{VENV}/{RUNNER_FILE}"  # the role's locked-install runner (pip_locked.py) on each host


@dataclass
class Lab:
    sandbox: Sandbox
    server: web.WebServer
    index: wheels.WheelIndexInfo
    data: dict
    hosts: dict[str, SandboxHost]
    first: Run
    served_first: dict[str, web.Served]
    locks_dir: Path
    seconds: dict[str, float] = field(default_factory=dict)  # one fresh host's deploy, per installer
    first_done: float = field(default_factory=time.monotonic)  # when the first deploy ended

    @property
    def lock(self) -> stack_lock.Lock:
        return stack_lock.parse_lock((self.locks_dir / f"{KEY}.txt").read_text(), KEY)


def simple_pages(
    served: dict[str, web.Served], before: dict[str, web.Served] | None = None
) -> dict[str, int]:
    """GETs of index pages (/pypi/simple/<name>/) since `before`: what a resolution reads."""
    before = before or {}
    out = {}
    for path, s in served.items():
        n = s.requests - before.get(path, web.Served()).requests
        if path.startswith("/pypi/simple/") and n:
            out[path] = n
    return out


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    repo = aptrepo.build_repo(sandbox.state_dir)
    index = wheels.build_wheel_index(sandbox.state_dir)
    # A lock folder of this module's own: "no lock anywhere", whatever the session's other hosts wrote into
    # the sandbox's shared one (with their index's address) before this module runs.
    locks_dir = tmp_path_factory.mktemp("first-deploy-locks")
    with web.serve(sandbox.www_dir) as server:
        data = {**repo.settings(server.url), **index.settings(server.url), "sandbox_groups": ["firstdeploy"]}
        data["python_stack_lock_dir"] = str(locks_dir)
        hosts = {n: sandbox.create_host(n, card=c, data=data) for n, c in CARDS.items()}
        try:
            first = run_deploy(sandbox, list(hosts.values()))
            assert first.returncode == 0, first.stderr[-5000:]
            yield Lab(sandbox, server, index, data, hosts, first, server.served(), locks_dir)
        finally:
            for name in list(sandbox.hosts):
                if name.startswith("fd-"):
                    sandbox.destroy_host(name)


def test_no_lock_anywhere_resolves_once_per_target_set_into_the_labs_lock(lab: Lab) -> None:
    lock = lab.lock
    by = {(p.name, p.target): p for p in lock.pins}
    assert by[("torch", "")].version == "2.14.0+rocm10.1.0"
    rocm = by[("rocm", "")]  # AMD's selector: the sdist, locked by its hash like any file
    served_rocm = lab.index.root / "files" / "rocm-10.1.0.tar.gz"
    assert rocm.url.endswith("/rocm-10.1.0.tar.gz")
    assert rocm.sha256 == hashlib.sha256(served_rocm.read_bytes()).hexdigest()
    assert {("rocm-sdk-core", ""), ("rocm-sdk-libraries", "")} <= set(by)
    for gfx in ("gfx1100", "gfx1201", "gfx1151"):
        assert {(f"rocm-sdk-device-{gfx}", gfx), (f"amd-torch-device-{gfx}", gfx)} <= set(by), gfx
    assert "wrote the lab's hash lock" in lab.first.stderr and str(lab.locks_dir) in lab.first.stderr
    # one resolution per target set: three hosts, three GPU targets, three reads of torch's page
    torch_pages = sum(
        n for p, n in simple_pages(lab.served_first).items() if p.startswith("/pypi/simple/torch/")
    )
    print(f"\nfirst deploy of 3 hosts: {lab.first.seconds:.1f}s; /simple/torch/ read {torch_pages} times")
    assert torch_pages == 3, simple_pages(lab.served_first)


def test_the_stand_in_torch_imports_through_rocm_sdk_with_its_targets_package(lab: Lab) -> None:
    h = lab.hosts["fd-1201"]
    # torch/__init__.py calls _rocm_init.initialize(), which calls rocm_sdk.initialize_process (PRELOADED is
    # what it was asked to preload); torch.__version__ is the CPU code's own, the distribution is AMD's
    code = (
        "import importlib.metadata as m, torch, rocm_sdk; "
        "print(m.version('torch'), rocm_sdk.__version__, torch.__version__, rocm_sdk.PRELOADED)"
    )
    said = h.exec(f"{VENV}/bin/python -c {code!r}", user="lab")
    assert said.returncode == 0, said.stderr[-2000:]
    cpu = f"{standin_torch_version()}+cpu"  # the code is the machine's CPU build
    assert said.stdout.split()[:3] == ["2.14.0+rocm10.1.0", "10.1.0", cpu], said.stdout
    assert "amdhip64" in said.stdout
    assert h.exec(f"{VENV}/bin/rocm-sdk targets", user="lab").stdout.strip() == "gfx1201"
    freeze = h.exec(f"{VENV}/bin/pip freeze", user="lab").stdout  # installed by URL: "name @ URL" lines
    assert "amd-torch-device-gfx1201 @ " in freeze and "amd-torch-device-gfx1100" not in freeze


def test_a_further_host_of_a_known_target_installs_from_the_lock_and_reads_no_index_page(lab: Lab) -> None:
    before = lab.server.served()
    h = lab.sandbox.create_host("fd-1100b", card="rx7900xtx", data=lab.data)
    run = run_deploy(lab.sandbox, [h])
    assert run.returncode == 0, run.stderr[-5000:]
    lab.seconds["uv"] = run.seconds
    changed = run.changed_ops(h.name)
    assert any("Install the hash-locked stack" in op for op in changed), changed
    assert any("| Install uv " in op for op in changed), changed  # the default installer, first
    assert not any("Resolve the stack" in op for op in changed), changed
    pages = simple_pages(lab.server.served(), before)
    # no resolution of the stack: files only. uv, the installer, is pinned by name and hash: its one page.
    assert pages == {"/pypi/simple/uv/": 1}, pages
    lines = (h.root / VENV.lstrip("/") / "radeonlab-lock.txt").read_text()
    assert f"torch @ {lab.server.url}" in lines and "--hash=sha256:" in lines
    assert "amd-torch-device-gfx1100 @ " in lines and "gfx1201" not in lines


def test_the_pip_fallback_installs_the_same_locked_files_without_uv(lab: Lab) -> None:
    h = lab.sandbox.create_host(
        "fd-1100p", card="rx7900xtx", data={**lab.data, "python_stack_installer": "pip"}
    )
    run = run_deploy(lab.sandbox, [h])
    assert run.returncode == 0, run.stderr[-5000:]
    lab.seconds["pip"] = run.seconds
    changed = run.changed_ops(h.name)
    assert any("Install the hash-locked stack" in op for op in changed), changed
    assert not [op for op in changed if re.search(r"\buv\b", op)], changed
    freeze = h.exec(f"{VENV}/bin/pip freeze", user="lab").stdout
    assert "uv==" not in freeze and not (h.root / VENV.lstrip("/") / "bin" / "uv").exists()
    by_uv = lab.sandbox.hosts["fd-1100b"].exec(f"{VENV}/bin/pip freeze --exclude uv", user="lab")
    assert sorted(freeze.splitlines()) == sorted(by_uv.stdout.splitlines())  # the lock's files, by URL
    # one fresh host, same card, same lock: the whole deploy, once each (a measurement, not a goal)
    print(f"\nfresh rx7900xtx host's deploy: uv {lab.seconds.get('uv', 0):.1f}s, pip {run.seconds:.1f}s")


def test_the_roles_uv_installs_the_hosts_lock_from_the_deploys_cache_alone(lab: Lab) -> None:
    """On the uv host, the role's own uv command (through the runner, --cache-first) into a fresh venv, with
    the cache the deploy left (python_stack_uv_cache_dir): it installs the lock's files, verified, and
    fetches none: uv's cache alone serves the lock. (pip's and an empty cache's times are the bench's, not a
    test's: the pip fallback is tested above, an empty cache by the first deploy.)"""
    h = lab.sandbox.hosts["fd-1100b"]
    lock = f"{VENV}/radeonlab-lock.txt"
    role = plan.install_command("uv", "/tmp/m-uv2", RUNNER, "/home/lab/.cache/uv", [])
    command = (
        f"python3 -m venv /tmp/m-uv2 && ln -s {VENV}/bin/uv /tmp/m-uv2/bin/uv && {shlex.join(role)} -r {lock}"
    )
    before = lab.server.served()
    done = h.exec(command, user="lab", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    fetched = sum(
        s.requests - before.get(p, web.Served()).requests
        for p, s in lab.server.served().items()
        if p.startswith("/pypi/files/")
    )
    assert fetched == 0
    assert done.stdout.strip().endswith(f"({pip_locked.FROM_CACHE})"), done.stdout
    installed = h.exec("/tmp/m-uv2/bin/python -m pip list --format=freeze", user="lab").stdout
    assert "peft==" in installed and "llamafactory==" in installed.lower(), installed


def test_a_reinstall_on_a_resolving_host_takes_every_locked_file_from_uvs_cache(lab: Lab) -> None:
    """fd-1100 resolved its GPU target into the lab's lock in the first deploy and installed from it with
    uv. Its venv removed, a deploy makes it again and installs the same lock lines (by URL, the same uv
    flags and cache): the index serves none of the lock's files. Then the role's command into a second
    venv says it ran offline, from uv's cache alone: what holds however old the cache's answers are (uv,
    online, revalidates one older than its freshness, and the SIMULATED index's 304 is unusable to it:
    every wheel is read again for its METADATA, tests/unit/test_stack_installer.py)."""
    h = lab.hosts["fd-1100"]
    freeze = f"{VENV}/bin/pip freeze --exclude uv"
    before_freeze = sorted(h.exec(freeze, user="lab").stdout.splitlines())
    lines = (h.root / VENV.lstrip("/") / "radeonlab-lock.txt").read_text()
    pins = [ln for ln in lines.splitlines() if ln.strip() and not ln.startswith("#")]
    assert pins and all(" @ " in ln for ln in pins), lines  # every line by URL, as the first install
    files = {urlsplit(u).path for u in re.findall(r" @ (\S+) --hash=", lines)}
    gone = h.exec(f"rm -rf {VENV}", user="lab")
    assert gone.returncode == 0 and not (h.root / VENV.lstrip("/")).exists(), gone.stderr
    age = time.monotonic() - lab.first_done
    before = lab.server.served()
    run = run_deploy(lab.sandbox, [h])
    assert run.returncode == 0, run.stderr[-5000:]
    changed = run.changed_ops(h.name)
    assert any("Install the hash-locked stack" in op for op in changed), changed
    assert not any("Resolve the stack" in op for op in changed), changed
    served = lab.server.served()
    fetched = {
        p: n
        for p in files
        if (n := served.get(p, web.Served()).requests - before.get(p, web.Served()).requests)
    }
    assert fetched == {}, fetched
    assert sorted(h.exec(freeze, user="lab").stdout.splitlines()) == before_freeze
    role = plan.install_command("uv", "/tmp/re-uv", RUNNER, "/home/lab/.cache/uv", [])
    before = lab.server.served()
    again = h.exec(
        f"python3 -m venv /tmp/re-uv && ln -s {VENV}/bin/uv /tmp/re-uv/bin/uv && {shlex.join(role)} "
        f"-r {VENV}/radeonlab-lock.txt",
        user="lab",
    )
    assert again.returncode == 0, again.stderr[-2000:]
    said = again.stdout.strip()
    assert said.startswith(f"Installed {len(files)} packages in "), said
    assert said.endswith(f"({pip_locked.FROM_CACHE})"), said
    served = lab.server.served()
    assert [p for p in files if served.get(p) != before.get(p)] == []
    print(
        f"\nre-install of {len(files)} locked files into a new venv on a resolving host, uv's cache "
        f"{age:.0f}s old: {len(fetched)} fetched (the deploy, {run.seconds:.1f}s); a second venv: {said}"
    )


def test_one_changed_byte_in_a_served_file_fails_the_next_host_in_one_line_and_keeps_nothing(
    lab: Lab,
) -> None:
    """The same refusal under uv (the default) and under the pip fallback, two fresh hosts in one run: one
    line each, naming the file, its host and both hashes, and nothing of that install kept."""
    served = lab.index.root / "files" / "peft-0.18.1-py3-none-any.whl"
    original = served.with_suffix(".orig")
    os.replace(served, original)  # the served file is a hard link into the shared cache: never write to it
    try:
        changed = bytearray(original.read_bytes())
        changed[len(changed) // 2] ^= 0xFF
        served.write_bytes(changed)
        by_uv = lab.sandbox.create_host("fd-1100c", card="rx7900xtx", data=lab.data)
        by_pip = lab.sandbox.create_host(
            "fd-1100d", card="rx7900xtx", data={**lab.data, "python_stack_installer": "pip"}
        )
        run = run_deploy(lab.sandbox, [by_uv, by_pip])
    finally:
        served.unlink(missing_ok=True)
        os.replace(original, served)
    assert run.returncode != 0
    stderr = re.sub(r"\x1b\[[0-9;]*m", "", run.stderr)
    said = [
        ln for ln in stderr.splitlines() if "radeonlab: hash mismatch: peft-0.18.1-py3-none-any.whl" in ln
    ]
    locked = next(p.sha256 for p in lab.lock.pins if p.name == "peft")
    for h in (by_uv, by_pip):
        mine = [ln for ln in said if f"[{h.name}]" in ln]
        assert len(mine) == 1, (h.name, stderr[-3000:])
        assert f" from {urlsplit(lab.server.url).netloc}: expected sha256 {locked}, received " in mine[0]
        assert f"expected sha256 {locked}, received {hashlib.sha256(changed).hexdigest()}" in mine[0]
        # nothing of that install: only uv, the installer, installed by its own step before it (uv's host)
        assert h.exec(f"{VENV}/bin/pip freeze --exclude uv", user="lab").stdout.strip() == ""
    assert len(said) == 2, stderr[-3000:]
    assert "THESE PACKAGES DO NOT MATCH" not in stderr  # pip's own block is not shown
    assert "Hash mismatch for" not in stderr  # nor uv's
    assert "uv==" in by_uv.exec(f"{VENV}/bin/pip freeze", user="lab").stdout
    assert "uv==" not in by_pip.exec(f"{VENV}/bin/pip freeze", user="lab").stdout


def test_torch_without_its_targets_device_package_fails_verify_in_one_line_and_a_deploy_repairs_it(
    lab: Lab,
) -> None:
    """AMD's torch with no amd-torch-device-<gfx> has no kernels for the card (the mistake the product once
    made): verify fails the host in one line naming the package; deploy/setup.py installs it again."""
    h = lab.hosts["fd-1201"]
    gone = h.exec(f"{VENV}/bin/pip uninstall -y amd-torch-device-gfx1201", user="lab")
    assert gone.returncode == 0, gone.stderr[-2000:]
    verify = run_deploy(lab.sandbox, [h], deploy="deploy/verify.py")
    assert verify.returncode != 0
    said = [ln for ln in verify.stderr.splitlines() if "amd-torch-device-gfx1201 not installed" in ln]
    assert len(said) == 1, verify.stderr[-3000:]
    assert "re-run deploy/setup.py" in said[0]
    repaired = run_deploy(lab.sandbox, [h])
    assert repaired.returncode == 0, repaired.stderr[-3000:]
    assert any("Install the hash-locked stack" in op for op in repaired.changed_ops(h.name))
    assert run_deploy(lab.sandbox, [h], deploy="deploy/verify.py").returncode == 0
