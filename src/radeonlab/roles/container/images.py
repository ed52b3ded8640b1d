"""AMD's ROCm PyTorch images the product knows, and the default image of a stack: ONE table with its sources.

A container host's default `container_image` is the first row whose ROCm and torch are the stack choice's
(deploy/stack.py: rocm_version, pytorch_version), named the way AMD tags its images on Docker Hub:
rocm/pytorch:rocm<ROCm>_ubuntu<release>_py<python>_pytorch_release_<torch>. A stack without a row fails the
deploy in one line (set container_image, or a ROCm/torch pair below). An inventory's container_image wins.

Sources:
- [DOCKER62] AMD's ROCm docs, "Installing PyTorch for ROCm" (install-on-linux docs-6.2.0, how-to/3rd-party/
  pytorch-install): `docker pull rocm/pytorch:latest` or "a specific and supported configuration with
  different user-space ROCm versions, PyTorch versions, and operating systems" (Docker Hub, rocm/pytorch).
- [TAGS] Tags of AMD's image seen in use in public repositories (code-search file ids 65936317614,
  59080138584, 59628784749, 70871696304): the tag shape above, one id per row below.
Not in the table: the ROCm 10.x releases of roles/amd_releases.py (no tag of theirs was seen).
tests/unit/test_roles_container_image.py compares it with the test bed's copy of AMD's data
(sandbox/amdworld/containers.yaml).

    default_image("7.2", "2.10.0")
    # -> "docker.io/rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0"
"""

from __future__ import annotations

from dataclasses import dataclass

REGISTRY = "docker.io"  # Docker Hub [DOCKER62]
REPOSITORY = "rocm/pytorch"
TAG_SHAPE = "rocm{rocm}_ubuntu{ubuntu}_py{python}_pytorch_release_{torch}"  # [TAGS]


@dataclass(frozen=True)
class AmdImage:
    rocm: str  # ROCm release, as AMD writes it in the tag ("7.2.4")
    ubuntu: str
    python: str
    torch: str  # torch's public version
    source: str

    @property
    def reference(self) -> str:
        tag = TAG_SHAPE.format(rocm=self.rocm, ubuntu=self.ubuntu, python=self.python, torch=self.torch)
        return f"{REGISTRY}/{REPOSITORY}:{tag}"


# Newest first: the first row matching a stack is its default.
AMD_IMAGES: tuple[AmdImage, ...] = (
    AmdImage("7.2.4", "24.04", "3.12", "2.10.0", "[TAGS] 59080138584"),
    AmdImage("7.2.4", "24.04", "3.12", "2.9.1", "[TAGS] 65936317614: 'PyTorch 2.9.1+ROCm 7.2.4'"),
    AmdImage("7.2.3", "24.04", "3.12", "2.10.0", "[TAGS] 59628784749"),
    AmdImage("7.2.2", "24.04", "3.12", "2.10.0", "[TAGS] 70871696304"),
)


def _series(version: str) -> str:
    return ".".join(version.split(".")[:2])


def default_image(rocm_version: str, torch_version: str) -> str:
    """The image of a stack: ROCm `rocm_version` (a series "7.2" picks its newest release, "7.2.3" that one)
    and torch `torch_version` (its public part). ValueError (one line) when no known image has them."""
    torch = torch_version.split("+", 1)[0]
    for image in AMD_IMAGES:
        if rocm_version in (image.rocm, _series(image.rocm)) and image.torch == torch:
            return image.reference
    known = ", ".join(f"ROCm {i.rocm} + torch {i.torch}" for i in AMD_IMAGES)
    raise ValueError(
        f"no AMD rocm/pytorch image is known for ROCm {rocm_version} with torch {torch} (known: {known}; "
        "roles/container/images.py): set container_image, or rocm_version and pytorch_version to a known pair"
    )
