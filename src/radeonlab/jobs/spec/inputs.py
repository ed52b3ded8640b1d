"""Reading the files a spec brings (the spec, dataset_info.json, datasets) so that none can hang the checker.

A FIFO blocks `open()` until someone writes to it, `/dev/zero` never ends, a socket cannot be read at all:
each is refused by its type (os.stat, symlinks followed) before anything opens it. A regular file is then
opened with O_NONBLOCK (a FIFO swapped in between stat and open cannot block) and checked again on the open
file. Reads stop at a size limit. Names shown to the user go through `shown()` (radeonlab/errors.py):
control characters and the Unicode bidi controls escaped, so a file name cannot break a message's one line
or reorder it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from radeonlab.errors import shown

__all__ = ["Refused", "read_limited", "refuse_special", "shown", "special_kind"]

# st_mode type -> the words a message uses for it (regular files and folders are not listed: they are read)
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class Refused(Exception):
    """A path that is not read: what it is and why, as one line without the path (the caller names it)."""


def special_kind(mode: int) -> str | None:
    """'a FIFO (named pipe)', 'a character device', ... for a file type that is not read; None otherwise."""
    return next((words for test, words in _KINDS if test(mode)), None)


def refuse_special(path: Path) -> None:
    """Raise Refused when `path` (symlinks followed) is a FIFO, device or socket; OSError when stat fails."""
    kind = special_kind(os.stat(path).st_mode)
    if kind:
        raise Refused(f"is {kind}, not a regular file: not read")


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Raises Refused (not regular, too large) or
    OSError (cannot be opened or read)."""
    refuse_special(path)
    if os.path.isdir(path):
        raise Refused("is a folder, not a file")
    if os.stat(path).st_size > limit:
        raise Refused(f"is larger than {limit // 1024} KiB: not read")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat above and the open
            raise Refused("is not a regular file: not read")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:  # grew after the stat
        raise Refused(f"is larger than {limit // 1024} KiB: not read")
    return b"".join(chunks)
