"""A sandbox host left behind by a killed run is found and removed by the next session; kept ones stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from radeonlab.sandbox import config, reap
from radeonlab.sandbox.hosts import Sandbox, mounts_under, pids_rooted_in

pytestmark = pytest.mark.sandbox

OWNER = textwrap.dedent(
    """
    import sys, time
    from radeonlab.sandbox import reap
    from radeonlab.sandbox.hosts import Sandbox
    sbx = Sandbox(sys.argv[1])
    reap.claim(sbx.state_dir)
    if sys.argv[2] == "keep":
        reap.keep(sbx.state_dir)
    sbx.create_host(sys.argv[3])
    print("up", flush=True)
    time.sleep(600)
    """
)


def start_owner(state: Path, mode: str, name: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(state), mode, name], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def leases_of(state: Path) -> list[str]:
    return [p.name for p in config.LEASE_DIR.glob("[0-9]*") if str(state) in p.read_text()]


def test_a_killed_sessions_host_is_reaped_and_a_kept_one_is_not(tmp_path: Path) -> None:
    killed, kept = tmp_path / "killed", tmp_path / "kept"
    victim = start_owner(killed, "claim", "reap1")
    survivor = start_owner(kept, "keep", "reap2")
    victim.send_signal(signal.SIGKILL)  # no teardown runs: the host's namespace, mount and lease stay
    victim.wait()
    survivor.send_signal(signal.SIGKILL)
    survivor.wait()
    assert pids_rooted_in(killed / "hosts") and mounts_under(killed) and leases_of(killed)

    # on demand, as a user types it (a new test session and `sandbox up` call the same reap first), twice at
    # once, as two test sessions or two pytest-xdist workers starting together do: one removes the host, the
    # other waits for it and finds nothing left (not an umount error)
    argv = [str(Path(sys.executable).with_name("radeonlab")), "sandbox", "down", "--stale"]
    both = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in (1, 2)]
    outs = [p.communicate(timeout=120) for p in both]
    assert [p.returncode for p in both] == [0, 0], outs
    reaped = [out for out, _err in outs if f"{killed}:reap1" in out]
    assert len(reaped) == 1 and "stale sandbox host(s)" in reaped[0], outs
    assert pids_rooted_in(killed / "hosts") == [] and mounts_under(killed) == [] and leases_of(killed) == []
    assert not (killed / "hosts" / "reap1").exists()
    # kept: `sandbox up` and `demo --keep` hosts outlive their command on purpose
    assert pids_rooted_in(kept / "hosts") and leases_of(kept)
    Sandbox(kept).destroy_all()


def test_a_live_owners_hosts_are_never_reaped(tmp_path: Path) -> None:
    owner = start_owner(tmp_path / "live", "claim", "reap3")
    try:
        assert f"{tmp_path / 'live'}:reap3" not in reap.reap_stale()
        assert pids_rooted_in(tmp_path / "live" / "hosts")
    finally:
        owner.kill()
        owner.wait()
        reap.reap_stale()
    assert mounts_under(tmp_path / "live") == [] and os.listdir(tmp_path / "live" / "hosts") == []
