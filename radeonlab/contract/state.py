"""The life of a job as states, and which moves between them are allowed.

The host's state.json is the truth; these are the values it may hold. The launcher on the host is a
stdlib-only script and writes the same strings (it cannot import this module).
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):  # noqa: UP042 - CONTRACTS.md names this form; values compare equal to str
    """Where a job is in its life."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_finished(self) -> bool:
        """True for the end states: nothing more will happen to the job."""
        return self in _FINISHED


_FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

# A finished job never moves again: a new attempt is a new run recorded in job.json, not a state change.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class InvalidTransition(ValueError):
    """A state change the job's life does not allow."""


def can_move(old: JobState, new: JobState) -> bool:
    """True when a job in `old` may move to `new`."""
    return new in TRANSITIONS[old]


def check_move(old: JobState, new: JobState) -> JobState:
    """Return `new` if the move is allowed; raise InvalidTransition naming both states otherwise."""
    if not can_move(old, new):
        raise InvalidTransition(f"a {old.value} job cannot become {new.value}")
    return new
