"""trainer_log.jsonl parsing and the first-100-steps loss rule, on a recorded LLaMA-Factory log."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from radeonlab.jobs.host.metrics import (
    LIKELY_CAUSES,
    TrainerLogReader,
    loss_not_falling,
    parse_duration,
    parse_line,
    progress,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "llamafactory"
# older schema: learning_rate, throughput (a string), total_tokens; 867 lines, a final line without loss
SYGOAT = FIXTURES / "trainer_log_syGOAT-Mistral-v0.2-Translator_learning_rate-throughput-schema.jsonl"
# newer schema, as recorded on this machine (docs/notes/llamafactory-cpu-recipe.md sections 3 and 6)
RECIPE_LINES = [
    b'{"current_steps": 1, "total_steps": 40, "loss": 8.3822, "lr": 0.005, "epoch": 0.02, "percentage": 2.5, '
    b'"elapsed_time": "0:00:00", "remaining_time": "0:00:02"}',
    b'{"current_steps": 2, "total_steps": 4, "loss": NaN, "lr": 0.005, "epoch": 0.04, "percentage": 50.0, '
    b'"elapsed_time": "0:00:01", "remaining_time": "0:00:01"}',
]


def read(path: Path) -> TrainerLogReader:
    reader = TrainerLogReader()
    reader.feed(path.read_bytes())
    return reader


def test_recorded_log_progress() -> None:
    reader = read(SYGOAT)
    assert len(reader.points) == 867 and reader.offset == SYGOAT.stat().st_size
    p = progress(reader.points)
    assert p is not None
    assert (p.step, p.total_steps, p.loss, p.lr) == (8660, 8660, 0.1333, 0.0)  # latest loss, not the summary
    assert p.finished and p.eta_s == 0.0 and p.elapsed_s == 5 * 3600 + 39 * 60 + 46
    assert p.tokens_per_s is None  # this run logged throughput "0.00" and total_tokens 0: unknown, not 0
    assert not p.non_finite and p.zero_loss_steps == []
    first = reader.points[0]
    assert first.lr == pytest.approx(5.773672055427253e-07) and first.remaining_s == 5 * 3600 + 58 * 60 + 33


def test_incremental_feed_matches_whole_file() -> None:
    data = SYGOAT.read_bytes()
    reader = TrainerLogReader()
    got = []
    for start in range(0, len(data), 777):  # cuts lines in the middle
        got += reader.feed(data[start : start + 777])
    assert got == read(SYGOAT).points and reader.offset == len(data)
    partial = TrainerLogReader()
    assert partial.feed(data[:100]) == [] and partial.offset == 100


def test_nan_and_inf_literals_are_flagged() -> None:
    reader = TrainerLogReader()
    inf_line = (
        RECIPE_LINES[1].replace(b"NaN", b"Infinity").replace(b'"current_steps": 2', b'"current_steps": 3')
    )
    zero = RECIPE_LINES[1].replace(b"NaN", b"0.0").replace(b'"current_steps": 2', b'"current_steps": 4')
    reader.feed(b"\n".join([RECIPE_LINES[0], RECIPE_LINES[1], inf_line, zero]) + b"\n")
    p = progress(reader.points)
    assert p is not None and p.nan_steps == [2] and p.inf_steps == [3] and p.non_finite
    assert p.zero_loss_steps == [4]  # the filtered-NaN shape
    assert math.isnan(reader.points[1].loss)


def test_throughput_and_computed_tokens_per_second() -> None:
    line = (
        '{"current_steps": 5, "total_steps": 10, "loss": 1.0, "elapsed_time": "0:00:10", '
        '"remaining_time": "0:00:10", "throughput": "%s", "total_tokens": %d}'
    )
    assert progress([parse_line(line % ("123.45", 0))]).tokens_per_s == pytest.approx(123.45)
    assert progress([parse_line(line % ("0.00", 5000))]).tokens_per_s == pytest.approx(500.0)


def test_duplicated_lines_counted_once() -> None:
    """Some runs write every line twice: the reader keeps what was written (2 points per step), progress
    counts each step once, the last copy of a step winning."""
    ok, nan = RECIPE_LINES
    rewritten = ok.replace(b'"loss": 8.3822', b'"loss": 7.5')  # step 1 again, a later value
    reader = TrainerLogReader()
    reader.feed(b"\n".join([ok, ok, rewritten, nan, nan]) + b"\n")
    assert len(reader.points) == 5  # the reader drops nothing
    p = progress(reader.points)
    assert p is not None and p.nan_steps == [2] and p.step == 2  # the NaN step once, not twice
    only_first = progress(reader.points[:3])
    assert only_first is not None and only_first.loss == 7.5 and only_first.nan_steps == []


@pytest.mark.parametrize(
    "text,seconds",
    [("0:02:12", 132), ("1 day, 0:08:23", 86903), ("2 days, 1:00:00", 176400), ("soon", None), (None, None)],
)
def test_parse_duration(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


def test_falling_loss_passes_the_rule() -> None:
    # 2.50, 2.77, 2.72, 2.84, 2.12 ... 0.82 by step 100
    assert loss_not_falling(read(SYGOAT).points) is None


def test_rule_thresholds_are_data_and_flag_a_flat_start() -> None:
    # the same recorded run judged at step 40: 2.50, 2.77 -> 2.72, 2.84 has not fallen yet
    rule = {"window_step": 40, "head_points": 2, "tail_points": 2, "min_points": 4}
    warning = loss_not_falling(read(SYGOAT).points, rule)
    assert warning is not None and warning.causes == LIKELY_CAUSES
    assert warning.first_mean == pytest.approx((2.4977 + 2.7655) / 2)
    assert warning.last_mean == pytest.approx((2.7241 + 2.8357) / 2)
    assert "first 40 steps" in warning.message
    assert any("flash attention" in c for c in warning.causes) and any(
        "template" in c for c in warning.causes
    )


def test_rule_waits_for_the_window() -> None:
    early = [p for p in read(SYGOAT).points if p.step <= 30]
    assert (
        loss_not_falling(early, {"window_step": 40, "head_points": 2, "tail_points": 2, "min_points": 2})
        is None
    )
