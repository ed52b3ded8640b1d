"""The laptop's side of the job stream (jobs/track/follow.py) against a stand-in channel: a stream that ends
without an exit status is a dropped connection, so the follower reconnects and resumes from the offsets it
already has, instead of reporting a failed command (what the dropped-SSH end-to-end test caught)."""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import Any

import pytest

from radeonlab.jobs.track import follow


class Chan:
    def __init__(self, lines: list[dict[str, Any]], code: int) -> None:
        self.lines, self.code = list(lines), code

    def read_json(self) -> dict[str, Any] | None:
        return self.lines.pop(0) if self.lines else None

    def finish(self) -> tuple[int, str]:
        return self.code, ""

    def __enter__(self) -> Chan:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class Remote:
    def __init__(self, chans: list[Chan]) -> None:
        self.chans, self.calls = chans, []

    def open_tool(self, name: str, args: list[str]) -> Chan:
        self.calls.append(args)
        return self.chans.pop(0)

    def close(self) -> None:
        pass


def data(offset: int, text: str) -> dict[str, Any]:
    return {
        "t": "data",
        "file": follow.TRAIN_LOG,
        "offset": offset,
        "data": base64.b64encode(text.encode()).decode(),
    }


def test_a_stream_cut_without_exit_status_reconnects_and_resumes_from_the_offset(monkeypatch) -> None:
    remote = Remote([Chan([data(0, "a\n")], code=-1), Chan([data(2, "b\n"), {"t": "end"}], code=0)])
    said: list[str] = []
    monkeypatch.setattr(follow, "connect", lambda target: remote)
    link = follow.Link(type("T", (), {"name": "ws1"})(), remote, said.append)
    files = {follow.TRAIN_LOG: 0}
    got = [e for e in follow.events(link, "/jobs/x", files, follow=True) if e.kind == "data"]
    assert [e.data for e in got] == [b"a\n", b"b\n"] and not got[1].restarted
    assert link.reconnects == 1 and any("lost" in s for s in said)
    assert f"{follow.TRAIN_LOG}=2" in remote.calls[1]  # asked again from where the first stream stopped


def test_logs_tail_counts_a_progress_bar_as_one_line() -> None:
    """`logs --tail 3` of a log whose last line is tqdm's `\\r` frames: three lines, the bar at its last frame
    (it was one line of 20 frames: the terminal showed only the last)."""
    from radeonlab.jobs.track.follow import last_lines

    bar = b"".join(b"\r%3d%%|###| %d/20" % (i * 5, i) for i in range(1, 21))
    log = b"loading\nstep 1 loss 8.3\nstep 2 loss 7.1\n" + bar + b"\n"
    assert last_lines(log, 3) == b"step 1 loss 8.3\nstep 2 loss 7.1\n100%|###| 20/20\n"
    assert last_lines(b"a\nb\npartial", 2) == b"b\npartial"


def test_logs_tail_through_the_cli_shows_tqdms_bar_at_its_last_frame(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`radeonlab logs JOB --tail 3` of a train.log where tqdm itself drew two bars (its `\\r` frames, as
    LLaMA-Factory's loading and training bars write them): three lines as a terminal shows them, each bar
    once at its last frame. The host's stream is stubbed with that log; the CLI does the rest."""
    import io

    from click.testing import CliRunner

    from radeonlab.cli import main
    from radeonlab.jobs.track import handle as handle_module

    tqdm = pytest.importorskip("tqdm")

    def bar(desc: str, total: int) -> str:
        out = io.StringIO()
        for _ in tqdm.tqdm(range(total), desc=desc, file=out, mininterval=0, ascii=True, ncols=60):
            pass
        return out.getvalue()

    log = f"loading model\n{bar('shards', 3)}step 1 loss 8.3\n{bar('train', 20)}".encode()
    assert log.count(b"\r") > 20  # many frames, few lines

    class Handle(contextlib.nullcontext):
        id, state = "demo-20260101-000000-aaaa", None

        def __enter__(self) -> Handle:
            return self

        def events(self, say, files: dict[str, int], keep_going: bool):  # the host's stream: the log at once
            yield follow.Event("data", file=follow.TRAIN_LOG, data=log)
            yield follow.Event("end")

    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(handle_module.JobHandle, "open", lambda ref, inventory, host: Handle())
    result = CliRunner().invoke(main, ["logs", Handle.id, "--tail", "3", "-i", "inv.py"])
    assert result.exit_code == 0, result.output
    shown = result.output.splitlines()
    assert len(shown) == 3 and "\r" not in result.output, shown
    assert shown[0].startswith("shards: 100%|") and "3/3" in shown[0], shown
    assert shown[1] == "step 1 loss 8.3"
    assert shown[2].startswith("train: 100%|") and "20/20" in shown[2], shown
