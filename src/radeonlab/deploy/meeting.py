"""One operation every host of a run reaches at the same line: a point the run's hosts pass together.

pyinfra orders a run's operations as one graph: each host's operations in its own sequence, and an
operation called at the same line (the same call stack) by several hosts is ONE node of that graph. So an
operation after the meeting runs on no host before every host has run what it does before the meeting.
deploy/setup.py meets there after the Python stack: a venv host writes the lab's hash lock before the
meeting, and a container host builds its training image from that lock after it, in the same run.
It holds in pyinfra's default mode (each operation on every host before the next). It does not with
`--serial` or `--no-wait`, nor for a host whose second pass (after the kernel driver's reboot) runs inside
one `python.call`: there a container host may reach its build first and fails in one line (no hash lock);
the next run finds the lock.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation


@operation()
def meet(why: str):
    """Change nothing; every host that calls it at this line passes it together (see the module).

    meet(name="Every host's hash lock is written", why="a container host builds from it next")
    """
    host.noop(why)
    yield from ()
