"""Which workstations the job runner can reach: the same pyinfra inventory files the provisioning uses.

The inventory is loaded by pyinfra's own loader (`pyinfra_cli.inventory.make_inventory_from_files`), so host
data, group data, `group_data/` folders and data precedence behave exactly as in `pyinfra inventories/home.py
deploy/setup.py`. Each host becomes a `HostTarget`: what `radeonlab.jobs.ssh.connection.connect` needs, and
nothing read from ~/.ssh/config.

The loader runs in a child process (`python -m radeonlab.jobs.fleet.inventory --dump FILE`, JSON out):
importing `pyinfra_cli` monkey-patches the whole process for gevent, which turns the job runner's threads
(transfers, fleet's per-host deadline) into greenlets and deadlocks threads started before the import.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.errors import InventoryError  # an input error: exit 2, one line (radeonlab/errors.py)

# Defaults that differ from pyinfra's on purpose: pyinfra accepts new host keys and uses the agent and
# ~/.ssh/id_* unless told otherwise; the job runner checks host keys strictly and uses only the key the
# inventory names, unless the inventory asks for more.
DEFAULTS: dict[str, Any] = {
    "ssh_port": 22,
    "ssh_strict_host_key_checking": "yes",
    "ssh_allow_agent": False,
    "ssh_look_for_keys": False,
    "ssh_known_hosts_file": "~/.ssh/known_hosts",
}
STRICT_MODES = ("yes", "accept-new")  # "no"/"off" (accept any key) is refused: jobs carry tokens and data


@dataclass(frozen=True)
class HostTarget:
    """One workstation as the job runner sees it (inventory name + SSH settings + its host data)."""

    name: str
    hostname: str
    port: int = 22
    user: str | None = None
    key_filename: str | None = None
    known_hosts_file: str = str(Path(DEFAULTS["ssh_known_hosts_file"]).expanduser())
    strict_host_key_checking: str = "yes"
    groups: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    allow_agent: bool = False
    look_for_keys: bool = False

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files this host's key under: `host` on port 22, else `[host]:port`."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def _one_line_error(exc: BaseException, filename: str) -> str:
    """`file:line: Type: message` for an exception raised while executing an inventory file."""
    if isinstance(exc, SyntaxError):
        return f"{exc.filename or filename}:{exc.lineno}: SyntaxError: {exc.msg}"
    line = "?"
    tb = getattr(exc, "_traceback", None) or exc.__traceback__
    for frame in traceback.extract_tb(tb):
        if Path(frame.filename).resolve() == Path(filename).resolve():
            line = str(frame.lineno)
    return f"{filename}:{line}: {type(exc).__name__}: {exc}"


def _resolve_path(value: str | None, base: Path) -> str | None:
    """Expand ~ and resolve a relative path against the cwd first (as pyinfra does), else the inventory."""
    if not value:
        return None
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    if (Path.cwd() / path).exists():
        return str(Path.cwd() / path)
    return str(base / path)


def _target(name: str, groups: Iterable[str], data: dict[str, Any], base: Path) -> HostTarget:
    merged = {**DEFAULTS, **{k: v for k, v in data.items() if v is not None}}
    strict = str(merged["ssh_strict_host_key_checking"]).lower()
    if strict not in STRICT_MODES:
        raise InventoryError(
            f"{name}: ssh_strict_host_key_checking={strict!r} is not supported by radeonlab "
            f"(use one of: {', '.join(STRICT_MODES)})"
        )
    return HostTarget(
        name=name,
        hostname=str(merged.get("ssh_hostname") or name),
        port=int(merged["ssh_port"]),
        user=merged.get("ssh_user"),
        key_filename=_resolve_path(merged.get("ssh_key"), base),
        known_hosts_file=_resolve_path(merged["ssh_known_hosts_file"], base) or "",
        strict_host_key_checking=strict,
        groups=tuple(g for g in groups if g != "all"),
        data=merged,
        allow_agent=bool(merged["ssh_allow_agent"]),
        look_for_keys=bool(merged["ssh_look_for_keys"]),
    )


def load_inventory(path: str | Path) -> dict[str, HostTarget]:
    """Load a pyinfra inventory file into {host name: HostTarget}, in inventory order.

    Raises InventoryError with a one-line message (file:line for errors in the file itself).
    """
    inventory_file = Path(path)
    if not inventory_file.is_file():
        # pyinfra would read a missing file name as a comma-separated host list; we want a file.
        raise InventoryError(f"{inventory_file}: no such inventory file")
    done = subprocess.run(
        [sys.executable, "-m", "radeonlab.jobs.fleet.inventory", "--dump", str(inventory_file)],
        capture_output=True,
        text=True,
    )
    try:
        dumped = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InventoryError(f"{inventory_file}: the inventory loader failed: {tail}") from None
    if "error" in dumped:
        raise InventoryError(dumped["error"])
    base = inventory_file.resolve().parent
    return {name: _target(name, groups, data, base) for name, groups, data in dumped["hosts"]}


def _dump(filename: str) -> dict[str, Any]:
    """Run pyinfra's inventory loader on `filename` (in the child process): hosts, or a one-line error."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.exceptions import UnexpectedExternalError
    from pyinfra_cli.inventory import make_inventory_from_files

    try:
        # pyinfra's file loader records the file being executed on the current State, as its CLI sets up.
        with ctx_state.use(State()):
            inventory = make_inventory_from_files(filename)
    except UnexpectedExternalError as exc:
        return {"error": _one_line_error(exc.exception, filename)}
    except SyntaxError as exc:
        return {"error": _one_line_error(exc, filename)}
    except Exception as exc:  # pyinfra's own errors (bad connector, bad group) name no line
        return {"error": f"{filename}: {type(exc).__name__}: {exc}"}
    return {"hosts": [[host.name, list(host.groups), host.data.dict()] for host in inventory]}


def select_hosts(targets: Mapping[str, HostTarget], limit: str | Iterable[str] | None) -> list[HostTarget]:
    """Pick hosts like pyinfra's `--limit`: host names, group names or glob patterns, comma-separated.

    No limit selects every host. A pattern that matches nothing is an error naming the known hosts/groups.
    """
    if limit is None:
        return list(targets.values())
    patterns = [limit] if isinstance(limit, str) else list(limit)
    patterns = [p.strip() for item in patterns for p in item.split(",") if p.strip()]
    chosen: dict[str, HostTarget] = {}
    for pattern in patterns:
        matched = [
            t
            for t in targets.values()
            if fnmatch.fnmatchcase(t.name, pattern) or any(fnmatch.fnmatchcase(g, pattern) for g in t.groups)
        ]
        if not matched:
            raise InventoryError(f"no host or group matches {pattern!r}; {known_names(targets)}")
        chosen.update((t.name, t) for t in matched)
    return list(chosen.values())


def get_host(targets: Mapping[str, HostTarget], name: str) -> HostTarget:
    """The one host called `name`, or an InventoryError listing the known ones."""
    try:
        return targets[name]
    except KeyError:
        raise InventoryError(f"unknown host {name!r}; {known_names(targets)}") from None


def known_names(targets: Mapping[str, HostTarget]) -> str:
    """`known hosts: a, b; groups: g` for error messages."""
    groups = sorted({g for t in targets.values() for g in t.groups})
    hosts = ", ".join(targets) or "(none)"
    return f"known hosts: {hosts}" + (f"; groups: {', '.join(groups)}" if groups else "")


if __name__ == "__main__" and sys.argv[1:2] == ["--dump"]:
    print(json.dumps(_dump(sys.argv[2]), default=str))
