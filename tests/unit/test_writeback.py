"""jobs/host/writeback.py: a received file is flushed in the background while it arrives; one flush at a
time; an error met by a background flush is not lost; leaving the `with` waits for a running flush."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from radeonlab.jobs.host import writeback
from radeonlab.jobs.host.writeback import Writeback


def test_a_flush_starts_every_so_many_bytes_and_finish_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(writeback.os, "fdatasync", lambda fd: calls.append("fdatasync"))
    monkeypatch.setattr(writeback.os, "fsync", lambda fd: calls.append("fsync"))
    with open(tmp_path / "f", "wb") as f, Writeback(f.fileno(), every_bytes=10) as flushing:
        for _ in range(25):
            f.write(b"x")
            flushing.wrote(1)
            while flushing.running:  # let each flush end, so the next may start
                time.sleep(0.001)
        flushing.finish()
    assert flushing.flushes == 2 and calls == ["fdatasync", "fdatasync", "fsync"]


def test_one_flush_at_a_time_and_leaving_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release, ended = threading.Event(), threading.Event()

    def slow(fd: int) -> None:
        release.wait(5)
        ended.set()

    monkeypatch.setattr(writeback.os, "fdatasync", slow)
    with open(tmp_path / "f", "wb") as f:
        with Writeback(f.fileno(), every_bytes=1) as flushing:
            flushing.wrote(1)
            flushing.wrote(5)  # the first still runs: no second one
            assert flushing.flushes == 1 and not ended.is_set()
            threading.Timer(0.2, release.set).start()
        assert ended.is_set()  # the `with` waited: the file was not closed under the flush


def test_an_error_in_a_background_flush_is_raised_by_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    fsyncs: list[int] = []
    monkeypatch.setattr(writeback.os, "fsync", fsyncs.append)
    read, write = os.pipe()  # fdatasync on a pipe fails (EINVAL), as a disk's write error would
    try:
        with Writeback(write, every_bytes=1) as flushing:
            flushing.wrote(1)
            with pytest.raises(OSError) as raised:
                flushing.finish()
    finally:
        os.close(read)
        os.close(write)
    # Linux reports a writeback error to one fsync per open file: the background flush's must surface
    assert raised.value.errno == errno.EINVAL and fsyncs == []
