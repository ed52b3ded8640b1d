"""Where a job runs when `submit` is not told: every host judged against the job's needs, the best one chosen.

Pure logic (`needs_of`, `judge`, `choose`) over what one gather step learns from each host (`gather`: the
same parallel, one-round-trip-per-host probe as `radeonlab fleet`, plus the per-GPU queue read from the
host's job folders). A host is accepted when it is in the placement's host group, reachable, provisioned
(host record present, current schema) and its card meets the job's needs:

- the spec's `radeonlab.placement`: gfx family (`gfx110x`, `gfx120x`, `gfx11`, an exact `gfx1100`, or a
  family name such as `RDNA3`) and `min_vram_gb` (decimal GB, as cards are sold: a "24 GB" RX 7900 XTX
  reports 24560 MiB = 25.8 GB, which is 23.98 GiB);
- bf16 when the spec forces it (`bf16: true` or `pure_bf16: true`);
- the VRAM estimate (jobs/plan/estimate.py) against the card's free VRAM (total - the live reading), for a
local
  model folder with a config.json; a hub model has no local config: that criterion is skipped, with a note.

Among the accepted hosts: hosts with a card before hosts without one (a cpu-only demo host is a fallback,
never the first choice), then the shortest queue (queued + running jobs on the GPU the job would use), then
the most free VRAM, then the name.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.jobs.fleet import probe as fleet
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.plan.render import card_label, choose_precision, local_model_dir, pick_gpus
from radeonlab.jobs.spec.load import Spec

from radeonlab.contract.state import JobState
from radeonlab.errors import RadeonlabError

PLACEMENT_DEFAULTS: dict[str, Any] = {
    "timeout_s": fleet.FLEET_DEFAULTS["timeout_s"],  # per host, as `radeonlab fleet`
}
GB = 10**9  # min_vram_gb is in decimal GB (what card makers print); messages show GiB beside it
GIB = 2**30
CPU_SLOT = "cpu"  # the queue key of a job without a GPU (the launcher's cpu.lock)
QUEUE_MARK = "@placement-queue"
PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")

# Runs under the host's python3 ($1 = the host record's path): queued + running jobs per GPU index, as one
# JSON line {"0": 2, "cpu": 1}. A job that says running but whose processes are gone does not count.
_QUEUE_PY = f"""
import json, os, sys
{fleet.HOST_PY_ALIVE}def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return None
try:
    jobs_dir = json.load(open(sys.argv[1]))["jobs_dir"]
    names = sorted(os.listdir(jobs_dir))
except Exception:
    names, jobs_dir = [], ""
out = {{}}
for name in names:
    state = load(os.path.join(jobs_dir, name, "state.json")) or {{}}
    s = state.get("state")
    live = any(alive(state.get(k)) for k in ("pid", "child_pid", "pgid"))
    if s == {JobState.QUEUED.value!r} or (s == {JobState.RUNNING.value!r} and live):
        job = load(os.path.join(jobs_dir, name, "job.json")) or {{}}
        for gpu in job.get("gpus") or [{CPU_SLOT!r}]:
            out[str(gpu)] = out.get(str(gpu), 0) + 1
print(json.dumps(out))
"""


class PlacementError(RadeonlabError):
    """No host (or not enough hosts) fits the job; `decisions` says why each one was rejected."""

    def __init__(self, message: str, decisions: list[Decision]) -> None:
        super().__init__(message)
        self.decisions = decisions


# ------------------------------------------------------------------------------------------ what it needs


@dataclass(frozen=True)
class Needs:
    """What the job asks of a host, from its spec."""

    train: Mapping[str, Any] = field(default_factory=dict)
    host_group: str | None = None
    gfx_family: str | None = None
    min_vram_gb: float | None = None
    bf16: bool = False  # forced by the spec
    model_config: Mapping[str, Any] | None = None  # config.json of a local model folder
    no_estimate: str = ""  # why there is no VRAM estimate (model_config is None)


def needs_of(spec: Spec) -> Needs:
    """The job's needs; reads the local model folder's config.json when the spec names one."""
    placement = spec.radeonlab.placement
    model = spec.train.get("model_name_or_path")
    folder = local_model_dir(spec)
    config, why = None, ""
    if folder is None:
        why = f"VRAM estimate skipped: {model} is a hub model without a local config.json"
    elif not (Path(folder) / "config.json").is_file():
        why = f"VRAM estimate skipped: {folder} has no config.json"
    else:
        config = json.loads((Path(folder) / "config.json").read_text())
    return Needs(
        train=dict(spec.train),
        host_group=placement.host_group,
        gfx_family=placement.gfx_family,
        min_vram_gb=placement.min_vram_gb,
        bf16=spec.train.get("bf16") is True or spec.train.get("pure_bf16") is True,
        model_config=config,
        no_estimate=why,
    )


# ------------------------------------------------------------------------------------ what a host offers


@dataclass
class Candidate:
    """What the gather learned of one host."""

    name: str
    groups: tuple[str, ...] = ()
    reachable: bool = True
    error: str | None = None  # why unreachable
    record: dict[str, Any] | None = None  # None: not provisioned (provisioned_note says why)
    provisioned_note: str = ""
    vram_used: dict[int, int] = field(default_factory=dict)  # live readings by GPU index
    queue: dict[str, int] | None = None  # queued + running jobs per GPU index ("cpu": no GPU); None: unread


@dataclass
class Decision:
    """One host's verdict: accepted or rejected, and why (one line)."""

    host: str
    accepted: bool
    reason: str
    has_card: bool = False
    queue: int = 0
    free_vram: int = 0

    def line(self) -> str:
        return f"{self.host}: {'accepted' if self.accepted else 'rejected'}: {self.reason}"

    def rank_key(self) -> tuple[bool, int, int, str]:
        return (not self.has_card, self.queue, -self.free_vram, self.host)


def gfx_matches(wanted: str, gpu: Mapping[str, Any]) -> bool:
    """`gfx110x`, `gfx11`, `gfx1100` match by prefix (trailing x: any digit); `RDNA3` matches the family."""
    want = wanted.strip().lower()
    gfx = str(gpu.get("gfx") or "").lower()
    if want.startswith("gfx"):
        return bool(gfx) and gfx.startswith(want.rstrip("x"))
    return want == str(gpu.get("family") or "").lower()


def card_problems(needs: Needs, cards: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why these cards cannot take the job, by the spec's explicit wishes (gfx family, min VRAM, bf16)."""
    if not cards:
        wishes = [
            w
            for w, on in (
                ("gfx_family", needs.gfx_family),
                ("min_vram_gb", needs.min_vram_gb),
                ("bf16", needs.bf16),
            )
            if on
        ]
        return [f"no GPU in its host record, the spec asks for {', '.join(wishes)}"] if wishes else []
    problems = []
    for card in cards:
        label = card_label(card)
        total = int(card.get("vram_total") or 0)
        if needs.gfx_family and not gfx_matches(needs.gfx_family, card):
            problems.append(f"{label} is not {needs.gfx_family}")
        if needs.min_vram_gb and total < needs.min_vram_gb * GB:
            problems.append(
                f"{label} has {total / GB:.1f} GB ({total / GIB:.1f} GiB) VRAM, "
                f"placement min_vram_gb is {needs.min_vram_gb:g} GB"
            )
        if needs.bf16 and not card.get("bf16"):
            problems.append(f"{label} has no bf16 and the spec forces bf16")
    return problems


def _estimate_train(needs: Needs, record: Mapping[str, Any], cards: list[dict[str, Any]]) -> dict[str, Any]:
    """The training config with the precision this host would render (the estimate's bytes per value)."""
    train = {k: v for k, v in needs.train.items() if k not in PRECISION_KEYS}
    try:
        precision, _why = choose_precision(needs.train, record, cards)
    except ValueError:  # bf16 refused: already a card problem
        precision = "fp16"
    if precision in ("bf16", "fp16"):
        train[precision] = True
    return train


def judge(candidate: Candidate, needs: Needs) -> Decision:
    """Accept or reject one host, with the reason."""
    from radeonlab.jobs.plan.estimate import EstimateError, estimate, fits

    name = candidate.name
    if needs.host_group and needs.host_group not in candidate.groups and needs.host_group != name:
        return Decision(name, False, f"not in host group {needs.host_group}")
    if not candidate.reachable:
        return Decision(name, False, f"unreachable ({candidate.error})")
    if candidate.record is None:
        return Decision(name, False, f"not provisioned ({candidate.provisioned_note or 'no host record'})")
    record = candidate.record
    cards = pick_gpus(record, None)
    problems = card_problems(needs, cards)
    if problems:
        return Decision(name, False, "; ".join(problems))
    slot = str(cards[0]["index"]) if cards else CPU_SLOT
    queue = (candidate.queue or {}).get(slot, 0)
    where = f"GPU {slot} {cards[0].get('name') or '?'}" if cards else "no GPU (trains on CPU)"
    if not cards:
        note = f"queue {queue}; ranked after hosts with a card"
        return Decision(name, True, f"{where}, {note}", has_card=False, queue=queue)
    card = cards[0]
    used = candidate.vram_used.get(int(card["index"]), card.get("vram_used") or 0)
    free = max(0, int(card.get("vram_total") or 0) - int(used or 0))
    facts = [f"queue {queue}", f"{free / GIB:.1f} GiB free"]
    if needs.model_config is None:
        facts.append(needs.no_estimate)
    else:
        try:
            verdict = fits(estimate(needs.model_config, _estimate_train(needs, record, cards)), free)
        except EstimateError as exc:
            facts.append(f"VRAM estimate skipped: {exc}")
        else:
            if not verdict.fits:
                return Decision(name, False, f"{where}: {verdict.message}", True, queue, free)
            facts.append(f"estimate ~{verdict.peak / GIB:.1f} GiB fits")
    return Decision(name, True, f"{where}, {', '.join(facts)}", True, queue, free)


def choose(candidates: Iterable[Candidate], needs: Needs, count: int = 1) -> tuple[list[str], list[Decision]]:
    """The `count` best hosts (best first) and every host's decision (inventory order).

    Raises PlacementError, carrying the decisions, when fewer than `count` hosts fit."""
    decisions = [judge(c, needs) for c in candidates]
    accepted = sorted((d for d in decisions if d.accepted), key=Decision.rank_key)
    if len(accepted) < count:
        what = (
            "no host fits this job" if not accepted else f"{len(accepted)} host(s) fit, the job needs {count}"
        )
        why = "; ".join(d.line() for d in decisions if not d.accepted) or "the inventory has no host"
        raise PlacementError(f"{what}: {why}", decisions)
    return [d.host for d in accepted[:count]], decisions


def explain(chosen: Sequence[str], decisions: Sequence[Decision]) -> list[str]:
    """The lines submit prints: one per host, then the choice and the rule that made it."""
    lines = [f"placement: {d.line()}" for d in decisions]
    rule = "hosts with a card first, then shortest queue, most free VRAM, name"
    lines.append(f"placement: chose {', '.join(chosen)} ({rule})")
    return lines


# ---------------------------------------------------------------------------------------------- gathering


@dataclass
class PlacementStatus(fleet.HostStatus):
    """A fleet row plus what placement needs beyond it: the whole host record and the per-GPU queue."""

    record: dict[str, Any] | None = None
    gpu_queue: dict[str, int] | None = None


def probe_script() -> str:
    """fleet's probe (in a subshell: it ends with `exit 0`), then the per-GPU queue: still one round trip."""
    return "\n".join(
        [
            f"(\n{fleet.probe_script()}\n)",
            f'echo "{QUEUE_MARK}"',
            f'python3 -c {shlex.quote(_QUEUE_PY)} "$1" 2>/dev/null || echo "{{}}"',
            "exit 0",
        ]
    )


def parse_probe(name: str, stdout: str) -> PlacementStatus:
    """A reachable host's status from probe_script()'s output."""
    head, _, tail = stdout.partition(f"\n{QUEUE_MARK}\n")
    base = fleet.parse_probe(name, head)
    record, _note = fleet.judge_record(fleet.split_sections(head).get("@record", ""))
    try:
        queue = json.loads((tail.strip().splitlines() or ["{}"])[-1])
    except json.JSONDecodeError:
        queue = None
    return PlacementStatus(**vars(base), record=record, gpu_queue=queue if isinstance(queue, dict) else None)


def probe_host(
    target: HostTarget, timeout: float, opened: Callable[..., None] = lambda r: None
) -> fleet.HostStatus:
    """fleet.probe_host with placement's script; never raises for a host problem."""
    return fleet.probe_host(target, timeout, opened, script=probe_script, parse=parse_probe)


def to_candidate(target: HostTarget, status: fleet.HostStatus) -> Candidate:
    record = getattr(status, "record", None)
    return Candidate(
        name=target.name,
        groups=target.groups,
        reachable=status.reachable,
        error=status.error,
        record=record if status.provisioned else None,
        provisioned_note=status.provisioned_note,
        vram_used={g.index: g.vram_used for g in status.gpus if g.vram_used is not None},
        queue=getattr(status, "gpu_queue", None),
    )


def gather(
    targets: Sequence[HostTarget], timeout: float = PLACEMENT_DEFAULTS["timeout_s"]
) -> list[Candidate]:
    """Every host's candidate facts, probed in parallel (one SSH round trip each) by fleet's gather."""
    statuses = fleet.gather(targets, timeout, probe=probe_host)
    return [to_candidate(t, s) for t, s in zip(targets, statuses, strict=True)]


def place(
    targets: Mapping[str, HostTarget],
    needs: Needs,
    count: int = 1,
    say: Callable[[str], None] = print,
    timeout: float = PLACEMENT_DEFAULTS["timeout_s"],
) -> list[HostTarget]:
    """Gather, judge, print one line per host and the choice; the chosen targets, best first.

    Hosts outside the placement's host group are judged without being contacted."""
    in_group = [
        t for t in targets.values() if not needs.host_group or needs.host_group in (*t.groups, t.name)
    ]
    gathered = {c.name: c for c in gather(in_group, timeout)}
    candidates = [gathered.get(n) or Candidate(n, t.groups) for n, t in targets.items()]
    try:
        chosen, decisions = choose(candidates, needs, count)
    except PlacementError as exc:
        for d in exc.decisions:
            say(f"placement: {d.line()}")
        raise
    for line in explain(chosen, decisions):
        say(line)
    return [targets[n] for n in chosen]
