"""The deploy's checks of a Slurm lab, as pure functions: what is wrong, one line each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from radeonlab.roles.slurm.plan import PATHS


def munge_problem(node: str, controller: str, decoded: Mapping[str, Any]) -> str | None:
    """One line when the controller could not decode the node's credential (the keys differ)."""
    if decoded.get("ok"):
        return None
    why = str(decoded.get("error") or "no answer").strip()
    return (
        f"munge key mismatch: {controller} cannot decode a credential made on {node} ({why}); "
        "every Slurm host needs the same /etc/munge/munge.key (slurm_munge_key_file)"
    )


def uid_problems(user: str, uids: Mapping[str, int | None]) -> list[str]:
    """Slurm runs a job under the submitter's uid on the node: the user must have one uid everywhere."""
    missing = sorted(h for h, uid in uids.items() if uid is None)
    if missing:
        return [f"training user {user} does not exist on {', '.join(missing)}: Slurm runs jobs by uid"]
    by_uid: dict[int, list[str]] = {}
    for h, uid in sorted(uids.items()):
        by_uid.setdefault(int(uid), []).append(h)  # type: ignore[arg-type]
    if len(by_uid) > 1:
        seen = "; ".join(f"uid {u} on {', '.join(hs)}" for u, hs in sorted(by_uid.items()))
        return [f"training user {user} has different uids ({seen}): Slurm runs jobs by uid"]
    return []


# sinfo states that mean "slurmctld hears this node" (a trailing * is "not responding", ~ power save).
REGISTERED = frozenset({"idle", "allocated", "mixed", "completing", "planned", "reserved"})


def parse_node_states(text: str) -> dict[str, tuple[str, str]]:
    """`sinfo -h -N -o '%N|%T|%E'` -> {node: (state, reason)} (a node is listed once per partition)."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            out[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return out


def registration_problems(nodes: Sequence[str], states: Mapping[str, tuple[str, str]]) -> list[str]:
    """Nodes slurmctld does not hear, one line each."""
    problems = []
    for name in nodes:
        state, reason = states.get(name, ("missing", ""))
        if state.rstrip("*~#!%$@^-") not in REGISTERED or "*" in state:
            detail = f": {reason}" if reason and reason != "none" else ""
            problems.append(f"Slurm node {name} is {state}{detail} (see {PATHS['slurmd_log']} on it)")
    return problems
