"""How the lab's daemons run where systemd is not the init (containers, the SIMULATED hosts): data and
the shell script that starts one and waits for it. Where systemd runs, the role uses Debian's units."""

from __future__ import annotations

from dataclasses import dataclass

from radeonlab.roles.slurm.plan import PATHS


@dataclass(frozen=True)
class Daemon:
    """How to run one daemon where systemd is not the init (containers, the SIMULATED hosts)."""

    name: str  # as /proc/<pid>/comm shows it
    unit: str  # the systemd unit on a real host
    pidfile: str
    start: str  # a shell command that starts it in the background (the daemon detaches itself)
    ready: str  # a shell command that succeeds once it answers
    log: str


DAEMONS = {
    "munged": Daemon(
        "munged",
        "munge.service",
        PATHS["munged_pid"],
        # systemd's RuntimeDirectory=munge, then munged as its own user (it forks into the background)
        f"install -d -o munge -g munge -m 0755 {PATHS['munge_run']} && runuser -u munge -- /usr/sbin/munged",
        "munge -n >/dev/null 2>&1",
        "/var/log/munge/munged.log",
    ),
    "slurmctld": Daemon(
        "slurmctld",
        "slurmctld.service",
        PATHS["slurmctld_pid"],
        "slurmctld",
        "scontrol ping 2>/dev/null | grep -q 'is UP'",
        PATHS["slurmctld_log"],
    ),
    "slurmd": Daemon(
        "slurmd",
        "slurmd.service",
        PATHS["slurmd_pid"],
        # the same options the systemd unit reads (-N <node name>)
        f". {PATHS['slurmd_defaults']}; slurmd $SLURMD_OPTIONS",
        f'p=$(cat {PATHS["slurmd_pid"]} 2>/dev/null) && [ "$(cat /proc/$p/comm 2>/dev/null)" = slurmd ]',
        PATHS["slurmd_log"],
    ),
}


def daemon_script(daemon: Daemon, timeout: float, stop_first: bool) -> str:
    """Start `daemon` (stopping the running one first when `stop_first`) and wait until it answers; on a
    timeout, fail with one line and the last lines of its log."""
    tries = max(1, int(timeout * 10))
    pid = f"$(cat {daemon.pidfile} 2>/dev/null)"
    alive = f'[ -n "$p" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = {daemon.name} ]'
    stop = (
        f"p={pid}; if {alive}; then kill $p; i=0; "
        f"while [ -e /proc/$p ] && [ $i -lt {tries} ]; do sleep 0.1; i=$((i + 1)); done; fi; "
        if stop_first
        else ""
    )
    return (
        f"{stop}{daemon.start}; i=0; until {daemon.ready}; do i=$((i + 1)); "
        f"if [ $i -gt {tries} ]; then echo '{daemon.name} did not answer within {timeout:g} s; "
        f"see {daemon.log}' >&2; tail -n 5 {daemon.log} >&2 2>/dev/null; exit 1; fi; sleep 0.1; done"
    )
