"""What a spec wishes of a card (radeonlab.placement's gfx_family and min_vram_gb, and a forced bf16): one
type, read by the built-in placement (jobs/plan/placement.py) and turned into Slurm constraints
(jobs/plan/slurm.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CardWishes:
    """A spec's wishes of the card it trains on."""

    gfx_family: str | None = None  # gfx110x, gfx11, gfx1100, RDNA3
    bf16: bool = False  # the spec sets bf16 or pure_bf16
    min_vram_gb: float | None = None  # decimal GB, as cards are sold

    def describe(self) -> str:
        """ "gfx110x, bf16, min_vram_gb 16", or "no wishes"."""
        parts = [self.gfx_family or "", "bf16" if self.bf16 else ""]
        parts.append(f"min_vram_gb {self.min_vram_gb:g}" if self.min_vram_gb else "")
        return ", ".join(p for p in parts if p) or "no wishes"
