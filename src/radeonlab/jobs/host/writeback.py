"""Flush a file being received to disk while the rest is still arriving, so the fsync that makes it durable
at the end waits only for the last few megabytes, not for the whole file.

    with open(part, "ab") as f, Writeback(f.fileno()) as flushing:
        for block in stream:
            f.write(block)
            flushing.wrote(len(block))
        f.flush()
        flushing.finish()  # fsync: durable, or the first write error of the whole file raised here

A 1 GB transfer that fsyncs only at the end waits, after the network is done, for the disk to take 1 GB
(seconds). Here every `every_bytes` written, a background thread asks the kernel to write what is there
(fdatasync, which releases the GIL); a new one starts only after the last has returned. An error from a
background flush is raised by finish(): Linux reports a writeback error to one fsync per open file, so the
last one alone could miss it. Leaving the `with` (an error, say) waits for a running flush, so the file is
never closed under it. Stdlib only: receive.py (host) and jobs/ssh/transfer.py (laptop) use it.
"""

from __future__ import annotations

import os
import threading

EVERY_BYTES = 64 << 20  # small enough to overlap most of a large file, large enough to cost few syscalls


class Writeback:
    """Background fdatasync of one open file descriptor, every `every_bytes` written; finish() fsyncs."""

    def __init__(self, fd: int, every_bytes: int = EVERY_BYTES) -> None:
        self.fd, self.every = fd, every_bytes
        self.flushes = 0  # background flushes started (tests, and a reader who wonders)
        self._since = 0
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def _flush(self) -> None:
        try:
            os.fdatasync(self.fd)
        except OSError as exc:
            self._error = self._error or exc

    @property
    def running(self) -> bool:
        """A background flush is under way."""
        return self._thread is not None and self._thread.is_alive()

    def wrote(self, n: int) -> None:
        """Count `n` more bytes written; start a background flush when enough are waiting and none runs."""
        self._since += n
        if self._since < self.every or self.running:
            return
        self._since = 0
        self.flushes += 1
        self._thread = threading.Thread(target=self._flush, name="writeback", daemon=True)
        self._thread.start()

    def __enter__(self) -> Writeback:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._thread.join()

    def finish(self) -> None:
        """Wait for a running flush, raise the error a flush met, else fsync (durable when this returns)."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        os.fsync(self.fd)
