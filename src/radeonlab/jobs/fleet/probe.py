"""One round trip to a workstation: `read_host` runs the host's probe tool (jobs/host/probe.py) once over an
open connection and makes a HostView of its answer (jobs/fleet/view.py); `probe_hosts` does it for many
hosts in parallel with a deadline (jobs/ssh/group.py). `radeonlab fleet`, placement, `list` and the job
handle all start from a HostView.
"""

from __future__ import annotations

from collections.abc import Sequence

from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.view import (
    CPU_SLOT,
    FLEET_DEFAULTS,
    HostView,
    ProbeAsk,
    deploy_command,
    parse_probe,
    require_record,
)
from radeonlab.jobs.ssh.connection import Remote
from radeonlab.jobs.ssh.group import each_host

# the view's names, imported from here by fleet, list, the job handle and the dashboard (the value lives in
# view.py, which reaches no host)
__all__ = [
    "CPU_SLOT", "FLEET_DEFAULTS", "HostView", "ProbeAsk", "deploy_command", "parse_probe", "probe_hosts",
    "read_host", "require_record",
]  # fmt: skip


def read_host(
    remote: Remote, jobs: str = "summary", ids: Sequence[str] | None = None, ask: ProbeAsk | None = None
) -> HostView:
    """One round trip: the probe tool's answer as a HostView (`ask`: what a plan wants to know besides)."""
    args = ["--jobs", jobs] + (["--ids", ",".join(ids)] if ids else []) + (ask.args() if ask else [])
    return parse_probe(remote.target.name, remote.tool("probe", args).last_json())


def probe_hosts(
    targets: Sequence[HostTarget],
    timeout: float = FLEET_DEFAULTS["timeout_s"],
    jobs: str = "summary",
    ask: ProbeAsk | None = None,
) -> list[HostView]:
    """Every host's view, probed in parallel, in the targets' order; unreachable hosts as views too."""
    results = each_host(targets, lambda remote: read_host(remote, jobs, ask=ask), timeout)
    out = []
    for r in results:
        view = r.value if r.value is not None else HostView(r.host, reachable=False, error=r.error)
        view.seconds = r.seconds
        out.append(view)
    return out
