"""The lab's lock from one resolution: pip's installation report -> lock lines, sorted by who needs them.

The first host of a stack runs `pip install --dry-run --ignore-installed --report FILE` with the stack's
requirements (torch with its GPU targets' device extras, AMD's form; sdists allowed where AMD publishes
only an sdist, the `rocm` selector), then `--no-deps` for llamafactory. The report lists every distribution
pip chose, its file's URL and sha256 (download_info.archive_info) and its Requires-Dist; the lines are then
sorted by which requirement pulls them in (markers evaluated in the report's own environment, the host's):
every host, one GPU target (`# target: gfx1100`: what `torch[device-gfx1100]` adds), or some extras.
Pure functions, no pyinfra (the role's firstlock.py runs it).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement

from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import plan

NO_DEPS = ("llamafactory",)  # installed without its declared dependencies (they pull a CUDA torch)


@dataclass(frozen=True)
class Roots:
    """The stack's requirements, split by who needs them."""

    common: list[str]  # every host (torch without device extras)
    targets: dict[str, list[str]]  # gfx -> the requirements with its device extra
    extras: dict[str, list[str]]  # python_stack_extras name -> its pin

    def all(self) -> list[str]:
        """What one pip resolution is asked for (no llamafactory: it is installed --no-deps)."""
        out = [r for r in self.common if Requirement(r).name not in NO_DEPS]
        for reqs in [*self.targets.values(), *self.extras.values()]:
            out += reqs
        return out


def stack_roots(
    data: Mapping[str, Any], rocm_version: str, targets: Sequence[str], extras: Sequence[str]
) -> Roots:
    """The requirements of a host's stack: torch (AMD: one device extra per target), the requirements,
    llamafactory, the host's extras at their pins."""
    base = plan.torch_request(data, rocm_version, ()).requirements
    common = [*base, *data["python_stack_requirements"], f"llamafactory=={data['llamafactory_version']}"]
    per_target = {t: plan.torch_request(data, rocm_version, [t]).requirements for t in targets}
    pins = plan.extras_pins({**data, "python_stack_extras": list(extras)})
    return Roots(common, per_target, {plan.normalize(p.split("==")[0]): [p] for p in pins})


def _sha256(item: Mapping[str, Any]) -> str:
    info = (item.get("download_info") or {}).get("archive_info") or {}
    sha = (info.get("hashes") or {}).get("sha256")
    if not sha and str(info.get("hash", "")).startswith("sha256="):
        sha = info["hash"].split("=", 1)[1]
    if not sha:
        name = item.get("metadata", {}).get("name", "?")
        raise ValueError(f"pip's report gives no sha256 for {name} (its index names none): cannot lock it")
    return str(sha)


class Report:
    """pip installation reports (format version 1) as a graph: name -> (version, url, sha256, requires)."""

    def __init__(self, reports: Sequence[Mapping[str, Any]]) -> None:
        self.env: dict[str, str] = dict(reports[0].get("environment") or {})
        self.items: dict[str, Mapping[str, Any]] = {}
        for report in reports:
            for item in report.get("install", []):
                self.items[plan.normalize(item["metadata"]["name"])] = item

    def closure(self, roots: Sequence[str]) -> set[str]:
        """The names `roots` pull in (markers evaluated for the host; llamafactory's deps not followed)."""
        seen: set[str] = set()
        walked: set[tuple[str, frozenset[str]]] = set()
        todo = deque(Requirement(r) for r in roots)
        while todo:
            req = todo.popleft()
            name = plan.normalize(req.name)
            if name not in self.items:
                raise ValueError(f"pip's report has no {name} (asked for by {req})")
            seen.add(name)
            if name in NO_DEPS or (name, frozenset(req.extras)) in walked:
                continue
            walked.add((name, frozenset(req.extras)))
            for dep in map(Requirement, self.items[name]["metadata"].get("requires_dist") or []):
                if dep.marker is None or any(
                    dep.marker.evaluate({**self.env, "extra": e}) for e in [*req.extras, ""]
                ):
                    todo.append(dep)
        return seen

    def pin(self, name: str, target: str = "", extras: Sequence[str] = ()) -> stack_lock.Pin:
        item = self.items[name]
        url = str(item.get("download_info", {}).get("url", "")).split("#", 1)[0]
        version = str(item["metadata"]["version"])
        return stack_lock.Pin(name, version, _sha256(item), target, tuple(sorted(extras)), url)


def pins_from_reports(reports: Sequence[Mapping[str, Any]], roots: Roots) -> list[stack_lock.Pin]:
    """The lock lines of one resolution: the common closure for every host, what each target's device
    extra adds, what each extra adds. Distributions the report has but no root needs are left out."""
    report = Report(reports)
    common = report.closure(roots.common)
    owners: dict[str, tuple[str, set[str]]] = {n: ("", set()) for n in common}
    for gfx, reqs in sorted(roots.targets.items()):
        for name in report.closure([*roots.common, *reqs]) - common:
            owners.setdefault(name, (gfx, set()))
    for extra, reqs in sorted(roots.extras.items()):
        for name in report.closure([*roots.common, *reqs]) - common:
            if not owners.get(name, ("", set()))[0]:
                owners.setdefault(name, ("", set()))[1].add(extra)
    return [report.pin(n, t, sorted(e)) for n, (t, e) in owners.items()]


def carried_over(old: stack_lock.Lock, indexes: Sequence[str]) -> tuple[stack_lock.Pin, ...]:
    """The old lock's lines another resolution builds on. Resolved from other indexes (a mirror moved, a
    lab index on a new address), their URLs point where this lab no longer looks: those lines install by
    name from then on, under a header that names the new indexes."""
    if old.indexes == tuple(indexes):
        return old.pins
    return tuple(dataclasses.replace(p, url="") for p in old.pins)


def merge(old: Sequence[stack_lock.Pin], new: Sequence[stack_lock.Pin]) -> list[stack_lock.Pin]:
    """A lock's lines after another target set or extra was resolved into it: one line per (name,
    version); a line common in either is common; extras markers are united."""
    out: dict[tuple[str, str], stack_lock.Pin] = {}
    for p in [*new, *old]:
        have = out.get((p.name, p.version))
        if have is None:
            out[(p.name, p.version)] = p
        elif have.target or have.extras:
            if not (p.target or p.extras):
                out[(p.name, p.version)] = p
            elif have.extras and p.extras:
                united = tuple(sorted({*have.extras, *p.extras}))
                out[(p.name, p.version)] = stack_lock.Pin(p.name, p.version, p.sha256, "", united, have.url)
    return sorted(out.values(), key=lambda p: (p.target, p.extras, p.name, p.version))


def header(key: str, host_name: str, indexes: Sequence[str], lock_file: str) -> tuple[str, ...]:
    return (
        f"# radeonlab lock: {key}",
        f"{stack_lock.INDEXES}{' '.join(indexes)}",
        f"# resolved by pip on {host_name}, {datetime.date.today().isoformat()}, by the python_stack role "
        "(the first deploy of this stack); other hosts install from it with --require-hashes --no-deps",
        f"# commit it ({lock_file}) to keep the lab on these files; python_stack_lock_refresh: true "
        "re-resolves and rewrites it",
    )
