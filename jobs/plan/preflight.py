"""Pre-flight VRAM check in `radeonlab submit`: the estimate (jobs/plan/estimate.py) against the card's
free VRAM.

The model's shape comes from config.json in the spec's LOCAL model folder; a hub model is skipped with a
note (its config.json is not on the laptop). Free VRAM = the card's vram_total - vram_used as the host record
(CONTRACTS.md) last read them. Not fitting is a warning naming the first OOM remedy that would fit;
with --strict it refuses before anything is uploaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.jobs.plan.estimate import EstimateError, estimate, fits

from radeonlab.errors import RadeonlabError


class DoesNotFitError(RadeonlabError):
    """--strict and the estimate does not fit the card's free VRAM."""


@dataclass(frozen=True)
class Preflight:
    """What the check found: fits (None: not checked) and one line to show."""

    fits: bool | None
    message: str


def free_vram(card: Mapping[str, Any]) -> int | None:
    total = card.get("vram_total")
    return int(total) - int(card.get("vram_used") or 0) if total else None


def check(model_dir: str | None, train: Mapping[str, Any], card: Mapping[str, Any] | None) -> Preflight:
    """The estimate for `train` (the rendered config) on `card` (a host record GPU entry)."""
    if model_dir is None:
        return Preflight(None, "VRAM estimate skipped: the model is a hub id (no local config.json)")
    config_file = Path(model_dir) / "config.json"
    if not config_file.is_file():
        return Preflight(None, f"VRAM estimate skipped: no config.json in {model_dir}")
    free = free_vram(card) if card else None
    if free is None:
        return Preflight(None, "VRAM estimate skipped: the host record names no GPU with VRAM")
    try:
        verdict = fits(estimate(json.loads(config_file.read_text()), train), free)
    except (EstimateError, ValueError) as exc:
        return Preflight(None, f"VRAM estimate skipped: {exc}")
    if verdict.fits:
        return Preflight(True, f"VRAM estimate: {verdict.message}")
    hint = ""
    if verdict.remedy:
        said = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in verdict.remedy.items())
        hint = f"; set {said} in the spec (the OOM remedy would do this after a failure)"
    return Preflight(False, f"VRAM estimate: {verdict.message}{hint}")


def enforce(result: Preflight, strict: bool, where: str) -> None:
    """--strict: refuse a job that does not fit."""
    if strict and result.fits is False:
        raise DoesNotFitError(f"{where}: {result.message}; refused (--strict), nothing uploaded")
