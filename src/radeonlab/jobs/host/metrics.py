"""LLaMA-Factory's trainer_log.jsonl: progress (steps, loss, lr, tokens/s, ETA), NaN/Inf, and the
"loss has not fallen over the first 100 steps" rule.

The file is read incrementally (`TrainerLogReader.feed` takes whatever bytes arrived since the last read).
Its lines may hold the bare JSON literals NaN / Infinity (with logging_nan_inf_filter off), which Python's
json accepts; the final line has no "loss"; older LLaMA-Factory writes "learning_rate", "throughput" and
"total_tokens" where newer writes "lr"; some runs append each line twice (two processes).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

# The seed's rule, as data: compare the mean of the first `head_points` logged losses with the mean of the
# last `tail_points` logged losses up to step `window_step`; warn if it fell by less than `min_drop_ratio`.
LOSS_RULE: dict[str, float] = {
    "window_step": 100,
    "head_points": 5,
    "tail_points": 5,
    "min_drop_ratio": 0.05,
    "min_points": 6,
}
LIKELY_CAUSES: tuple[str, ...] = (
    "learning rate too low (nothing moves) or too high (loss bounces or plateaus)",
    "flash attention / SDPA NaN on ROCm: try flash_attn: disabled (NaN shows as loss 0.0 when filtered)",
    "wrong chat template for the model (template: must match the base model)",
    "data issues: wrong columns/formatting in dataset_info, empty responses, rows dropped or truncated by "
    "cutoff_len",
)
_DURATION = re.compile(r"^(?:(?P<days>\d+) days?, )?(?P<h>\d+):(?P<m>\d{2}):(?P<s>\d{2}(?:\.\d+)?)$")


def parse_duration(text: Any) -> float | None:
    """Seconds from LLaMA-Factory's "H:MM:SS" / "1 day, 0:08:23"; None when absent or unreadable."""
    m = _DURATION.match(str(text).strip()) if text is not None else None
    if m is None:
        return None
    return int(m["days"] or 0) * 86400 + int(m["h"]) * 3600 + int(m["m"]) * 60 + float(m["s"])


def _num(value: Any) -> float | None:
    try:
        return float(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class LogPoint:
    """One line of trainer_log.jsonl."""

    step: int
    total_steps: int | None
    loss: float | None  # None on the final summary line
    lr: float | None
    epoch: float | None
    percentage: float | None
    elapsed_s: float | None
    remaining_s: float | None
    throughput: float | None  # tokens/s as LLaMA-Factory reports it (older versions only)
    total_tokens: float | None


def parse_line(line: str) -> LogPoint | None:
    """A LogPoint from one line, None for a blank or unreadable line (a line cut mid-write is skipped)."""
    try:
        d = json.loads(line)
    except ValueError:
        return None
    if not isinstance(d, dict) or "current_steps" not in d:
        return None
    total = d.get("total_steps")
    return LogPoint(
        step=int(d["current_steps"]),
        total_steps=int(total) if isinstance(total, int | float) else None,
        loss=_num(d.get("loss")),
        lr=_num(d.get("lr", d.get("learning_rate"))),
        epoch=_num(d.get("epoch")),
        percentage=_num(d.get("percentage")),
        elapsed_s=parse_duration(d.get("elapsed_time")),
        remaining_s=parse_duration(d.get("remaining_time")),
        throughput=_num(d.get("throughput")),
        total_tokens=_num(d.get("total_tokens")),
    )


@dataclass
class TrainerLogReader:
    """Incremental reader: feed it the bytes that arrived, get the complete lines' points back."""

    points: list[LogPoint] = field(default_factory=list)
    offset: int = 0  # bytes consumed so far: the next remote read starts here
    _partial: bytes = b""

    def feed(self, data: bytes) -> list[LogPoint]:
        """Parse every complete line in `_partial + data`; keep a trailing partial line for next time."""
        buf = self._partial + data
        *lines, self._partial = buf.split(b"\n")
        self.offset += len(data)
        new = [p for p in (parse_line(ln.decode("utf-8", "replace")) for ln in lines if ln.strip()) if p]
        self.points.extend(new)
        return new


@dataclass
class Progress:
    """Where a training run is, from its trainer log."""

    step: int
    total_steps: int | None
    loss: float | None  # the latest logged loss (may be NaN/Inf)
    lr: float | None
    tokens_per_s: float | None
    eta_s: float | None
    elapsed_s: float | None
    percentage: float | None
    finished: bool  # the summary line (no loss) at the last step was written
    nan_steps: list[int] = field(default_factory=list)
    inf_steps: list[int] = field(default_factory=list)
    zero_loss_steps: list[int] = field(default_factory=list)  # 0.0 is how a filtered NaN looks

    @property
    def non_finite(self) -> bool:
        """True when any step logged a NaN or infinite loss."""
        return bool(self.nan_steps or self.inf_steps)


def _dedupe(points: list[LogPoint]) -> list[LogPoint]:
    """One point per (step, has-loss), the last written: some runs log every line twice."""
    seen: dict[tuple[int, bool], LogPoint] = {}
    for p in points:
        seen[(p.step, p.loss is not None)] = p
    return sorted(seen.values(), key=lambda p: (p.step, p.loss is None))


def tokens_per_second(p: LogPoint) -> float | None:
    """LLaMA-Factory's throughput when it reports one, else total_tokens / elapsed; None when unknown."""
    if p.throughput:
        return p.throughput
    if p.total_tokens and p.elapsed_s:
        return p.total_tokens / p.elapsed_s
    return None


def progress(points: list[LogPoint]) -> Progress | None:
    """Summarize a log's points; None before the first line."""
    if not points:
        return None
    pts = _dedupe(points)
    last = pts[-1]
    logged = [p for p in pts if p.loss is not None]
    latest = logged[-1] if logged else None
    losses = [(p.step, p.loss) for p in logged if p.loss is not None]
    return Progress(
        step=last.step,
        total_steps=last.total_steps,
        loss=latest.loss if latest else None,
        lr=latest.lr if latest else None,
        tokens_per_s=tokens_per_second(last),
        eta_s=last.remaining_s,
        elapsed_s=last.elapsed_s,
        percentage=last.percentage,
        finished=last.loss is None and last.total_steps is not None and last.step >= last.total_steps - 1,
        nan_steps=[step for step, loss in losses if math.isnan(loss)],
        inf_steps=[step for step, loss in losses if math.isinf(loss)],
        zero_loss_steps=[step for step, loss in losses if loss == 0.0],
    )


@dataclass(frozen=True)
class LossWarning:
    """The loss did not fall over the first window of steps."""

    message: str
    first_mean: float
    last_mean: float
    causes: tuple[str, ...] = LIKELY_CAUSES


def loss_not_falling(points: list[LogPoint], rule: dict[str, float] | None = None) -> LossWarning | None:
    """Apply the first-100-steps rule once the run has passed the window (or finished before it)."""
    r = {**LOSS_RULE, **(rule or {})}
    pts = _dedupe(points)
    if not pts:
        return None
    window = int(r["window_step"])
    done = pts[-1].loss is None
    if pts[-1].step < window and not done:
        return None  # too early to judge
    losses = [p.loss for p in pts if p.loss is not None and p.step <= window and math.isfinite(p.loss)]
    if len(losses) < r["min_points"]:
        return None
    first = fmean(losses[: int(r["head_points"])])
    last = fmean(losses[-int(r["tail_points"]) :])
    if last <= first * (1 - r["min_drop_ratio"]):
        return None
    return LossWarning(
        message=(
            f"loss has not fallen over the first {window} steps: mean {first:.4g} at the start, "
            f"{last:.4g} by step {min(window, pts[-1].step)} (needs a {r['min_drop_ratio']:.0%} drop)"
        ),
        first_mean=first,
        last_mean=last,
    )
