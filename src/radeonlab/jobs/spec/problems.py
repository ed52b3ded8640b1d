"""A finding about a spec or its data, shared by every check: `file:line: severity: message (fix: ...)`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from radeonlab.errors import shown

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Problem:
    """One finding, printed as `file:line: severity: message (fix: ...)`."""

    file: str
    line: int
    message: str
    severity: str = ERROR
    fix: str | None = None
    override: str | None = None  # the key of the command-line `key=value` this is about (line is then 0)

    def __str__(self) -> str:
        """One line: names and messages with control characters escaped (errors.shown)."""
        fix = f" (fix: {self.fix})" if self.fix else ""
        if self.override is not None:
            where = f"override `{self.override}=...`"  # never the value: it may be a token (trust S3)
        elif self.line < 1:
            where = f"{self.file} (a command-line override)"
        else:
            where = f"{self.file}:{self.line}"
        return shown(f"{where}: {self.severity}: {self.message}{fix}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def name_overrides(problems: list[Problem], overrides: dict[str, str]) -> list[Problem]:
    """A finding at Spec.line_of's -n (the n-th `key=value` override) names that override's key, line 0."""
    typed = list(overrides)
    return [
        replace(p, line=0, override=typed[-1 - p.line]) if -len(typed) <= p.line < 0 else p for p in problems
    ]


def has_errors(problems: list[Problem]) -> bool:
    return any(p.severity == ERROR for p in problems)


def show_value(value: Any) -> str:
    """A value as the spec's YAML writes it (true, null), for messages and fixes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)
