"""Facts of the container role: the digest of the image the host has, and the one the registry serves.
Each takes the engine's name (engines.py), "podman" unless said."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase

from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN, digest_of


class LocalImageDigest(FactBase):
    """The manifest digest of `image` in the engine's storage; None when the engine or the image is missing
    (a first deploy asks before Podman is installed)."""

    def command(self, image: str, engine: str = PODMAN) -> str:
        return (
            f"command -v {engine} >/dev/null || exit 0; "
            f"{ENGINE_TABLE[engine].digest_command(image)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        return digest_of(output)


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
        return digest_of(output)


class LocalImage(FactBase):
    """What the engine's storage says of `image`: {"digest", "tags", "labels"}; None when the engine or the
    image is missing. The derived image's labels say what it was built from (derived.py). Podman's answer
    has Digest and Labels at the top; Docker's has RepoDigests and Config.Labels."""

    def command(self, image: str, engine: str = PODMAN) -> str:
        return (
            f"command -v {engine} >/dev/null || exit 0; "
            f"{engine} image inspect {shlex.quote(image)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> dict[str, Any] | None:
        try:
            found = json.loads("\n".join(output) or "[]")
        except ValueError:
            return None
        if not found:
            return None
        info = found[0]
        return {
            "digest": str(info.get("Digest") or digest_of(list(info.get("RepoDigests") or [])) or ""),
            "tags": list(info.get("RepoTags") or []),
            "labels": dict(info.get("Labels") or (info.get("Config") or {}).get("Labels") or {}),
        }


class ImagePython(FactBase):
    """The major.minor of `image`'s python3 (the lab's lock is per Python minor), by running it once:
    `<engine> run --rm IMAGE python3 -c ...`; None when it does not run."""

    def command(self, image: str, netns: str = "", engine: str = PODMAN) -> str:
        net = f"--network {shlex.quote(netns)} " if netns else ""
        probe = "import sys; print('python %d.%d' % sys.version_info[:2])"
        return (
            f"{engine} run --rm {net}{shlex.quote(image)} python3 -c {shlex.quote(probe)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        return next((line.split()[1] for line in output if line.startswith("python ")), None)
