"""AMD's facts as the SIMULATED AMD servers need them, read from amdworld/*.yaml (AMD's own documents, sources
in amdworld/README.md): never from the product's tables (roles/...). The wheel index reads the Python package
facts, the apt repository (aptrepo.py) the Core SDK's distros and meta packages.

What the data does not give, the test bed chooses and says so here: the patch numbers of torch and
torchvision (releases.yaml gives the series, "2.13"; the test bed serves 2.13.0, as AMD's examples name it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

AMDWORLD = Path(__file__).with_name("amdworld")
CHOSEN_PATCH = "0"  # SIMULATED choice: the data gives torch/torchvision series only


@functools.cache
def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((AMDWORLD / name).read_text())


@dataclass(frozen=True)
class Release:
    """One Core SDK release on AMD's aggregate index."""

    version: str  # "10.0.0" (V)
    torch: str  # "2.13.0": the series from releases.yaml, patch chosen (CHOSEN_PATCH)
    torchvision: str

    @property
    def local(self) -> str:
        """torch's local version label: version_form "<torch>+rocm<V>" (python-packages.yaml)."""
        return f"rocm{self.version}"

    @property
    def torch_version(self) -> str:
        return f"{self.torch}+{self.local}"


def releases() -> list[Release]:
    """Every release releases.yaml pairs with a torch (the coresdk stream: 10.0.0, 10.1.0), newest first."""
    return [
        Release(r["version"], f"{r['torch']}.{CHOSEN_PATCH}", f"{r['torchvision']}.{CHOSEN_PATCH}")
        for r in load("releases.yaml")["releases"]
        if r.get("torch")
    ]


def newest_production() -> str:
    return str(load("releases.yaml")["newest_production"])


def device_targets() -> tuple[str, ...]:
    """The gfx targets python-packages.yaml lists a device extra for (consumer and workstation parts)."""
    return tuple(sorted(load("python-packages.yaml")["device_extras"]))


def _expand(requirement: str, version: str, target: str | None, targets: tuple[str, ...]) -> list[str]:
    """One data requirement ("rocm-sdk-device-T==V", "rocm-sdk-device-<every target>==V") -> PEP 508."""
    req = requirement.replace("==V", f"=={version}")
    if "<every target>" in req:
        return [req.replace("<every target>", t) for t in targets]
    return [req.replace("-T==", f"-{target}==") if target else req]


def rocm_extras(version: str, targets: tuple[str, ...]) -> dict[str, list[str]]:
    """The `rocm` selector's requirements per extra ("" = no extra), as python-packages.yaml gives them."""
    out: dict[str, list[str]] = {}
    for extra, spec in load("python-packages.yaml")["packages"]["rocm"]["extras"].items():
        for target in targets if extra.endswith("-T") else [None]:
            name = extra[:-1] + target if target else extra
            out[name] = [r for req in spec["requires"] for r in _expand(req, version, target, targets)]
    return out


def requires(package: str, version: str) -> list[str]:
    """A wheel's own requirements from the data (rocm-sdk-device-T: rocm-sdk-libraries==V)."""
    spec = load("python-packages.yaml")["packages"][package]
    return [req.replace("==V", f"=={version}") for req in spec.get("requires", [])]


# --- the Core SDK's apt repositories (coresdk-packages.yaml) ----------------------------------------------


def coresdk_distros() -> tuple[str, ...]:
    """AMD's distribution directories of both Core SDK layouts: ubuntu2204 ... debian13."""
    return tuple(load("coresdk-packages.yaml")["distros"])


def coresdk_targets() -> tuple[str, ...]:
    """The exact gfx targets with a per-target meta package amdrocm<series>-<gfx> (multi-arch layout)."""
    return tuple(load("coresdk-packages.yaml")["per_target"]["targets"])


def coresdk_families() -> dict[str, tuple[str, ...]]:
    """Per-family meta packages amdrocm<series>-<family> -> the targets AMD's selector sends to each."""
    packages = load("coresdk-packages.yaml")["per_family"]["packages"]
    return {family: tuple(targets) for family, targets in packages.items()}
