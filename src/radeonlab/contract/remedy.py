"""A spec's switch for one automatic remedy ladder (`radeonlab: remedies:`), shared by the laptop's spec
reader (jobs/spec/block.py) and the host's remedy runner (jobs/host/remedies.py), which must not import the
laptop's spec code."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Remedy:
    """One automatic remedy: on/off, and optionally the ordered steps to try (names defined by the runner)."""

    enabled: bool = True
    steps: list[str] = field(default_factory=list)  # empty: the runner's default ladder

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Remedy:
        """job.json `remedies.<ladder>` as jobs/plan writes it: {enabled, steps}."""
        return cls(enabled=bool(data.get("enabled", True)), steps=[str(s) for s in data.get("steps") or []])
