"""radeonlab's errors: one root, one subclass per kind, each with the exit code the CLI uses.

Every message is a complete line for the user (`radeonlab: error: <message>`): what is wrong and, where there
is one, the fix. The CLI catches `RadeonlabError` and nothing else by name; errors of the libraries underneath
(paramiko, socket, yaml) are translated where they arise (jobs/ssh for SSH, jobs/spec for specs). Imports
nothing but the standard library, so `radeonlab check` stays fast.

Exit codes (docs/reference/cli.md): 0 ok; 1 a job or host failed (unreachable, not provisioned, job failed);
2 usage or input (a bad spec, dataset, inventory, job id, option), nothing was sent.
"""

from __future__ import annotations

from typing import Any

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class RadeonlabError(Exception):
    """The root: a one-line message meant for the user as it is."""

    exit_code = EXIT_FAILURE


class InputError(RadeonlabError):
    """Bad input from the user (spec, dataset, inventory, option, job id): refused before anything is sent."""

    exit_code = EXIT_USAGE


class SpecError(InputError):
    """A spec that cannot be loaded at all; str() is `file:line: message` (the file's name escaped)."""

    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{shown(file)}:{line}: {message}")
        self.file, self.line, self.message = file, line, message


class ChecksFailedError(InputError):
    """The spec has errors (the same checks as `radeonlab check`); nothing was uploaded."""

    def __init__(self, message: str, problems: list[Any]) -> None:
        super().__init__(message)
        self.problems = problems


class InventoryError(InputError):
    """An inventory that cannot be loaded, or a host selection that matches nothing."""


class ModelError(InputError):
    """A model that cannot be used as named (unknown, gated without access, malformed id)."""


class RenderError(InputError):
    """A spec that cannot run on the chosen host (e.g. bf16 forced on a card without it)."""


class PlacementError(RadeonlabError):
    """No host (or not enough hosts) fits the job; `decisions` says why each one was rejected."""

    def __init__(self, message: str, decisions: list[Any] | None = None) -> None:
        super().__init__(message)
        self.decisions = decisions or []


class DoesNotFitError(RadeonlabError):
    """`--strict` and the VRAM estimate does not fit the card's free memory."""


class TransportError(RadeonlabError):
    """Anything that went wrong talking to a host (unreachable, authentication, a lost connection)."""


class HostKeyError(TransportError):
    """The host's SSH key is unknown or changed: refused, with the command that fixes it."""


class RemoteCommandError(TransportError):
    """A command on the host exited non-zero; `result` has its output."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class NotProvisionedError(RadeonlabError):
    """The host has no (current) host record: provisioning has not run, or is too old."""


class JobNotFoundError(InputError):
    """No host of the inventory (or of the local cache) has this job."""


class JobStateError(RadeonlabError):
    """The job is in a state that does not allow the action (resume a running job, rm a running job)."""


# C0/C1 controls, DEL, and the bidi embedding/override/isolate controls (they reorder a terminal line)
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES.update({c: f"\\u{c:04x}" for c in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def shown(name: object) -> str:
    """A file name (or any text) for a one-line message: control characters escaped (a newline is \\x0a),
    everything else as it is (spaces, quotes, accents)."""
    return str(name).translate(_ESCAPES)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message (messages are written as one line; this guards the rest)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
