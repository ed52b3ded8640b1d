"""The life of a job as states, and why a job ended as reasons that map to a state and a message.

The host's state.json is the truth; these are the values it may hold. Both sides import this module: the
launcher and supervisor write these values on the host, the laptop reads them (dstack's
JobTerminationReason is the model for EndReason: one enum, each member knows its state and its words).
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):  # noqa: UP042 - the value compares equal to the string state.json holds
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


class AttemptState(str, Enum):  # noqa: UP042 - written into job.json's attempts as its value
    """Where one attempt of a job is (job.json `attempts[].state`). PENDING is the empty string job.json has
    always held for an attempt recorded but not yet started; STOPPED: the supervisor stopped it (a NaN)."""

    PENDING = ""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    CANCELLED = "cancelled"

    def is_live(self) -> bool:
        """Not yet ended: recorded but not started, or running."""
        return self in (AttemptState.PENDING, AttemptState.RUNNING)


class EndReason(str, Enum):  # noqa: UP042 - written into state.json as its value
    """Why a job ended. `state` is the end state it means; `message` the words for it (state.json's
    `reason` adds the detail: the error line, the signal, the file)."""

    SUCCEEDED = "succeeded"
    NO_ADAPTER = "no_adapter"
    TRAINING_FAILED = "training_failed"
    GAVE_UP = "gave_up"
    NEEDS_A_PERSON = "needs_a_person"
    CANNOT_START = "cannot_start"
    MODEL_DOWNLOAD = "model_download"
    GPU_BUSY = "gpu_busy"
    SECRETS_REFUSED = "secrets_refused"
    CODE_CHANGED = "code_changed"
    LAUNCHER_STOPPED = "launcher_stopped"
    LAUNCHER_ERROR = "launcher_error"
    PROCESS_GONE = "process_gone"
    CANCELLED = "cancelled"

    @property
    def state(self) -> JobState:
        return _END_STATES[self][0]

    @property
    def message(self) -> str:
        return _END_STATES[self][1]


_END_STATES: dict[EndReason, tuple[JobState, str]] = {
    EndReason.SUCCEEDED: (JobState.SUCCEEDED, "training finished and its adapter or model was written"),
    EndReason.NO_ADAPTER: (JobState.FAILED, "training exited 0 but wrote no adapter or model"),
    EndReason.TRAINING_FAILED: (JobState.FAILED, "training failed"),
    EndReason.GAVE_UP: (JobState.FAILED, "no remedy left"),
    EndReason.NEEDS_A_PERSON: (JobState.FAILED, "a failure no automatic remedy fixes"),
    EndReason.CANNOT_START: (JobState.FAILED, "the training could not be started"),
    EndReason.MODEL_DOWNLOAD: (JobState.FAILED, "the base model could not be downloaded"),
    EndReason.GPU_BUSY: (JobState.FAILED, "the GPU is in use and the job was not allowed to wait"),
    EndReason.SECRETS_REFUSED: (JobState.FAILED, "the job's secrets were refused"),
    EndReason.CODE_CHANGED: (JobState.FAILED, "radeonlab's code in the job folder was changed"),
    EndReason.LAUNCHER_STOPPED: (JobState.FAILED, "the launcher was stopped by a signal"),
    EndReason.LAUNCHER_ERROR: (JobState.FAILED, "the launcher failed (its traceback is in launcher.log)"),
    EndReason.PROCESS_GONE: (JobState.FAILED, "process gone (host rebooted or killed)"),
    EndReason.CANCELLED: (JobState.CANCELLED, "cancelled by user"),
}
