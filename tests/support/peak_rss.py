"""Run a command and write its peak resident memory (MB) to a file: `python tests/support/peak_rss.py OUT
CMD...`.

The peak a process's own rusage reports includes the time between fork and exec, when the child is still a
copy of its parent: measured straight from a long pytest session (~1 GB resident after 35 minutes on CI),
every command "peaked" at the session's size. Started from this small program instead, the command's peak
is its own (RUSAGE_CHILDREN here holds only the command).
"""

from __future__ import annotations

import resource
import subprocess
import sys


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    code = subprocess.call(argv)
    with open(out, "w") as f:
        f.write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}\n")  # KiB -> MB
    return code


if __name__ == "__main__":
    sys.exit(main())
