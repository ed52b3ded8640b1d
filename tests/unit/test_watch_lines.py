"""`radeonlab watch` in line mode (stdout not a terminal, e.g. a CI log): what it prints from the snapshots
the job's stream gives, with no host. A remedy's new attempt starts with a marker line, before its steps."""

from __future__ import annotations

from radeonlab.cli.watch import StepLines
from radeonlab.contract.records import Attempt, StateRecord
from radeonlab.contract.state import AttemptState, JobState
from radeonlab.jobs.host import metrics
from radeonlab.jobs.host.remedies import STEPS, _plan
from radeonlab.jobs.track.watch import Snapshot


def point(step: int, loss: float) -> metrics.LogPoint:
    line = f'{{"current_steps": {step}, "total_steps": 10, "loss": {loss}}}'
    parsed = metrics.parse_line(line)
    assert parsed is not None
    return parsed


def snap(attempts: list[Attempt], points: list[metrics.LogPoint]) -> Snapshot:
    return Snapshot("demo-1", "ws1", StateRecord(JobState.RUNNING), None, points, None, new_points=points,
                    attempts=attempts)  # fmt: skip


def oom_attempt() -> Attempt:
    """Attempt 2 as the supervisor records the oom ladder's halve_batch (the note remedies._plan writes)."""
    from radeonlab.jobs.host.health import Diagnosis, Kind

    planned = _plan("oom", STEPS["halve_batch"], {"per_device_train_batch_size": (4, 2)},
                    Diagnosis(Kind.OOM, "HIP out of memory", "halve the batch"), [])  # fmt: skip
    return Attempt(n=2, created_at="t", note=planned.note, cause="OOM at step 3",
                   changes={"per_device_train_batch_size": [4, 2]})  # fmt: skip


def test_a_remedys_attempt_starts_with_a_marker_line_before_its_steps() -> None:
    printer = StepLines()
    first = Attempt(n=1, created_at="t")
    assert printer.lines(snap([first], [point(1, 2.0)]))[0].startswith("step 1/10  loss 2.0000")
    first.state, first.reason = AttemptState.FAILED, "HIP out of memory"
    lines = printer.lines(snap([first, oom_attempt()], [point(1, 1.9)]))
    assert lines[0] == "attempt 1: first run: failed - HIP out of memory"
    assert lines[1] == "attempt 2 (remedy: oom -> halve_batch) starting"
    assert lines[2].startswith("attempt 2: per_device_train_batch_size 4 -> 2 (OOM at step 3)")
    assert lines[3].startswith("step 1/10  loss 1.9000")
    assert "attempt 2 (remedy" not in " ".join(printer.lines(snap([first, oom_attempt()], [point(2, 1.8)])))


def test_a_resume_says_from_which_checkpoint_it_starts() -> None:
    resumed = Attempt(n=2, created_at="t", resume_from_checkpoint="/j/output/checkpoint-40", note="resume: x")
    assert StepLines().lines(snap([Attempt(n=1, created_at="t"), resumed], []))[0] == (
        "attempt 2 (resume from checkpoint-40) starting"
    )


def test_every_percent_prints_one_step_line_per_tenth_of_the_steps_and_the_last() -> None:
    def steps(n: int) -> list[metrics.LogPoint]:
        return [metrics.parse_line(f'{{"current_steps": {s}, "total_steps": {n}, "loss": 1.0}}') for s in
                range(1, n + 1)]  # fmt: skip

    printer = StepLines(every_percent=10)
    lines = printer.lines(snap([Attempt(n=1, created_at="t")], steps(300)[:150]))
    lines += printer.lines(snap([Attempt(n=1, created_at="t")], steps(300)[150:]))
    assert [line.split()[1] for line in lines] == ["1/300", *[f"{s}/300" for s in range(30, 301, 30)]]
    assert len(StepLines().lines(snap([Attempt(n=1, created_at="t")], steps(300)))) == 300
