"""End to end: three SIMULATED workstations provisioned through the lab wheel cache, then `radeonlab fleet`.

One provisioning run serves both (CI time): deploy/setup.py on three sandbox hosts, one of them the wheel
cache (roles/wheel_cache, chosen by the `wheel_cache_host` setting). "Outside the lab" is the sandbox's
local wheel index (standing in for PyPI and the PyTorch ROCm index), served in this process by a web server
that counts the bytes it serves per path: the torch wheel must leave it exactly once for three hosts.
The fleet tests then read the same hosts: all reachable, one with sshd stopped (connection refused) and a
port that accepts TCP but never speaks SSH (it must end at the fleet's --timeout: "no answer within N s").
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.fleet.inventory import HostTarget, load_inventory, select_hosts
from radeonlab.jobs.fleet.probe import probe_hosts
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.roles.wheel_cache.defaults import DEFAULTS as CACHE_DEFAULTS
from radeonlab.sandbox import aptrepo, web, wheels
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.simcards import CARDS as SIMCARDS
from tests.support.provisioned import Run, run_deploy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CARDS = {"wc-cache": "rx7900xtx", "wc-2": "rx6700xt", "wc-3": "rx9070xt"}
CACHE_HOST = "wc-cache"
GROUP = "wheelcache"  # the inventory group of this module's hosts
EXTRAS_HOST = "wc-3"
GPU_NAMES = {
    "rx7900xtx": "Radeon RX 7900 XTX",
    "rx6700xt": "Radeon RX 6700 XT",
    "rx9070xt": "Radeon RX 9070 XT",
}
JOBS_DIR = "/home/lab/radeonlab/jobs"
INVENTORY = REPO / "inventories/sandbox.py"


@dataclass
class Lab:
    sandbox: Sandbox
    hosts: dict[str, SandboxHost]
    first: Run
    second: Run
    served: dict[str, web.Served]  # outside bytes, after both runs
    index: wheels.WheelIndexInfo

    def targets(self) -> list[HostTarget]:
        return select_hosts(load_inventory(INVENTORY), list(self.hosts))


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox) -> Iterator[Lab]:
    # The fleet tests load inventories/sandbox.py, which reads this sandbox's state dir from the environment.
    saved_env = os.environ.get("RADEONLAB_SANDBOX_DIR")
    os.environ["RADEONLAB_SANDBOX_DIR"] = str(sandbox.state_dir)
    repo = aptrepo.build_repo(sandbox.state_dir)
    index = wheels.build_wheel_index(sandbox.state_dir)
    with web.serve(sandbox.www_dir) as server:  # in this process: its byte counts are readable here
        # Per-host data, not the sandbox's common data: other test modules' hosts must not use this cache.
        data = {**repo.settings(server.url), **index.settings(server.url), "wheel_cache_host": CACHE_HOST}
        data["sandbox_groups"] = [GROUP]  # placement among these hosts only (the session has others)
        hosts = {name: sandbox.create_host(name, card=card, data=data) for name, card in CARDS.items()}
        # The cache server listens on the cache host's own loopback address (the sandbox's network rule).
        hosts[CACHE_HOST].set_data(wheel_cache_bind_address=hosts[CACHE_HOST].address)
        hosts[EXTRAS_HOST].set_data(python_stack_extras=["tensorboard"])  # the cache must serve it too
        # The cache serves the lab's hash lock: the lab's first deploy (without the cache) makes it, on hosts
        # with the same cards and extras, destroyed after; the cache lab's hosts then start fresh.
        seeds = {f"wcs-{n.removeprefix('wc-')}": card for n, card in CARDS.items()}
        seed_data = {k: v for k, v in data.items() if k != "wheel_cache_host"}
        seed_hosts = [sandbox.create_host(n, card=c, data=seed_data) for n, c in seeds.items()]
        seed_hosts[-1].set_data(python_stack_extras=["tensorboard"])
        try:
            seeded = run_deploy(sandbox, seed_hosts)
            assert seeded.returncode == 0, seeded.stderr[-5000:]
        finally:
            for h in seed_hosts:
                sandbox.destroy_host(h.name)
        outside_before = server.served()
        try:
            first = run_deploy(sandbox, list(hosts.values()))
            assert first.returncode == 0, first.stderr[-5000:]
            second = run_deploy(sandbox, list(hosts.values()))
            served = {  # what the cache lab fetched from outside (the seed's resolutions not counted)
                p: web.Served(s.requests - outside_before.get(p, web.Served()).requests,
                              s.bytes - outside_before.get(p, web.Served()).bytes)
                for p, s in server.served().items()
            }  # fmt: skip
            outside = sum(s.bytes for p, s in served.items() if p.startswith("/pypi/"))
            print(
                f"\nprovisioning 3 hosts through the wheel cache: first {first.seconds:.1f}s, "
                f"no-op {second.seconds:.1f}s; bytes from outside (sandbox index) {outside}; "
                f"one host's stack {index.served_bytes}"
            )
            yield Lab(sandbox, hosts, first, second, served, index)
        finally:
            for h in hosts.values():
                sandbox.destroy_host(h.name)
            if saved_env is None:
                os.environ.pop("RADEONLAB_SANDBOX_DIR", None)
            else:
                os.environ["RADEONLAB_SANDBOX_DIR"] = saved_env


def test_torch_is_fetched_from_outside_once_for_three_hosts(lab: Lab) -> None:
    torch = lab.index.amd_torch(str(ROCM_DEFAULTS["rocm_version"]))  # the default: AMD's (SIMULATED repack)
    got = lab.served[f"/pypi/files/{torch.name}"]
    assert (got.requests, got.bytes) == (1, torch.stat().st_size), got
    # nothing the stack needs left the outside index twice: what three hosts cost is one host's download
    wheel_paths = {p: s for p, s in lab.served.items() if p.startswith("/pypi/files/")}
    assert wheel_paths and all(s.requests == 1 for s in wheel_paths.values()), wheel_paths
    # AMD's device extras: each card's device package left the outside index once, for the whole lab
    devices = sorted(p.rsplit("/", 1)[1].split("-")[0] for p in wheel_paths if "rocm_sdk_device_" in p)
    want = sorted({f"rocm_sdk_device_{SIMCARDS[c]['gfx']}" for c in CARDS.values()})
    assert devices == want, devices
    assert sum(s.bytes for s in wheel_paths.values()) <= lab.index.served_bytes


def test_every_host_installed_torch_from_the_cache(lab: Lab) -> None:
    cache = lab.hosts[CACHE_HOST]
    log = cache.exec(f"cat {CACHE_DEFAULTS['wheel_cache_log']}").stdout
    torch_name = urllib.parse.quote(
        lab.index.amd_torch(str(ROCM_DEFAULTS["rocm_version"])).name
    )  # pip asks for "+" as %2B
    # Sandbox hosts share the machine's network namespace, so every request comes from 127.0.0.1: count
    # them instead. Three successful downloads of the torch wheel from the cache = one per host.
    names = (torch_name, torch_name.replace("%2B", "+"))  # uv asks for "+" as is
    fetched = [
        ln for ln in log.splitlines() if any(f"GET /files/{n} " in ln for n in names) and '" 200 ' in ln
    ]
    assert len(fetched) == len(lab.hosts), log[-3000:]
    for h in lab.hosts.values():
        record = json.loads((h.root / "etc/radeonlab/host.json").read_text())
        assert record["torch"]["version"].startswith("2.13.0"), record["torch"]


def test_one_hosts_extra_is_fetched_by_the_cache_and_installed_there_only(lab: Lab) -> None:
    log = lab.hosts[CACHE_HOST].exec(f"cat {CACHE_DEFAULTS['wheel_cache_log']}").stdout
    wheel = lab.index.files["tensorboard"].name
    fetched = [line for line in log.splitlines() if f"GET /files/{wheel} " in line and '" 200 ' in line]
    assert len(fetched) == 1, log[-3000:]  # from the cache, by the one host that asked for it
    assert lab.served[f"/pypi/files/{wheel}"].requests == 1  # and into the cache once, from outside
    for name, h in lab.hosts.items():
        packages = json.loads((h.root / "etc/radeonlab/host.json").read_text())["packages"]
        assert packages.get("tensorboard") == ("2.21.0" if name == EXTRAS_HOST else None), name
        assert packages["transformers"] == "4.57.6"  # the extra moved no pin


def test_second_run_changes_nothing(lab: Lab) -> None:
    assert lab.second.returncode == 0, lab.second.stderr[-5000:]
    for h in lab.hosts.values():
        assert lab.second.changed_ops(h.name) == [], (h.name, lab.second.changed_ops(h.name))


# --- hash locks: what the hosts install, and a changed file on the cache host ----------------------------
VENV = "/home/lab/radeonlab/venv"
TAMPERED = "peft"  # a small wheel every host installs


def test_installs_use_require_hashes_with_the_hosts_lines_of_the_lock(lab: Lab) -> None:
    ops = [op for op in lab.first.results["operations"] if "Install the hash-locked" in op["name"]]
    assert ops and sorted(h for op in ops for h in op["success"]) == sorted(CARDS), ops
    # The operation's command as pyinfra runs it (-vv prints each command): one host, one package missing.
    other = lab.hosts["wc-2"]
    other.exec(f"{VENV}/bin/pip uninstall -y -q trl", user="lab")
    done = subprocess.run(
        [str(Path(sys.executable).with_name("pyinfra")), "-y", "-vv", "--limit", other.name,
         "inventories/sandbox.py", "deploy/setup.py"],
        cwd=REPO, capture_output=True, text=True, timeout=1800,
        env={**os.environ, "RADEONLAB_SANDBOX_DIR": str(lab.sandbox.state_dir)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    output = (done.stdout + done.stderr).splitlines()
    shown = [ln for ln in output if "radeonlab-pip-locked.py" in ln and "/bin/uv pip install " in ln]
    assert shown, (done.stdout + done.stderr)[-3000:]  # python_stack_installer: uv, the default
    for flag in ("uv pip install", "--require-hashes", "--no-deps", f"-r {VENV}/radeonlab-lock.txt"):
        assert flag in shown[0], (flag, shown[0])
    assert "trl==0.24.0" in other.exec(f"{VENV}/bin/pip freeze", user="lab").stdout
    for name, h in lab.hosts.items():  # each host's own lines: its GPU's device package, its extras
        lines = (h.root / VENV.lstrip("/") / "radeonlab-lock.txt").read_text()
        assert "--hash=sha256:" in lines and "torch==2.14.0+rocm10.1.0 " in lines
        devices = {ln.split("==")[0] for ln in lines.splitlines() if ln.startswith("rocm-sdk-device-")}
        assert devices == {f"rocm-sdk-device-{SIMCARDS[CARDS[name]]['gfx']}"}, (name, devices)
        assert ("tensorboard==" in lines) == (name == EXTRAS_HOST), name


def _cache_file(lab: Lab, name: str) -> Path:
    files = lab.hosts[CACHE_HOST].root / CACHE_DEFAULTS["wheel_cache_dir"].lstrip("/") / "files"
    return next(files.glob(f"{name}-*.whl"))


def _flip_one_byte(path: Path) -> None:
    with path.open("r+b") as f:  # as root, the way a compromised cache host would change it
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))


def _cache_answer(lab: Lab, wheel: Path) -> tuple[int, str]:
    port, address = CACHE_DEFAULTS["wheel_cache_port"], lab.hosts[CACHE_HOST].address
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/files/{urllib.parse.quote(wheel.name)}") as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_changed_wheel_on_the_cache_fails_the_next_install_in_one_line_until_restored(lab: Lab) -> None:
    other = lab.hosts["wc-2"]
    other.exec(f"{VENV}/bin/pip uninstall -y -q {TAMPERED}", user="lab")  # so its next run installs again
    # ... from the cache host: uv would otherwise link the copy it verified before from its own cache
    other.exec(f"{VENV}/bin/uv cache clean -q --cache-dir /home/lab/.cache/uv {TAMPERED}", user="lab")
    before = other.exec(f"{VENV}/bin/pip freeze", user="lab").stdout
    wheel = _cache_file(lab, TAMPERED)
    locked = json.loads((wheel.parent.parent / ".lock-hashes.json").read_text())[wheel.name]
    _flip_one_byte(wheel)
    try:
        changed = hashlib.sha256(wheel.read_bytes()).hexdigest()
        status, body = _cache_answer(lab, wheel)  # the cache host itself refuses it
        assert status == 409 and locked in body and changed in body, (status, body)
        failed = run_deploy(lab.sandbox, [other])
        assert failed.returncode != 0
        said = [line for line in failed.stderr.splitlines() if "hash mismatch" in line]
        assert len(said) == 1, failed.stderr[-3000:]
        address = f"{lab.hosts[CACHE_HOST].address}:{CACHE_DEFAULTS['wheel_cache_port']}"
        for part in (wheel.name, f"expected sha256 {locked}", f"received {changed}", address):
            assert part in said[0], (part, said[0])
        assert "THESE PACKAGES DO NOT MATCH" not in failed.stderr  # pip's own block is not shown
        assert other.exec(f"{VENV}/bin/pip freeze", user="lab").stdout == before  # nothing installed
    finally:
        _flip_one_byte(wheel)  # restored: the same bytes as the lock says
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == locked
    assert _cache_answer(lab, wheel)[0] == 200
    again = run_deploy(lab.sandbox, [other])
    assert again.returncode == 0, again.stderr[-3000:]
    version = other.exec(f"{VENV}/bin/python -c 'import peft; print(peft.__version__)'", user="lab").stdout
    assert version.strip() == "0.18.1"


def test_a_pin_changed_without_a_new_lock_is_refused_before_any_change(lab: Lab) -> None:
    other = lab.hosts["wc-2"]
    pins = [
        p if not p.startswith("peft==") else "peft==0.18.2"
        for p in STACK_DEFAULTS["python_stack_requirements"]
    ]

    def state() -> list[tuple[str, int]]:  # what a deploy that went ahead would touch
        watched = [other.root / VENV.lstrip("/"), other.root / "etc/radeonlab", other.root / "etc/apt"]
        return sorted((str(p), p.stat().st_mtime_ns) for d in watched for p in d.rglob("*") if p.is_file())

    freeze = other.exec(f"{VENV}/bin/pip freeze", user="lab").stdout
    before = state()
    other.set_data(python_stack_requirements=pins)
    try:
        refused = run_deploy(lab.sandbox, [other])
    finally:
        other.data.pop("python_stack_requirements")
        other.set_data()
    assert refused.returncode != 0
    said = [
        line for line in refused.stderr.splitlines() if "peft==0.18.2 pinned but not in the hash lock" in line
    ]
    assert said and "deploy without wheel_cache_host once to resolve the stack" in said[0], refused.stderr[
        -3000:
    ]
    assert state() == before  # refused while preparing: nothing on the host changed
    assert other.exec(f"{VENV}/bin/pip freeze", user="lab").stdout == freeze


# --- radeonlab fleet on the same hosts -------------------------------------------------------------------
def write_job(h: SandboxHost, job_id: str, state: str, pid: str) -> None:
    """A job folder as the scanner reads it (job.json + state.json), its launcher a live process."""
    job = json.dumps({"id": job_id, "name": job_id, "created_at": "2026-12-01T00:00:00Z", "gpus": [0]})
    h.exec(f"mkdir -p {JOBS_DIR}/{job_id}", user="lab")
    h.exec(f"echo '{job}' > {JOBS_DIR}/{job_id}/job.json", user="lab")
    h.exec(f'echo \'{{"state": "{state}", "pid": {pid}}}\' > {JOBS_DIR}/{job_id}/state.json', user="lab")


def test_fleet_shows_every_host_with_its_gpu_versions_and_jobs(lab: Lab) -> None:
    h = lab.hosts["wc-2"]
    # a queued job (its launcher waits in line) and a running one: live processes whose pids state.json names
    pids = [h.exec("setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $!", user="lab").stdout.strip()]
    pids.append(h.exec("setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $!", user="lab").stdout.strip())
    write_job(h, "q-1", "queued", pids[0])
    write_job(h, "r-1", "running", pids[1])
    try:
        views = {v.name: v for v in probe_hosts(lab.targets(), timeout=10)}
    finally:
        h.exec(f"kill {' '.join(pids)}; rm -rf {JOBS_DIR}/q-1 {JOBS_DIR}/r-1", user="lab", check=False)
    for name, card in CARDS.items():
        v = views[name]
        assert v.reachable and v.provisioned and v.error is None, v
        assert v.record is not None and len(v.record.gpus) == 1, v.record
        recorded = v.record.gpus[0]
        assert GPU_NAMES[card] in (recorded.name or "") and recorded.gfx, recorded
        # the live reading of the (SIMULATED) card, mapped onto the record's GPU index
        reading = v.reading(recorded.index)
        assert reading and reading.vram_total and reading.vram_used is not None, v.gpus
        shown = v.to_dict()
        assert shown["rocm"] and shown["torch"] and shown["torch"].startswith("2.13.0"), shown
    wc2 = views["wc-2"].to_dict()
    assert (wc2["running"], wc2["queued"]) == (["r-1"], ["q-1"])
    wc3 = views["wc-3"].to_dict()
    assert (wc3["running"], wc3["queued"]) == ([], [])


def test_fleet_cli_exit_zero_when_all_reachable(lab: Lab) -> None:
    inventory = str(INVENTORY)
    result = CliRunner().invoke(main, ["fleet", "-i", inventory, "--limit", "wc-*", "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(r["host"] for r in json.loads(result.stdout)) == sorted(CARDS)


def test_fleet_reports_stopped_and_silent_hosts_without_stalling(lab: Lab) -> None:
    targets = lab.targets()
    with socket.socket() as silent:  # accepts TCP, never sends an SSH banner
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mute = HostTarget(
            "mute",
            "127.0.0.1",
            silent.getsockname()[1],
            key_filename=targets[0].key_filename,
            known_hosts_file=targets[0].known_hosts_file,
        )
        lab.hosts["wc-3"].stop_sshd()
        try:
            statuses = {v.name: v for v in probe_hosts([*targets, mute], timeout=3)}
        finally:
            lab.hosts["wc-3"].start_sshd()
    # the fleet's deadline ended the mute host (the transport's own 15 s timeout says something else)
    assert statuses["mute"].error == "no answer within 3 s", statuses["mute"]
    assert not statuses["wc-3"].reachable and "refused" in statuses["wc-3"].error.lower(), statuses["wc-3"]
    assert all(statuses[n].reachable for n in ("wc-cache", "wc-2")), statuses


# --- placement and the hosts' queues on the same hosts ----------------------------------------------------
PLACED_JOBS = 4
PLACED_STEPS = 10
PLACEMENT_DEADLINE_S = 600


def test_jobs_without_a_host_go_where_they_fit_queue_and_all_finish(lab: Lab, tmp_path: Path) -> None:
    """Four jobs that force bf16, submitted without --host (the spec names this module's host group) by
    processes that then exit: placement never picks the RX 6700 XT (no bf16), the hosts queue what they
    cannot run yet, and every job finishes."""
    import re
    import subprocess
    import sys

    from radeonlab.sandbox import demodata, tinymodel
    from radeonlab.sandbox.demo import write_spec

    spec = write_spec(tmp_path, {"max_steps": PLACED_STEPS, "save_steps": PLACED_STEPS})
    placement = f"radeonlab:\n  placement:\n    host_group: {GROUP}\n"
    spec.write_text(spec.read_text() + "bf16: true\n" + placement)
    tinymodel.build_model(tmp_path / "tiny-llama", demodata.write_dataset(tmp_path / "data"))
    env = {**os.environ, "RADEONLAB_SANDBOX_DIR": str(lab.sandbox.state_dir), "RADEONLAB_HOME": str(tmp_path)}
    radeonlab = str(Path(sys.executable).with_name("radeonlab"))
    placed: dict[str, str] = {}
    # Four jobs on the group's two bf16 hosts: at least one host holds two, so one job waits in its queue.
    outputs = []
    for _ in range(PLACED_JOBS):
        done = subprocess.run(
            [radeonlab, "submit", str(spec), "-i", str(INVENTORY)], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stdout + done.stderr
        job_id, host = re.search(r"submitted (\S+) to (\S+):", done.stdout).groups()  # type: ignore[union-attr]
        placed[job_id] = host
        outputs.append(done.stdout + done.stderr)
    bf16_cards = {"rx7900xtx", "rx9070xt"}
    assert all(lab.sandbox.hosts[h].card in bf16_cards for h in placed.values()), placed
    assert all(re.search(r"wc-2: rejected: .*bf16", out) for out in outputs), outputs[0]
    assert len(set(placed.values())) < len(placed), placed  # at least one host holds two: one waited
    deadline = time.monotonic() + PLACEMENT_DEADLINE_S
    while True:
        listed = subprocess.run(
            [radeonlab, "list", "-i", str(INVENTORY), "--json"], capture_output=True, text=True, env=env
        )
        states = {r["id"]: r["state"] for r in json.loads(listed.stdout) if r["id"] in placed}
        if all(states.get(j) == "succeeded" for j in placed) or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert all(states.get(j) == "succeeded" for j in placed), states
