"""`radeonlab watch JOB`: follow a job live until it ends (step, loss, lr, tokens/s, ETA, VRAM, temperature).

On a terminal: a rich live view. Otherwise (pipes, CI): one line per logged step. A dropped SSH connection
is re-opened; the job itself never depends on it. Exits with the job's final state: 0 when it succeeded.
"""

from __future__ import annotations

import sys

import click

from radeonlab.cli.options import host_option, inventory_option, job_argument, say


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _gib(n: int | None) -> str:
    return f"{n / 1024**3:.1f}" if n is not None else "?"


def step_line(snap, point) -> str:  # (Snapshot, LogPoint) -> str
    """One logged step as a line: step/total, loss, lr, tokens/s, ETA, VRAM, temperature."""
    from radeonlab.jobs.host.metrics import tokens_per_second

    parts = [f"step {point.step}/{point.total_steps or '?'}"]
    if point.loss is not None:
        parts.append(f"loss {point.loss:.4f}")
    if point.lr is not None:
        parts.append(f"lr {point.lr:.2e}")
    tps = tokens_per_second(point)
    if tps:
        parts.append(f"{tps:.0f} tok/s")
    parts.append(f"ETA {_duration(point.remaining_s)}")
    parts += [gpu_text(g) for g in snap.gpus]
    return "  ".join(parts)


def gpu_text(g) -> str:  # GpuReading -> str
    temp = f" {g.temp_c:.0f}°C" if g.temp_c is not None else ""
    return f"GPU{g.index} VRAM {_gib(g.vram_used)}/{_gib(g.vram_total)} GiB{temp}"


def view(snap):  # Snapshot -> rich renderable
    from rich.table import Table

    table = Table(
        title=f"{snap.job_id} on {snap.host}: {snap.state.state.value}", box=None, show_header=False
    )
    p = snap.progress
    if p:
        table.add_row(
            "step", f"{p.step}/{p.total_steps or '?'}" + (f" ({p.percentage:.0f}%)" if p.percentage else "")
        )
        table.add_row("loss", f"{p.loss:.4f}" if p.loss is not None else "-")
        table.add_row("lr", f"{p.lr:.2e}" if p.lr is not None else "-")
        table.add_row("tokens/s", f"{p.tokens_per_s:.0f}" if p.tokens_per_s else "-")
        table.add_row("ETA", _duration(p.eta_s))
    else:
        table.add_row("step", "waiting for the first logged step")
    from radeonlab.contract.records import attempt_line

    for attempt in snap.attempts[1:] if len(snap.attempts) > 1 else []:
        table.add_row(f"attempt {attempt.n}", attempt_line(attempt).split(": ", 1)[1])
    for g in snap.gpus:
        table.add_row(f"GPU {g.index}", gpu_text(g))
    if snap.warning:
        table.add_row("[yellow]warning", f"[yellow]{snap.warning.message}")
        for cause in snap.warning.causes:
            table.add_row("", f"[yellow]- {cause}")
    return table


def refresh(session, remote):  # (JobSession, Remote) -> HostJobState
    """Re-read the job over `remote` (the connection may have been re-opened since the session began)."""
    session.remote = remote
    return session.refresh()


def watch_job(job_id: str, inventory: str, host: str | None) -> int:
    """Watch until the job ends; returns the exit code (0: succeeded)."""
    from rich.console import Console
    from rich.live import Live

    from radeonlab.jobs.apply.submit import open_job
    from radeonlab.jobs.track.follow import Link
    from radeonlab.jobs.track.watch import watch

    console = Console(stderr=False)
    warned = False
    announced_first = False
    shown: dict[int, str] = {}  # attempt n -> the line last printed for it

    with open_job(job_id, inventory, host) as session:
        link = Link(session.target, session.remote, say)
        host_gpus = list(session.record.get("gpus") or [])
        job = dict(session.job.host_job.job)

        def lines(snap) -> None:
            nonlocal warned, announced_first
            from radeonlab.contract.records import attempt_line

            for attempt in snap.attempts:  # a remedy's new attempt, or how the last one ended
                line = attempt_line(attempt)
                if (attempt.n > 1 or attempt.state not in ("", "running")) and shown.get(attempt.n) != line:
                    shown[attempt.n] = line
                    click.echo(line)
            if snap.first_step_after_submit_s is not None and not announced_first:
                announced_first = True
                click.echo(f"first logged step {snap.first_step_after_submit_s:.0f}s after submit")
            for point in snap.new_points:
                if point.loss is not None:
                    click.echo(step_line(snap, point))
            if snap.warning and not warned:
                warned = True
                click.echo(f"warning: {snap.warning.message}; likely causes:")
                for cause in snap.warning.causes:
                    click.echo(f"  - {cause}")

        try:
            if console.is_terminal:
                with Live(console=console, refresh_per_second=4) as live:
                    state = watch(link, session.paths, job, host_gpus, lambda s: live.update(view(s)))
            else:
                state = watch(link, session.paths, job, host_gpus, lines)
            link.call(lambda r: refresh(session, r))  # caches the final state in the local store
        except KeyboardInterrupt:
            say("stopped watching; the job keeps running on the host")
            return 130
        finally:
            link.close()
    reason = f" ({state.reason})" if state.reason else ""
    click.echo(f"{job_id}: {state.state.value}{reason}")
    return 0 if state.state.value == "succeeded" else 1


@click.command("watch")
@job_argument
@inventory_option
@host_option
def command(job_id: str, inventory: str, host: str | None) -> None:
    """Follow JOB live until it ends; exit 0 if it succeeded."""
    sys.exit(watch_job(job_id, inventory, host))
