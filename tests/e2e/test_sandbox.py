"""The sandbox workstations behave like reachable, provisionable hosts with the card they claim to have."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from radeonlab.sandbox import simcards
from radeonlab.sandbox.hosts import Sandbox, SandboxHost, mounts_under, pids_rooted_in

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
KFD_NODE1 = "/sys/class/kfd/kfd/topology/nodes/1/properties"
VRAM_TOTAL = "/sys/class/drm/card0/device/mem_info_vram_total"


def _prop(text: str, key: str) -> str:
    return next(line.split()[1] for line in text.splitlines() if line.split()[0] == key)


def _ssh(host: SandboxHost, cmd: str) -> str:
    with host.connect() as conn:
        return conn.run(cmd, hide=True).stdout


def _pyinfra(sandbox: Sandbox, hosts: list[SandboxHost]) -> tuple[str, list[int]]:
    """Run the smoke deploy through inventories/sandbox.py; return output and Grand total columns."""
    limit = [arg for h in hosts for arg in ("--limit", h.name)]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("pyinfra")), "-y", *limit, "inventories/sandbox.py",
         "tests/deploys/sandbox_smoke.py"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir)},
    )  # fmt: skip
    out = done.stdout + done.stderr  # pyinfra logs its results table to stderr
    assert done.returncode == 0, out
    total = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out)
    assert total, out
    return out, [0 if v == "-" else int(v) for v in total.groups()]


def test_ssh_strict_host_key_checking(make_host, tmp_path):
    a, b = make_host("rx7900xtx"), make_host("rx6700xt")
    assert (a.address, a.port) != (b.address, b.port)
    for host in (a, b):
        assert _ssh(host, "hostname").strip() == host.name
    # an empty known_hosts: the host's key is unknown, so the client refuses to connect
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    client = paramiko.SSHClient()
    client.load_host_keys(str(empty))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        client.connect(a.address, a.port, a.user, key_filename=str(a.sandbox.key),
                       allow_agent=False, look_for_keys=False)  # fmt: skip
    # another host's key recorded for this address: refused as a changed key
    wrong = tmp_path / "known_hosts_wrong"
    wrong.write_text(f"[{a.address}]:{a.port} {b.host_key_line}\n")
    client = paramiko.SSHClient()
    client.load_host_keys(str(wrong))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.BadHostKeyException):
        client.connect(a.address, a.port, a.user, key_filename=str(a.sandbox.key),
                       allow_agent=False, look_for_keys=False)  # fmt: skip


def test_pyinfra_deploy_twice_second_run_changes_nothing(sandbox, make_host):
    hosts = [make_host("rx7900xtx"), make_host("rx9070xt")]
    t0 = time.monotonic()
    out, (count, success, error, no_change) = _pyinfra(sandbox, hosts)
    first = time.monotonic() - t0
    assert (count, success, error, no_change) == (4, 4, 0, 0), out  # 2 operations x 2 hosts, all changed
    t0 = time.monotonic()
    out, (count, success, error, no_change) = _pyinfra(sandbox, hosts)
    second = time.monotonic() - t0
    assert (count, success, error, no_change) == (4, 0, 0, 4), out
    sandbox.timings.setdefault("pyinfra_first", first)
    sandbox.timings.setdefault("pyinfra_noop", second)
    for host in hosts:
        # written as root (the deploy sets no _sudo: the inventory's host data does) with host data
        assert host.exec("cat /etc/radeonlab-smoke").stdout == f"card={host.card}\n"
        assert host.exec("stat -c %U:%G:%a /etc/radeonlab-smoke").stdout.strip() == "root:radeonlab-smoke:640"


def test_fabric_runs_commands_and_sudo_on_each_host(make_host):
    for host in (make_host("rx6700xt"), make_host(None)):
        with host.connect() as conn:
            assert conn.run("id -un", hide=True).stdout.strip() == host.user
            assert conn.run("sudo -n id -u", hide=True).stdout.strip() == "0"
            assert conn.run("groups", hide=True).stdout.split()[0] == host.user


@pytest.mark.parametrize(
    "card,gfx_target_version",
    [("rx7900xtx", "110000"), ("rx6700xt", "100301"), ("rx9070xt", "120001")],
)
def test_simulated_card_visible_at_real_paths_over_ssh(make_host, card, gfx_target_version):
    host = make_host(card)
    props = _ssh(host, f"cat {KFD_NODE1}")
    assert _prop(props, "gfx_target_version") == gfx_target_version
    assert int(_prop(props, "device_id")) == int(simcards.CARDS[card]["device"], 16)
    assert int(_ssh(host, f"cat {VRAM_TOTAL}")) == simcards.CARDS[card]["vram_total"]
    assert _ssh(host, "cat /sys/class/drm/renderD128/device/vendor").strip() == "0x1002"
    # node 0 is the CPU
    assert (
        _prop(_ssh(host, "cat /sys/class/kfd/kfd/topology/nodes/0/properties"), "gfx_target_version") == "0"
    )
    # the stand-in nodes carry real permissions: root:render 0660, so lab (not in render) cannot open them
    assert _ssh(host, "stat -c %U:%G:%a /dev/kfd /dev/dri/renderD128").split() == ["root:render:660"] * 2
    with host.connect() as conn:
        assert conn.run("cat /dev/kfd", hide=True, warn=True).failed
        assert conn.run("sudo -n cat /dev/kfd", hide=True, warn=True).ok
    # sysfs is read-only inside the host, as on a real machine for these files
    assert host.exec(f"echo 1 > {VRAM_TOTAL}", check=False).returncode != 0


def test_set_card_swaps_the_card_while_running(make_host):
    host = make_host("rx7900xtx")
    host.set_card("rx6700xt")
    assert _prop(_ssh(host, f"cat {KFD_NODE1}"), "gfx_target_version") == "100301"
    assert int(_ssh(host, f"cat {VRAM_TOTAL}")) == 12868124672
    host.set_card(None)
    out = _ssh(host, "ls /sys/class/kfd/kfd/topology/nodes; ls /sys/class/drm; ls /dev/kfd 2>&1 || true")
    assert out.split()[:1] == ["0"] and "card0" not in out and "No such file" in out
    assert host.exec("cat /sys/class/kfd/kfd/topology/nodes/0/properties").stdout  # CPU node stays
    host.set_card("rx9070xt")
    assert _prop(_ssh(host, f"cat {KFD_NODE1}"), "gfx_target_version") == "120001"
    assert '"card": "rx9070xt"' in host.sandbox.inventory_file.read_text()


def test_sshd_off_keeps_jobs_restart_ends_them_and_keeps_disk(make_host):
    host = make_host("rx7900xtx")
    _ssh(
        host,
        "echo kept > ~/disk.txt; setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $! > ~/job.pid",
    )
    job = host.exec("cat job.pid", user=host.user).stdout.strip()
    host.stop_sshd()
    with pytest.raises(OSError):  # refused: nobody listens
        host.connect().open()
    assert host.exec(f"kill -0 {job}", check=False).returncode == 0  # the job survives
    host.start_sshd()
    assert _ssh(host, f"kill -0 {job} && echo alive").strip() == "alive"
    host.restart()
    assert _ssh(host, f"kill -0 {job} 2>/dev/null || echo gone; cat ~/disk.txt").split() == ["gone", "kept"]


def test_make_idle_ends_the_login_users_processes_only_and_brings_sshd_back(make_host):
    host = make_host()
    spawn = "setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!"
    job, roots = _ssh(host, spawn).strip(), host.exec(spawn).stdout.strip()
    host.stop_sshd()
    host.make_idle()  # what the next module sharing an e2e host gets (provision.shared_trainer)
    assert _ssh(host, f"kill -0 {job} 2>/dev/null || echo gone").strip() == "gone"
    assert host.exec(f"kill -0 {roots}", check=False).returncode == 0  # not the login user's: kept
    host.stop()
    host.make_idle()  # a stopped host starts
    assert _ssh(host, "echo up").strip() == "up"


def test_destroy_leaves_no_mount_and_no_process(sandbox, make_host):
    host = make_host("rx9070xt")
    host.exec("setsid nohup sleep 300 >/dev/null 2>&1 </dev/null &")
    assert pids_rooted_in(host.root) and mounts_under(host.dir)
    t0 = time.monotonic()
    sandbox.destroy_host(host.name)
    sandbox.timings.setdefault("host_destroy_measured", time.monotonic() - t0)
    assert mounts_under(host.dir) == [] and pids_rooted_in(host.root) == []
    assert not host.dir.exists()
    assert host.name not in sandbox.inventory_file.read_text()
    assert f"[{host.address}]:{host.port}" not in sandbox.known_hosts.read_text()


def test_sshd_stopped_and_started_again_at_once_comes_back_every_time_under_load(make_host):
    """stop_sshd returns once the port is closed, maybe before sshd has exited; a start_sshd right then used
    to find no sshd (the init's start ran inside its stop's wait and saw the old sshd "running"). With the
    old init this failed within 150 rounds every time (3 of 3) beside four busy loops, and once in a full
    run."""
    host = make_host()
    burners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(4)]
    try:
        for _ in range(150):
            host.stop_sshd()
            host.start_sshd(timeout=5)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert _ssh(host, "echo up").strip() == "up"
