"""A spec's switch for one automatic remedy ladder (`radeonlab: remedies:`), shared by the laptop's spec
reader (jobs/spec/block.py) and the host's remedy runner (jobs/host/remedies.py), which must not import the
laptop's spec code."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Remedy:
    """One automatic remedy: on/off, and optionally the ordered steps to try (names defined by the runner)."""

    enabled: bool = True
    steps: list[str] = field(default_factory=list)  # empty: the runner's default ladder
