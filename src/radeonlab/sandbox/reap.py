"""Sandbox hosts left behind by a killed run (SIGKILL of pytest or of the demo) are found and removed.

A process that makes sandbox hosts for its own use (a test session, the demo) claims the sandbox's state dir:
<state>/owner.json names it (pid + start time). Hosts made to outlive their command (`radeonlab sandbox up`,
`demo --keep`) are marked kept. A host is stale when its sandbox's owner is dead and it was not kept: its
namespace processes, its overlay mount and its address lease are still there, and nothing will ever end them.
`reap_stale()` finds every stale host through the machine-wide address leases (config.LEASE_DIR: every
sandbox host of this machine, and nothing else) and destroys it; the next test session and `sandbox up` call
it, `radeonlab sandbox down --stale` does it on demand.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from radeonlab.contract.jobdir import alive, start_time
from radeonlab.sandbox import config

OWNER_FILE = "owner.json"


def claim(state_dir: Path) -> None:
    """This process owns the sandbox in `state_dir`: its hosts go when it dies (unless kept)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    (state_dir / OWNER_FILE).write_text(
        json.dumps({"pid": pid, "start": start_time(pid), "kept": False}) + "\n"
    )


def keep(state_dir: Path) -> None:
    """The sandbox's hosts are meant to outlive this process (`sandbox up`, `demo --keep`)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / OWNER_FILE).write_text(json.dumps({"kept": True}) + "\n")


def is_stale(state_dir: Path) -> bool:
    """The sandbox's owner is gone and its hosts were not meant to outlive it."""
    try:
        owner = json.loads((state_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False  # not claimed by anyone: made by hand (`sandbox up` of an older radeonlab) and kept
    if owner.get("kept"):
        return False
    return not alive(owner.get("pid"), owner.get("start"))


def stale_state_dirs(lease_dir: Path = config.LEASE_DIR) -> list[Path]:
    """State dirs of sandboxes with a leased host whose owner is dead."""
    from radeonlab.sandbox.hosts import lease_holder

    found: set[Path] = set()
    for lease in sorted(lease_dir.glob("[0-9]*")) if lease_dir.is_dir() else []:
        with contextlib.suppress(OSError):
            host_dir = lease_holder(lease.read_text())[0]
            state_dir = host_dir.parent.parent  # <state>/hosts/<name>
            if is_stale(state_dir):
                found.add(state_dir)
    return sorted(found)


def reap_stale(lease_dir: Path = config.LEASE_DIR) -> list[str]:
    """Destroy every stale sandbox host (processes, mounts, disk, lease); returns what was removed."""
    from radeonlab.sandbox.host import _flock
    from radeonlab.sandbox.hosts import Sandbox

    removed = []
    # One reaper at a time on this machine: two test sessions (or two pytest-xdist workers) starting together
    # would both find the same stale sandbox, and the second one's umount of a root the first already
    # unmounted fails. The second waits, then finds nothing stale left.
    with _flock(lease_dir / ".reap.lock"):
        for state_dir in stale_state_dirs(lease_dir):
            sandbox = Sandbox(state_dir)
            removed += [f"{state_dir}:{name}" for name in sandbox.hosts]
            sandbox.destroy_all()
            with contextlib.suppress(OSError):
                (state_dir / OWNER_FILE).unlink()
    return removed
