"""Facts of the container role: the digest of the image the host has, and the one the registry serves."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


def _digest(output: list[str]) -> str | None:
    return next((line.strip() for line in output if line.strip().startswith("sha256:")), None)


class LocalImageDigest(FactBase):
    """The manifest digest of `image` in the host's Podman storage; None when Podman or the image is
    missing (a first deploy asks before Podman is installed)."""

    def command(self, image: str) -> str:
        return (
            "command -v podman >/dev/null || exit 0; "
            f"podman image inspect --format '{{{{.Digest}}}}' {shlex.quote(image)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        return _digest(output)


class RegistryDigest(FactBase):
    """The manifest digest the registry serves for `image` now (skopeo inspect, which reads the engine's
    registries.conf); None when skopeo is missing or the registry does not answer. --no-tags: skopeo
    lists every tag of the repository otherwise (thousands for rocm/pytorch on Docker Hub)."""

    def command(self, image: str) -> str:
        return (
            "command -v skopeo >/dev/null || exit 0; "
            "skopeo inspect --no-tags --format '{{.Digest}}' "
            f"{shlex.quote('docker://' + image)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        return _digest(output)
