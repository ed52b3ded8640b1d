"""The errors a user sees as one line (no traceback) from the `radeonlab` command.

`RadeonlabError` is the base of the job runner's own errors. Errors of other modules that are meant for the
user as they are (spec, inventory, transport, render) are listed by module and class name, so the CLI can
catch them without importing those modules (fabric is slow to import; `radeonlab check` never needs it):
an error class that was never imported cannot have been raised.
"""

from __future__ import annotations

import sys

# module -> classes whose str() is a complete one-line message for the user
USER_ERROR_CLASSES: dict[str, tuple[str, ...]] = {
    "radeonlab.jobs.spec.load": ("SpecError",),
    "radeonlab.jobs.fleet.inventory": ("InventoryError",),
    "radeonlab.jobs.ssh.connection": ("TransportError",),  # SyncError and the host-key errors derive from it
    "radeonlab.jobs.plan.render": ("RenderError",),
    "radeonlab.contract.state": ("InvalidTransition",),
}


class RadeonlabError(Exception):
    """A job-runner error whose message is meant for the user as it is (one line)."""


class NotProvisionedError(RadeonlabError):
    """The host has no (current) host record: provisioning has not run, or is too old."""


class JobNotFoundError(RadeonlabError):
    """No host of the inventory has this job."""


class ChecksFailedError(RadeonlabError):
    """The spec has errors (the same checks as `radeonlab check`); nothing was uploaded."""

    def __init__(self, message: str, problems: list) -> None:
        super().__init__(message)
        self.problems = problems


def user_error_types() -> tuple[type[BaseException], ...]:
    """RadeonlabError plus the user-facing error classes of the modules imported so far."""
    found: list[type[BaseException]] = [RadeonlabError]
    for module_name, class_names in USER_ERROR_CLASSES.items():
        module = sys.modules.get(module_name)
        found += [getattr(module, name) for name in class_names if module and hasattr(module, name)]
    return tuple(found)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message (messages are written as one line; this guards the rest)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
