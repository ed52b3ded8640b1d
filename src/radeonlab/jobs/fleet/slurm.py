"""What Slurm says of each host, for `radeonlab fleet`: the controller-only host, each node's state, and
the jobs it holds pending (their folders are staged on the candidate nodes with no launcher yet).

A host that only runs slurmctld has no GPU stack and no host record by design (roles/slurm): `fleet` names
it "Slurm controller" instead of "not provisioned". A node whose slurmd stopped answering is `down*` in
`sinfo`, and Slurm places nothing there: `fleet` shows that beside the host's own readings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from radeonlab.errors import RadeonlabError, one_line
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.plan import slurm
from radeonlab.jobs.ssh.connection import connect
from radeonlab.roles.slurm import plan as role_plan
from radeonlab.roles.slurm.defaults import DEFAULTS as ROLE_DEFAULTS

CONTROLLER = "Slurm controller"


def node_word(node: slurm.SlurmNode) -> str:
    """`idle`, `mixed`, `down* (Not responding): Slurm places nothing here`."""
    if node.usable:
        return f"Slurm node: {node.state}"
    why = f" ({node.reason})" if node.reason else ""
    return f"Slurm node: {node.state}{why}: Slurm places nothing here"


@dataclass
class SlurmSays:
    words: dict[str, str] = field(default_factory=dict)  # inventory host -> what Slurm says of it
    pending: frozenset[str] = frozenset()  # radeonlab job ids (batch job names) Slurm holds pending


def slurm_says(targets: Mapping[str, HostTarget]) -> SlurmSays:
    """What Slurm says of each host (hosts outside the Slurm groups: absent) and which jobs it holds
    pending, read on the controller in one connection (sinfo, squeue)."""
    groups: dict[str, list[str]] = {}
    for target in targets.values():
        for group in target.groups:
            groups.setdefault(group, []).append(target.name)
    try:
        lab = role_plan.lab_of(groups, ROLE_DEFAULTS)
    except role_plan.SlurmPlanError as exc:
        return SlurmSays(dict.fromkeys(targets, f"Slurm: {exc}"))
    if lab is None:
        return SlurmSays()
    words: dict[str, str] = {}
    if lab.controller_only(lab.controller):
        words[lab.controller] = CONTROLLER
    try:
        with connect(targets[lab.controller]) as ctl:
            text = ctl.run(["sinfo", "-h", "-N", "-o", slurm.SINFO_FORMAT], timeout=30).stdout
            queue = ctl.run(["squeue", "-h", "-t", "pending", "-o", slurm.SQUEUE_FORMAT], timeout=30).stdout
    except RadeonlabError as exc:
        words[lab.controller] = f"{CONTROLLER} (sinfo failed: {one_line(exc)})"
        return SlurmSays(words)
    nodes = {n.name: n for n in slurm.parse_sinfo(text)}
    for name in lab.nodes:
        node = nodes.get(role_plan.node_name(name, targets[name].data))
        said = node_word(node) if node else "Slurm node: not registered"
        words[name] = f"{CONTROLLER}; {said}" if name == lab.controller else said
    return SlurmSays(words, frozenset(j.name for j in slurm.parse_squeue(queue)))
