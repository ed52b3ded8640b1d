"""The lab's image pins: the digest each base image was first pulled at, kept beside the lab's hash locks.

The way the Python stack is pinned (roles/python_stack/lock.py): the first deploy that pulls an image writes
its manifest digest into `container-images.txt` in the lab's lock folder (python_stack_lock_dir, else
`locks/` where pyinfra runs); later deploys pull by that digest and refuse a registry serving another
digest under the tag, naming both. Commit the file with the locks to keep the lab on these images; remove a
line to take the tag's image again. An inventory's container_image_digest wins over the file.

    # radeonlab image pins (roles/container): ...
    docker.io/rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1 sha256:<64 hex>

Pure functions but record(), which writes the file under a file lock (hosts run in parallel).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from radeonlab.roles.python_stack.firstlock import file_lock

FILE_NAME = "container-images.txt"
HEADER = (
    "# radeonlab image pins (roles/container): the manifest digest each image was first pulled at;\n"
    "# deploys refuse another digest under the tag. Commit it with the locks; remove a line to repin.\n"
)
_LINE = re.compile(r"(?P<image>\S+)\s+(?P<digest>sha256:[0-9a-f]{64})")


def pins_path(lock_dir: Path) -> Path:
    return lock_dir / FILE_NAME


def parse(text: str) -> dict[str, str]:
    """image -> digest. ValueError (one line) for a line that is not `IMAGE sha256:<64 hex>`."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line)
        if not m:
            raise ValueError(f"{FILE_NAME} line {number}: not `IMAGE sha256:<64 hex>`: {line}")
        pins[m["image"]] = m["digest"]
    return pins


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{image} {digest}\n" for image, digest in sorted(pins.items()))


def read(path: Path) -> dict[str, str]:
    return parse(path.read_text()) if path.exists() else {}


def pinned(path: Path, image: str, inventory_digest: str) -> tuple[str, str]:
    """(digest, where it comes from) the deploy holds `image` to: the inventory's, else the lab's file;
    ("", "") when neither pins it."""
    if inventory_digest:
        return inventory_digest, "container_image_digest"
    digest = read(path).get(image, "")
    return (digest, f"the lab's pin in {path}") if digest else ("", "")


def record(path: Path, image: str, digest: str) -> bool:
    """Add `image digest` to the file unless the image is pinned there already (a pin is never rewritten
    by a deploy). True when written."""
    with file_lock(path.with_name(f".{path.name}.lock")):
        pins = read(path)
        if image in pins:
            return False
        pins[image] = digest
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(render(pins))
        os.chmod(tmp, 0o644)  # read, reviewed and committed like the locks
        os.replace(tmp, path)
        return True
