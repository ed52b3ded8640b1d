"""How the CLI shows things: tables, panels, lines and sparklines. No SSH, no decisions: data in, text out."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from rich import box
from rich.progress_bar import ProgressBar
from rich.table import Table

from radeonlab.contract.state import JobState
from radeonlab.jobs.host.metrics import LogPoint, tokens_per_second
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.units import celsius_text, percent_text, vram_text, watts_text

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """Values as one line of block characters (high = tall), resampled to `width`; NaN/Inf skipped."""
    clean = [v for v in values if v == v and abs(v) != float("inf")]
    if not clean:
        return ""
    step = max(1.0, len(clean) / width)
    picked = [clean[min(int(i * step), len(clean) - 1)] for i in range(min(width, len(clean)))]
    lo, hi = min(picked), max(picked)
    span = (hi - lo) or 1.0
    return "".join(SPARKS[int((v - lo) / span * (len(SPARKS) - 1))] for v in picked)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def gpu_text(g: GpuReading) -> str:
    temp = f" {g.temp_c:.0f}°C" if g.temp_c is not None else ""
    busy = f" busy {g.busy_percent:.0f}%" if g.busy_percent is not None else ""
    return f"GPU{g.index} VRAM {vram_text(g.vram_used, g.vram_total)}{temp}{busy}"


def step_line(point: LogPoint, gpus: Iterable[GpuReading]) -> str:
    """One logged step: step/total, loss, lr, tokens/s, ETA, GPU readings."""
    parts = [f"step {point.step}/{point.total_steps or '?'}"]
    if point.loss is not None:
        parts.append(f"loss {point.loss:.4f}")
    if point.lr is not None:
        parts.append(f"lr {point.lr:.2e}")
    tps = tokens_per_second(point)
    if tps:
        parts.append(f"{tps:.0f} tok/s")
    parts.append(f"ETA {duration(point.remaining_s)}")
    parts += [gpu_text(g) for g in gpus]
    return "  ".join(parts)


def watch_panel(snap: Any) -> Any:  # (Snapshot) -> rich renderable
    """The live panel of `radeonlab watch` on a terminal: one view updated in place."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    p = snap.progress
    state = snap.state
    table.add_row("job", f"{snap.job_id} on {snap.host}: {state.state.value}")
    if state.state is JobState.QUEUED and state.reason:
        table.add_row("queue", state.reason)
    if p:
        total = p.total_steps or max(p.step, 1)
        # the count and ETA on their own row: beside the bar, in one cell, rich cut them to the bar's width
        table.add_row("step", f"{p.step}/{p.total_steps or '?'}  ETA {duration(p.eta_s)}")
        table.add_row("", ProgressBar(total=total, completed=p.step, width=40))
        table.add_row("loss", f"{p.loss:.4f}" if p.loss is not None else "-")
        losses = [pt.loss for pt in snap.points if pt.loss is not None]
        table.add_row("curve", sparkline(losses, 50) or "-")
        table.add_row("lr", f"{p.lr:.2e}" if p.lr is not None else "-")
        table.add_row("tokens/s", f"{p.tokens_per_s:.0f}" if p.tokens_per_s else "-")
    else:
        table.add_row("step", "waiting for the first logged step")
    for attempt in snap.attempts[1:]:
        table.add_row(f"attempt {attempt.n}", attempt.line().split(": ", 1)[1])
    for g in snap.gpus:
        table.add_row(f"GPU {g.index}", gpu_text(g))
    if snap.warning:
        table.add_row("[yellow]warning", f"[yellow]{snap.warning.message}")
    return table


def fleet_table(views: Sequence[Any]) -> Table:
    """`radeonlab fleet`: one row per host."""
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    # what the lab's scheduler says of each host (jobs/scheduler describe_hosts), when one said anything
    named = sorted({v.scheduler_name or "scheduler" for v in views if v.scheduler})
    for column in (
        "host",
        "reachable",
        "GPU(s)",
        "VRAM used/total",
        "temp",
        "busy",
        "power",
        "ROCm",
        "torch",
        "provisioned",
        "running job",
        "queued",
        *([" / ".join(named)] if named else []),
    ):
        table.add_column(column, overflow="fold")
    said = [lambda v: v.scheduler or "-"] if named else []
    for v in views:
        if not v.reachable:
            table.add_row(v.name, f"[red]no: {v.error}[/red]", *["-"] * 10, *(c(v) for c in said))
            continue
        record = v.raw_record or {}
        names = {int(g["index"]): g for g in record.get("gpus") or [] if "index" in g}
        gpus = v.gpus or []
        table.add_row(
            v.name,
            "yes" if not v.error else f"yes ({v.error})",
            "\n".join(
                f"{names.get(g.index, {}).get('name') or '?'} ({names.get(g.index, {}).get('gfx') or '?'})"
                for g in gpus
            )
            or "-",
            # a reading the host's tools did not report is "unknown" (sysfs/amd-smi said nothing), never "?"
            "\n".join(vram_text(g.vram_used, g.vram_total) for g in gpus) or "-",
            "\n".join(celsius_text(g.temp_c) for g in gpus) or "-",
            "\n".join(percent_text(g.busy_percent) for g in gpus) or "-",
            "\n".join(watts_text(g.power_w) for g in gpus) or "-",
            str((record.get("rocm") or {}).get("installed") or "-"),
            str((record.get("torch") or {}).get("version") or "-"),
            "yes" if v.provisioned else v.no_stack_because or f"[yellow]no: {v.note}[/yellow]",
            "\n".join(
                [j.id for j in v.live_jobs(JobState.RUNNING)]
                + [f"{j} (stale: process gone)" for j in v.stale]
            )
            or "-",
            str(len(v.queued)),
            *(c(v) for c in said),
        )
    return table


def jobs_table(rows: Sequence[dict[str, Any]]) -> Table:
    """`radeonlab list`: one row per job (rows as list --json prints them)."""
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    columns = ("job", "host", "state", "step", "loss", "duration", "overrides", "created", "attempts")
    for column in (*columns, "reason", "source"):
        table.add_column(column, overflow="fold")
    for r in rows:
        step = r.get("step")
        table.add_row(
            r["id"],
            r["host"],
            r["state"],
            "-" if step is None else f"{step}/{r.get('total_steps') or '?'}",
            "-" if r.get("loss") is None else f"{r['loss']:.4f}",
            "-" if r.get("duration_s") is None else duration(r["duration_s"]),
            " ".join(f"{k}={v}" for k, v in (r.get("overrides") or {}).items()) or "-",
            r["created_at"],
            str(r["attempts"]),
            r.get("reason") or "",
            r["source"],
        )
    return table


@contextlib.contextmanager
def rich_progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback that draws a bar with bytes done, total, speed and time left (on stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    from rich.progress import Progress as RichProgress

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with RichProgress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
