"""End to end: deploy/setup.py provisions three SIMULATED workstations over real SSH, twice.

The hosts are sandbox hosts (radeonlab/sandbox: real Debian 12 hosts on loopback with recorded Radeon cards'
sysfs), the ROCm packages come from the sandbox's SIMULATED AMD-shaped apt repository and the Python stack
from its local wheel index (CPU torch standing in for the ROCm build), all pointed at through the product's
own settings. The expensive provisioning runs once per test session (the `provisioned` fixture of
tests/support/provisioned.py, with tests/e2e/test_provision_coresdk.py's hosts in the same runs); the tests
read what it left behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from radeonlab.contract.records import HOST_RECORD_SCHEMA
from radeonlab.jobs.fleet import probe as fleet
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.sandbox import demo
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import sandbox_env
from tests.conftest import inventory_target
from tests.support.provisioned import REPO, Provisioned, exports, run_deploy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

# What /etc/profile.d/radeonlab-gpu.sh must export per card with the default (ROCm Core SDK 10.0, AMD's
# multi-arch wheels): AMD's wheels carry gfx1031 code, so the RX 6700 XT needs no override there (the
# download.pytorch.org case, 10.3.0, is in tests/e2e/test_provision_coresdk.py); RDNA3/4 get AOTriton's
# switch.
AOTRITON = {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}
EXPECTED_ENV = {
    "rx7900xtx": {"PYTORCH_ROCM_ARCH": "gfx1100", **AOTRITON},
    "rx6700xt": {"PYTORCH_ROCM_ARCH": "gfx1031"},
    "rx9070xt": {"PYTORCH_ROCM_ARCH": "gfx1201", **AOTRITON},
}
PROFILE = "etc/profile.d/radeonlab-gpu.sh"
VENV = "/home/lab/radeonlab/venv"


def test_first_run_installs_everything(provisioned: Provisioned) -> None:
    for card, h in provisioned.hosts.items():
        changed = provisioned.first.changed_ops(h.name)
        assert any("Install ROCm 10.1 packages" in op for op in changed), (card, changed)
        # no lock anywhere: the first deploy resolves the stack into the lab's lock (python.call, at execution
        # time) and installs this host's lines of it by the recorded URLs, with their hashes
        lines = (h.root / VENV.lstrip("/") / "radeonlab-lock.txt").read_text()
        assert "torch @ http://" in lines and "--hash=sha256:" in lines, (card, lines[:500])
        record = json.loads((h.root / "etc/radeonlab/host.json").read_text())
        assert record["host"] == h.name and record["venv"] == VENV and record["schema"] == HOST_RECORD_SCHEMA
        assert record["rocm"]["installed"], record["rocm"]  # the stand-in rocm-core wrote .info/version
        torch = record["torch"]
        assert torch["cpu_build"] is True and torch["cpu_allowed"] is True and torch["hip"] is None, torch
        assert record["problem"] is None, record["problem"]
    allowed = "CPU torch allowed by python_stack_allow_cpu_torch; CPU build of torch: no GPU check possible"
    every = len(provisioned.every_host)
    assert provisioned.first.stderr.count(allowed) == every, provisioned.first.stderr[-3000:]
    # The sandbox hosts are Debian 12: outside AMD's matrix for Radeon and Ryzen APUs (roles/rocm/matrix.py),
    # provisioned with one warning each naming the matrix, and no other run of the role repeats it.
    said = "outside AMD's support matrix"
    plain = re.sub(r"\x1b\[[0-9;]*m", "", provisioned.first.stderr)  # pyinfra may style the host name
    matrix = [line for line in plain.splitlines() if said in line]
    assert len(matrix) == every, matrix
    for h in provisioned.every_host:
        (line,) = [m for m in matrix if f"[{h.name}]" in m]
        assert "Debian 12: AMD lists Debian only for Instinct parts" in line, line
        assert "os-support.yaml" in line, line
    lock = stack_lock.parse_lock(
        (provisioned.sandbox.state_dir / "locks" / "amd-rocm10.1-py3.11-torch2.14.0-lf0.9.5.txt").read_text()
    )
    assert {"gfx1100", "gfx1031", "gfx1201"} <= lock.targets()  # one line set per target, one lock
    assert [p.version for p in lock.pins if p.name == "torch"] == ["2.14.0+rocm10.1.0"]
    assert "wrote the lab's hash lock" in provisioned.first.stderr


def test_second_run_changes_nothing(provisioned: Provisioned) -> None:
    """No operation changes anything (pyinfra's own "No changes"). How long a no-op takes is a speed claim,
    measured as ratios in tests/bench/provisioning.py, not asserted here (wall clock on 2 busy cores)."""
    second = provisioned.second
    assert second.returncode == 0, second.stderr[-5000:]
    for h in provisioned.every_host:
        assert second.changed_ops(h.name) == [], (h.name, second.changed_ops(h.name))
    assert second.results["totals"]["error"] == 0


def test_the_stack_check_runs_again_only_when_what_it_depends_on_changed(provisioned: Provisioned) -> None:
    """The no-op run reused the first run's check (a torch import per host) and says so; a pip change in
    the venv (a rewritten dist-info RECORD) makes setup run it again; deploy/verify.py always runs it."""
    assert provisioned.second.stderr.count("not re-run, inputs unchanged") == len(provisioned.every_host)
    h = provisioned.hosts["rx7900xtx"]
    check = h.root / "etc/radeonlab/stack-check.json"
    first_check = json.loads(check.read_text())["checked_at"]
    record = next((h.root / VENV.lstrip("/")).glob("lib/python*/site-packages/peft-*.dist-info/RECORD"))
    os.utime(record, (time.time() + 5, time.time() + 5))  # what reinstalling peft does to it
    again = run_deploy(provisioned.sandbox, [h])
    assert again.returncode == 0, again.stderr[-5000:]
    changed = again.changed_ops(h.name)
    assert len(changed) == 1 and changed[0].endswith("Write the host record"), changed
    assert "not re-run" not in again.stderr and "CPU build of torch" in again.stderr, again.stderr[-3000:]
    rechecked = json.loads(check.read_text())["checked_at"]
    assert run_deploy(provisioned.sandbox, [h]).changed_ops(h.name) == []  # the new check is reused
    time.sleep(1)  # checked_at has a one-second resolution
    verified = run_deploy(provisioned.sandbox, [h], deploy="deploy/verify.py")
    assert verified.returncode == 0 and "not re-run" not in verified.stderr, verified.stderr[-3000:]
    assert first_check <= rechecked < json.loads(check.read_text())["checked_at"]


def test_profile_file_is_right_for_each_card(provisioned: Provisioned) -> None:
    for card, h in provisioned.hosts.items():
        text = (h.root / PROFILE).read_text()
        assert exports(text) == EXPECTED_ENV[card], (card, text)


def test_login_shell_sees_the_exports(provisioned: Provisioned) -> None:
    for card, h in provisioned.hosts.items():
        out = h.exec(
            "bash -lc 'echo \"$PYTORCH_ROCM_ARCH|$HSA_OVERRIDE_GFX_VERSION|"
            "$TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL\"'",
            user="lab",
        ).stdout.strip()
        want = EXPECTED_ENV[card]
        aot = want.get("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "")
        assert out == f"{want['PYTORCH_ROCM_ARCH']}|{want.get('HSA_OVERRIDE_GFX_VERSION', '')}|{aot}", (
            card,
            out,
        )


def test_the_stack_check_ran_in_a_fresh_login_of_the_training_user(provisioned: Provisioned) -> None:
    """As jobs run: the check saw the groups added in the same run (a new login) and what only
    /etc/profile.d sets; the deploy said once that lab's open sessions (its own SSH login) must log in
    again, and the no-op run, adding nothing, did not."""
    for card, h in provisioned.hosts.items():
        report = json.loads((h.root / "etc/radeonlab/stack-check.json").read_text())["report"]
        assert report["user"] == "lab" and {"video", "render"} <= set(report["groups"]), (card, report)
        seen = {k: v for k, v in report["env"].items() if v is not None}
        assert seen == EXPECTED_ENV[card], (card, seen)
    note = "lab was added to render, video while"
    assert provisioned.first.stderr.count(note) == len(provisioned.every_host), provisioned.first.stderr[
        -3000:
    ]
    assert note not in provisioned.second.stderr


def test_user_gets_video_render_and_keeps_sudo(provisioned: Provisioned) -> None:
    for h in provisioned.hosts.values():
        groups = set(h.exec("id -nG lab").stdout.split())
        assert {"video", "render", "sudo"} <= groups, groups


def test_training_stack_runs_in_the_venv(provisioned: Provisioned) -> None:
    h = provisioned.hosts["rx7900xtx"]
    out = h.exec(f"{VENV}/bin/llamafactory-cli version", user="lab").stdout
    assert "0.9.5" in out, out
    h.exec(f'{VENV}/bin/python -c "import torch, peft"', user="lab")  # check=True: raises on failure


def test_swapping_a_card_changes_only_what_the_card_decides(
    provisioned: Provisioned, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = provisioned.hosts["rx6700xt"]
    before = {
        p: (h.root / p).read_text()
        for p in ("etc/profile.d/radeonlab-rocm.sh", "etc/apt/sources.list.d/amdrocm.list")
    }
    h.set_card("rx9070xt")
    try:
        run = run_deploy(provisioned.sandbox, [h])
        assert run.returncode == 0, run.stderr[-5000:]
        changed = run.changed_ops(h.name)
        assert any("Export the GPU settings" in op for op in changed), changed
        # The card decides the profile, the ROCm target package (amdrocm10.1-gfx1201), the torch device extra
        # (device-gfx1201) and the host record; the sources and PATH stay as they were.
        decided = (
            "Export the GPU settings",
            "Write the host record",
            "Refresh apt package lists",  # a package is to be installed: the lists are refreshed first
            "Install ROCm 10.1 packages",
            "Rebuild the dynamic linker cache",  # ldconfig runs after ROCm packages changed
            "Install the hash-locked stack",  # the card's device package (rocm-sdk-device-gfx1201) is in it
            "this host's lines of the hash lock",  # the lock file holds only this card's device line
        )
        assert all(any(d in op for d in decided) for op in changed), changed
        assert any("amdrocm10.1-gfx1201" in op for op in changed), changed
        assert exports((h.root / PROFILE).read_text()) == EXPECTED_ENV["rx9070xt"]
        assert {p: (h.root / p).read_text() for p in before} == before
        # Swapped back without re-provisioning: the fleet (and so placement) sees the record is stale.
        h.set_card("rx6700xt")
        status = fleet.probe_hosts([inventory_target(provisioned.sandbox, h, monkeypatch)], timeout=10)[0]
        assert status.reachable and not status.provisioned, status
        assert status.note.startswith(
            "card changed since provisioning: GPU 0 was AMD Radeon RX 9070 XT, is now AMD Radeon RX 6700 XT"
        ), status
    finally:
        h.set_card("rx6700xt")
        back = run_deploy(provisioned.sandbox, [h])  # the shared host as it was (the Core SDK tests read it)
    assert back.returncode == 0 and exports((h.root / PROFILE).read_text()) == EXPECTED_ENV["rx6700xt"]


def test_host_without_gpu_fails_with_one_line_naming_it(provisioned: Provisioned) -> None:
    h = provisioned.sandbox.create_host("prov-nogpu", card=None)
    try:
        run = run_deploy(provisioned.sandbox, [h])
        assert run.returncode != 0
        lines = [
            line for line in (run.stdout + run.stderr).splitlines() if "prov-nogpu: no AMD GPU found" in line
        ]
        assert lines, run.stderr[-3000:]
        assert "gpu_cpu_only" in lines[0]
    finally:
        provisioned.sandbox.destroy_host(h.name)


def test_cpu_torch_fails_verify_unless_the_inventory_allows_it_and_submit_refuses_the_host(
    provisioned: Provisioned, tmp_path: Path
) -> None:
    """The sandbox's torch is a CPU build (the SIMULATED stand-in for the ROCm wheel); the sandbox inventory
    allows it (python_stack_allow_cpu_torch, from the wheel index's settings). Without that setting (pyinfra's
    --data overrides host data, as a user's would) verify fails the host with one line and the record says the
    host is unusable; submit then refuses it before anything is sent; with the setting verify passes again."""
    h = provisioned.hosts["rx7900xtx"]
    record_file = h.root / "etc/radeonlab/host.json"
    try:
        refused = run_verify(provisioned.sandbox, h, "--data", "python_stack_allow_cpu_torch=false")
        assert refused.returncode != 0, refused.stderr[-3000:]
        reason = "is a CPU build: it cannot use the AMD GPU(s); install the ROCm wheel"
        lines = [line for line in refused.stderr.splitlines() if reason in line]
        assert lines and "python_stack_allow_cpu_torch: true" in lines[0], refused.stderr[-3000:]
        print(f"\nverify without the setting: {lines[0].strip()}")
        record = json.loads(record_file.read_text())
        assert record["problem"] and reason in record["problem"], record
        assert record["torch"]["cpu_build"] and not record["torch"]["cpu_allowed"], record["torch"]

        spec = demo.write_job_folder(tmp_path, {"max_steps": 2})
        spec.write_text(spec.read_text() + "bf16: true\n")
        on_host = "find /home/lab/radeonlab/jobs /home/lab/radeonlab/blobs 2>/dev/null | sort"
        jobs_before = h.exec(on_host).stdout
        submitted = subprocess.run(
            [str(Path(sys.executable).with_name("radeonlab")), "submit", str(spec), "-i",
             str(REPO / "inventories/sandbox.py"), "--host", h.name],
            capture_output=True, text=True, timeout=600,
            env={**sandbox_env(provisioned.sandbox), "RADEONLAB_HOME": str(tmp_path / "laptop")},
        )  # fmt: skip
        assert submitted.returncode != 0, submitted.stdout + submitted.stderr
        assert "verification failed: torch" in submitted.stderr, submitted.stderr
        assert reason in submitted.stderr, submitted.stderr
        print(f"submit bf16 to it: {submitted.stderr.strip()}")
        assert h.exec(on_host).stdout == jobs_before  # no job folder, no uploaded blob
    finally:
        allowed = run_verify(provisioned.sandbox, h)  # the inventory's own setting again
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "CPU torch allowed by python_stack_allow_cpu_torch" in allowed.stderr, allowed.stderr[-3000:]
    record = json.loads(record_file.read_text())
    assert record["problem"] is None and record["torch"]["cpu_allowed"], record


def run_verify(sandbox: Sandbox, h: SandboxHost, *args: str) -> subprocess.CompletedProcess:
    """`pyinfra -y [ARGS] inventories/sandbox.py deploy/verify.py` for one host (its stderr is the log)."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("pyinfra")), "-y", "--limit", h.name, *args,
         "inventories/sandbox.py", "deploy/verify.py"],
        cwd=REPO, capture_output=True, text=True, timeout=1200, env=sandbox_env(sandbox),
    )  # fmt: skip
