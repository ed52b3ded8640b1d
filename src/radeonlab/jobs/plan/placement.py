"""Where a job runs when `submit` is not told: every host judged against what the job asks, the best chosen.

Pure logic (`asks_of`, `judge`, `choose`) over what one probe learned of each host (jobs/fleet/view.py
HostView, from the command's one probe per host: jobs/fleet/observe.py); the plan reads the same views. A
host is accepted when it is in the placement's host group, reachable, provisioned (host record present,
current schema, cards unchanged) and its card meets what the job asks:

- the spec's `radeonlab.placement`: gfx family (`gfx110x`, `gfx120x`, `gfx11`, an exact `gfx1100`, or a
  family name such as `RDNA3`) and `min_vram_gb` (decimal GB, as cards are sold: a "24 GB" RX 7900 XTX
  reports 24560 MiB = 25.8 GB, which is 23.98 GiB);
- bf16 when the spec forces it (`bf16: true` or `pure_bf16: true`);
- the VRAM estimate (jobs/plan/estimate.py) against the card's free memory (its budget minus the live
  reading), when the model's config.json is known (a local folder, or fetched from the Hub).

Among the accepted hosts: hosts with a card before hosts without one (a cpu-only host is a fallback, never
the first choice), then the shortest queue (queued + running jobs on the GPU the job would use), then the most
free memory, then the name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from radeonlab.contract.records import GB, GIB, GpuRecord, HostRecord
from radeonlab.errors import PlacementError, RenderError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.view import CPU_SLOT, HostView
from radeonlab.jobs.plan.estimate import EstimateError, estimate, fits
from radeonlab.jobs.plan.render import PRECISION_KEYS, choose_precision
from radeonlab.jobs.plan.wishes import CardWishes
from radeonlab.jobs.spec.load import Spec

RULE = "hosts with a card first, then shortest queue, most free memory, name"


@dataclass(frozen=True)
class Asks:
    """What the job asks of a host, from its spec ("needs" are packages: jobs/spec/needs.py)."""

    train: Mapping[str, Any] = field(default_factory=dict)
    host_group: str | None = None
    card: CardWishes = CardWishes()
    model_config: Mapping[str, Any] | None = None  # the model's config.json, when known
    no_estimate: str = ""  # why there is no VRAM estimate (model_config is None)


def asks_of(spec: Spec, model_config: Mapping[str, Any] | None, no_estimate: str = "") -> Asks:
    """What the job asks; `model_config` is the model's config.json (jobs/plan/model.py finds it)."""
    placement = spec.radeonlab.placement
    return Asks(
        train=dict(spec.train),
        host_group=placement.host_group,
        card=CardWishes(
            gfx_family=placement.gfx_family,
            bf16=spec.train.get("bf16") is True or spec.train.get("pure_bf16") is True,
            min_vram_gb=placement.min_vram_gb,
        ),
        model_config=model_config,
        no_estimate=no_estimate,
    )


@dataclass
class Decision:
    """One host's verdict: accepted or rejected, and why (one line)."""

    host: str
    accepted: bool
    reason: str
    has_card: bool = False
    queue: int = 0
    free_memory: int = 0

    def line(self) -> str:
        return f"{self.host}: {'accepted' if self.accepted else 'rejected'}: {self.reason}"

    def rank_key(self) -> tuple[bool, int, int, str]:
        return (not self.has_card, self.queue, -self.free_memory, self.host)


def in_group(target: HostTarget, group: str | None) -> bool:
    """Whether placement may consider this host (the placement's host group, or its own name)."""
    return not group or group in (*target.groups, target.name)


def gfx_matches(wanted: str, gpu: GpuRecord) -> bool:
    """`gfx110x`, `gfx11`, `gfx1100` match by prefix (trailing x: any digit); `RDNA3` matches the family."""
    want = wanted.strip().lower()
    gfx = str(gpu.gfx or "").lower()
    if want.startswith("gfx"):
        return bool(gfx) and gfx.startswith(want.rstrip("x"))
    return want == str(gpu.family or "").lower()


def card_problems(asks: Asks, cards: Sequence[GpuRecord]) -> list[str]:
    """Why these cards cannot take the job, by the spec's explicit wishes (gfx family, min VRAM, bf16)."""
    if not cards:
        wishes = [
            w
            for w, on in (
                ("gfx_family", asks.card.gfx_family),
                ("min_vram_gb", asks.card.min_vram_gb),
                ("bf16", asks.card.bf16),
            )
            if on
        ]
        return [f"no GPU in its host record, the spec asks for {', '.join(wishes)}"] if wishes else []
    problems = []
    for card in cards:
        total = card.memory
        if asks.card.gfx_family and not gfx_matches(asks.card.gfx_family, card):
            problems.append(f"{card.label()} is not {asks.card.gfx_family}")
        if asks.card.min_vram_gb and total < asks.card.min_vram_gb * GB:
            problems.append(
                f"{card.label()} has {total / GB:.1f} GB ({total / GIB:.1f} GiB) of memory, "
                f"placement min_vram_gb is {asks.card.min_vram_gb:g} GB"
            )
        if asks.card.bf16 and not card.bf16:
            problems.append(f"{card.label()} has no bf16 and the spec forces bf16")
    return problems


def estimate_train(
    train_in: Mapping[str, Any], record: HostRecord, cards: Sequence[GpuRecord]
) -> dict[str, Any]:
    """The training config with the precision the job has on this host's card (the estimate's bytes per
    value). On a host whose torch is an (allowed) CPU build the job trains in fp32 on the CPU; the estimate
    still answers "would it fit the card", which is what placement and --strict judge."""
    train = {k: v for k, v in train_in.items() if k not in PRECISION_KEYS}
    try:
        precision, _why = choose_precision(train_in, record, cards, on_card=True)
    except RenderError:  # bf16 refused on this card: already a problem of its own
        precision = "fp16"
    if precision in ("bf16", "fp16"):
        train[precision] = True
    return train


def free_memory(view: HostView, card: GpuRecord) -> int:
    """The card's budget minus what the live reading says is in use."""
    reading = view.reading(card.index)
    used = reading.vram_used if reading and reading.vram_used is not None else card.vram_used
    return max(0, card.memory - int(used or 0))


def judge(view: HostView, target: HostTarget, asks: Asks) -> Decision:
    """Accept or reject one host, with the reason."""
    name = view.name
    if not in_group(target, asks.host_group):
        return Decision(name, False, f"not in host group {asks.host_group}")
    if not view.reachable:
        return Decision(name, False, f"unreachable ({view.error})")
    if view.record is None:
        return Decision(name, False, f"not provisioned ({view.note or 'no host record'})")
    record = view.record
    cards = record.training_gpus()
    problems = card_problems(asks, cards)
    if problems:
        return Decision(name, False, "; ".join(problems))
    slot = str(cards[0].index) if cards else CPU_SLOT
    queue = view.queue().get(slot, 0)
    if not cards:
        return Decision(
            name,
            True,
            f"no GPU (trains on CPU), queue {queue}; ranked after hosts with a card",
            has_card=False,
            queue=queue,
        )
    card = cards[0]
    where = f"GPU {slot} {card.name or '?'}"
    free = free_memory(view, card)
    facts = [f"queue {queue}", f"{free / GIB:.1f} GiB free"]
    if asks.model_config is None:
        facts.append(asks.no_estimate or "VRAM estimate skipped: no model config.json")
    else:
        try:
            verdict = fits(estimate(asks.model_config, estimate_train(asks.train, record, cards)), free)
        except EstimateError as exc:
            facts.append(f"VRAM estimate skipped: {exc}")
        else:
            if not verdict.fits:
                return Decision(name, False, f"{where}: {verdict.message}", True, queue, free)
            facts.append(f"estimate ~{verdict.peak / GIB:.1f} GiB fits")
    return Decision(name, True, f"{where}, {', '.join(facts)}", True, queue, free)


def choose(
    views: Iterable[HostView], targets: Mapping[str, HostTarget], asks: Asks, count: int = 1
) -> tuple[list[str], list[Decision]]:
    """The `count` best hosts (best first) and every host's decision (inventory order).

    Raises PlacementError, carrying the decisions, when fewer than `count` hosts fit."""
    decisions = [judge(v, targets[v.name], asks) for v in views]
    accepted = sorted((d for d in decisions if d.accepted), key=Decision.rank_key)
    if len(accepted) < count:
        what = (
            "no host fits this job" if not accepted else f"{len(accepted)} host(s) fit, the job needs {count}"
        )
        why = "; ".join(d.line() for d in decisions if not d.accepted) or "the inventory has no host"
        raise PlacementError(f"{what}: {why}", decisions)
    return [d.host for d in accepted[:count]], decisions


def say_decisions(
    views: Sequence[HostView],
    targets: Mapping[str, HostTarget],
    asks: Asks,
    count: int,
    say: Callable[[str], None] = print,
) -> tuple[list[str], list[Decision]]:
    """`choose`, saying one line per host and the choice (also when none fits: then PlacementError)."""
    try:
        chosen, decisions = choose(views, targets, asks, count)
    except PlacementError as exc:
        for d in exc.decisions:
            say(f"placement: {d.line()}")
        raise
    for d in decisions:
        say(f"placement: {d.line()}")
    say(f"placement: chose {', '.join(chosen)} ({RULE})")
    return chosen, decisions
