"""The fleet a command works on: the inventory's hosts, the SSH connections the command opened to them, and
what one probe of each host said.

The command owns it (`with Fleet.open(inventory, targets) as fleet:`), so a connection opened to probe a
named host is the one the job is uploaded and staged over, and every connection closes when the command
ends, whatever happened. Observing (jobs/fleet/observe.py) fills `views`; planning reads them and opens
nothing (jobs/plan/plan.py); applying (jobs/apply/submit.py) takes its connections from here (`remote`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from radeonlab.errors import InventoryError
from radeonlab.jobs.fleet.inventory import HostTarget, load_inventory
from radeonlab.jobs.fleet.probe import FLEET_DEFAULTS, HostView, ProbeAsk, probe_hosts, read_host
from radeonlab.jobs.ssh.connection import Remote, connect


class Fleet:
    """The inventory's hosts (loaded on first use, so a spec is checked before a bad inventory is named),
    the connections opened so far, and the views observed."""

    def __init__(
        self,
        inventory: str,
        targets: dict[str, HostTarget] | None = None,
        opener: Callable[[HostTarget], Remote] = connect,
        timeout: float = FLEET_DEFAULTS["timeout_s"],
    ) -> None:
        self.inventory = inventory
        self._targets = targets
        self._open = opener
        self.timeout = timeout  # placement's probe: per host, connect + the one round trip
        self.remotes: dict[str, Remote] = {}
        self.views: dict[str, HostView] = {}

    @classmethod
    def open(cls, inventory: str, targets: dict[str, HostTarget] | None = None) -> Fleet:
        """`targets`: the inventory already loaded by the command (a load is a Python start-up in a child
        process, about 0.5 s: one per command)."""
        return cls(inventory, targets)

    @property
    def targets(self) -> dict[str, HostTarget]:
        if self._targets is None:
            self._targets = load_inventory(self.inventory)
        if not self._targets:
            raise InventoryError(f"{self.inventory}: the inventory has no hosts")
        return self._targets

    def remote(self, name: str) -> Remote:
        """The open connection to `name`, opened now if the command has none yet (errors raise)."""
        if name not in self.remotes:
            self.remotes[name] = self._open(self.targets[name])
        return self.remotes[name]

    def observe(self, hosts: Sequence[HostTarget], ask: ProbeAsk, *, named: bool) -> dict[str, HostView]:
        """One probe per host, asked `ask` besides its state. Named hosts are connected to in turn and kept
        (an unreachable or failing one refuses the command with its error); placement's candidates are
        probed in parallel with a deadline, an unreachable one becoming a view that says so."""
        if named:
            views = {t.name: read_host(self.remote(t.name), ask=ask) for t in hosts}
        else:
            views = {v.name: v for v in probe_hosts(hosts, self.timeout, ask=ask)}
        self.views.update(views)
        return views

    def close(self) -> None:
        for remote in self.remotes.values():
            remote.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
