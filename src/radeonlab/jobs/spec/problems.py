"""A finding about a spec or its data, shared by every check: `file:line: severity: message (fix: ...)`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
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

    def __str__(self) -> str:
        """One line: names and messages with control characters escaped (errors.shown)."""
        fix = f" (fix: {self.fix})" if self.fix else ""
        file = shown(self.file)
        where = f"{file} (a command-line override)" if self.line == 0 else f"{file}:{self.line}"
        return shown(f"{where}: {self.severity}: {self.message}{fix}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def has_errors(problems: list[Problem]) -> bool:
    return any(p.severity == ERROR for p in problems)
