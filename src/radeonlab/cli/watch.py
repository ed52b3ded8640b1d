"""`radeonlab watch JOB`: follow a job live until it ends.

On a terminal: one panel updated in place (progress bar with ETA, last loss, a loss sparkline, lr, tokens/s,
GPU readings, remedy attempts, queue position while queued). Otherwise one line per logged step (or, with
--every PCT, one per PCT % of the steps, and the last step), a marker line where a remedy's or a resume's
attempt starts, or JSON lines with --json. A dropped SSH connection is
re-opened; the job itself never depends on it. The host side is one long-lived stream (jobs/host/stream.py).
Exit status: 0 when the job succeeded, 1 otherwise.
"""

from __future__ import annotations

import dataclasses
import json

import click

from radeonlab.cli.options import JOB_HELP, inventory_path, job_options, json_option, say
from radeonlab.contract.state import JobState


def snapshot_json(snap, point=None) -> str:  # (Snapshot, LogPoint | None) -> str
    from radeonlab.jobs.host.metrics import tokens_per_second

    out = {
        "id": snap.job_id,
        "host": snap.host,
        "state": snap.state.state.value,
        "reason": snap.state.reason,
        "gpus": [dataclasses.asdict(g) for g in snap.gpus],
    }
    if point is not None:
        out.update(
            step=point.step,
            total_steps=point.total_steps,
            loss=point.loss,
            lr=point.lr,
            tokens_per_s=tokens_per_second(point),
            eta_s=point.remaining_s,
        )
    return json.dumps(out)


class StepLines:
    """Line mode (stdout not a terminal): each snapshot's news as plain lines, each said once. A later
    attempt (a remedy's, a resume's) starts with its own marker line, so a log reader sees where the steps
    start over: "attempt 2 (remedy: oom -> halve_batch) starting"."""

    def __init__(self, every_percent: int = 0) -> None:
        self.every_percent = every_percent  # 0: every logged step
        self.next_step = 0  # with every_percent: the next step worth a line
        self.shown: dict[int, str] = {}
        self.started: set[int] = set()
        self.said_first = self.warned = False

    def worth_a_line(self, point) -> bool:  # (LogPoint) -> bool
        if point.loss is None:
            return False
        total = point.total_steps
        if not self.every_percent or not total:
            return True
        if point.step < self.next_step and point.step != total:
            return False
        stride = max(1, total * self.every_percent // 100)
        self.next_step = (point.step // stride + 1) * stride
        return True

    def lines(self, snap) -> list[str]:  # (Snapshot) -> lines
        from radeonlab.cli.views import step_line

        out = []
        for attempt in snap.attempts:  # a remedy's new attempt, or how the last one ended
            if attempt.n > 1 and attempt.n not in self.started:
                self.started.add(attempt.n)
                self.next_step = 0  # its steps start over
                out.append(attempt.start_line())
            line = attempt.line()
            if (attempt.n > 1 or not attempt.state.is_live()) and self.shown.get(attempt.n) != line:
                self.shown[attempt.n] = line
                out.append(line)
        if snap.first_step_after_submit_s is not None and not self.said_first:
            self.said_first = True
            out.append(f"first logged step {snap.first_step_after_submit_s:.0f}s after submit")
        out += [step_line(point, snap.gpus) for point in snap.new_points if self.worth_a_line(point)]
        if snap.warning and not self.warned:
            self.warned = True
            out.append(f"warning: {snap.warning.message}; likely causes:")
            out += [f"  - {cause}" for cause in snap.warning.causes]
        return out


def watch_job(
    job_ref: str, inventory: str, host: str | None, as_json: bool = False, every_percent: int = 0
) -> int:
    """Watch until the job ends; returns the exit code (0: succeeded)."""
    from rich.console import Console
    from rich.live import Live

    from radeonlab.cli.views import watch_panel
    from radeonlab.jobs.track.handle import JobHandle
    from radeonlab.jobs.track.watch import watch

    console = Console()
    said = {"state": ""}
    printer = StepLines(every_percent)
    last = None

    def lines(snap) -> None:
        nonlocal last
        last = snap
        if as_json:
            for point in snap.new_points:
                click.echo(snapshot_json(snap, point))
            if snap.state.summary() != said["state"]:
                said["state"] = snap.state.summary()
                click.echo(snapshot_json(snap))
            return
        for line in printer.lines(snap):
            click.echo(line)

    with JobHandle.open(job_ref, inventory, host) as handle:
        try:
            if console.is_terminal and not as_json:
                with Live(console=console, refresh_per_second=4) as live:

                    def draw(snap) -> None:
                        nonlocal last
                        last = snap
                        live.update(watch_panel(snap))

                    state = watch(handle, draw, say)
            else:
                state = watch(handle, lines, say)
        except KeyboardInterrupt:
            say("stopped watching; the job keeps running on the host")
            return 130
    prog = last.progress if last else None
    eff = last.effective_tokens_per_s if last else None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "id": handle.id,
                    "final": True,  # the last line; "end" is the state's end reason
                    **state.to_dict(),
                    "effective_tokens_per_s": eff,
                    "tokens_per_s": prog.tokens_per_s if prog else None,
                }
            )
        )
    else:
        summary = [state.summary()]
        if prog and prog.loss is not None:
            summary.append(f"last loss {prog.loss:.4f}")
        if eff:
            summary.append(f"effective {eff:.0f} tokens/s")
        click.echo(f"{handle.id}: {', '.join(summary)}")
    return 0 if state.state is JobState.SUCCEEDED else 1


@click.command("watch", epilog=JOB_HELP)
@job_options
@json_option
@click.option(
    "--every",
    "every_percent",
    type=click.IntRange(0, 100),
    default=0,
    metavar="PCT",
    help="line mode (not a terminal): one step line per PCT % of the steps (and the last), not every step",
)
def command(job_ref: str, inventory: str | None, host: str | None, as_json: bool, every_percent: int) -> None:
    """Follow JOB live until it ends (a panel on a terminal, lines or --json lines otherwise); exit 0 if it
    succeeded."""
    raise SystemExit(watch_job(job_ref, inventory_path(inventory), host, as_json, every_percent))
