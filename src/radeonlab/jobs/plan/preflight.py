"""The VRAM estimate (jobs/plan/estimate.py) against the job's card, before anything is sent.

Free memory = the card's budget (its VRAM, or usable memory on a large APU) minus what the live reading says
is in use. Not fitting is a warning naming the first OOM remedy that would fit; `submit --strict` refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from radeonlab.errors import DoesNotFitError
from radeonlab.jobs.plan.estimate import EstimateError, estimate, fits


@dataclass(frozen=True)
class Preflight:
    """What the check found: fits (None: not checked), the estimated peak, and one line to show."""

    fits: bool | None
    message: str
    peak: int | None = None
    free: int | None = None


def check(
    model_config: Mapping[str, Any] | None, train: Mapping[str, Any], free: int | None, no_config: str = ""
) -> Preflight:
    """The estimate for `train` (the rendered config) against `free` bytes of the job's card."""
    if model_config is None:
        return Preflight(None, no_config or "VRAM estimate skipped: the model's config.json is not known")
    if free is None:
        return Preflight(None, "VRAM estimate skipped: the host record names no GPU memory")
    try:
        verdict = fits(estimate(model_config, train), free)
    except (EstimateError, ValueError) as exc:
        return Preflight(None, f"VRAM estimate skipped: {exc}")
    if verdict.fits:
        return Preflight(True, f"VRAM estimate: {verdict.message}", verdict.peak, free)
    hint = ""
    if verdict.remedy:
        said = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in verdict.remedy.items())
        hint = f"; set {said} in the spec (the OOM remedy would do this after a failure)"
    return Preflight(False, f"VRAM estimate: {verdict.message}{hint}", verdict.peak, free)


def enforce(result: Preflight, strict: bool, where: str) -> None:
    """--strict: refuse a job that does not fit."""
    if strict and result.fits is False:
        raise DoesNotFitError(f"{where}: {result.message}; refused (--strict), nothing uploaded")
