"""The container role's execution-time operations: the lab's image pin, and the derived image's build.

Both read their facts when they run (after the pull), not when the deploy is planned: on a first deploy the
image is not on the host yet when the plan is made.
"""

from __future__ import annotations

import io
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.operations import files

from radeonlab.roles.container import derived, pins
from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN
from radeonlab.roles.container.facts import ImagePython, LocalImage, LocalImageDigest
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import lock as stack_lock

BUILD_DIR = "/var/lib/radeonlab/image-build"  # on the host: the Containerfile and requirements.txt


def record_pin(
    state: Any, host: Any, pins_file: str, image: str, root_args: Mapping[str, Any], engine: str = PODMAN
) -> None:
    """python.call's function (run on a first deploy of `image`, when no pin names it): the digest the host
    pulled goes into the lab's pins file beside the locks. `root_args`: as_root(), decided when planned.

        python.call(name="Pin ...", function=record_pin, pins_file="locks/container-images.txt",
                    image="docker.io/rocm/pytorch:<tag>", root_args=as_root())
    """
    digest = host.get_fact(LocalImageDigest, image=image, engine=engine, **root_args)
    if not digest:
        raise RuntimeError(f"{host.name}: {image} is not on the host after the pull: nothing to pin")
    if pins.record(Path(pins_file), image, digest):
        logger.warning(
            f"{host.name}: pinned {image} at {digest} in the lab's {pins_file}: later deploys pull by it and "
            "refuse another digest; commit it with the locks"
        )


def _fail(message: str) -> str:
    """A command failing the host with one line (an exception at execution time prints a traceback)."""
    return f"echo {shlex.quote(f'radeonlab: {host.name}: {message}')} >&2; exit 1"


@operation()
def derived_image(
    base: str,
    image_name: str,
    lock_data: Mapping[str, Any],
    rocm_version: str,
    lock_cwd: str,
    extras: Sequence[str],
    provides: Sequence[str],
    index_args: Sequence[str],
    indexes: Sequence[str],
    netns: str = "",
    build_options: Sequence[str] = (),
    engine: str = PODMAN,
):
    """Build `image_name:<key>` FROM the pulled `base` with the lab's locked stack (derived.py), unless the
    host has it. The lock is the lab's for the stack and the image's Python (`lock_data`, `rocm_version`,
    `lock_cwd`: as roles/python_stack chooses a venv's); with none yet, the host fails in one line.

        derived_image(name="Build the training image", base="docker.io/rocm/pytorch:<tag>",
                      image_name="localhost/radeonlab/train", lock_data=..., ...)   # roles/container
    """
    base_digest = host.get_fact(LocalImageDigest, image=base, engine=engine, **as_root())
    if not base_digest:
        yield _fail(f"{base} is not on the host: nothing to build the training image from")
        return
    name = image_name
    current = host.get_fact(LocalImage, image=f"{name}:{derived.CURRENT}", engine=engine, **as_root()) or {}
    labels = current.get("labels") or {}
    if labels.get(f"{derived.LABEL}base.digest") == base_digest and labels.get(f"{derived.LABEL}python"):
        python = labels[f"{derived.LABEL}python"]  # the same base: its Python was asked when it was built
    else:
        python = host.get_fact(ImagePython, image=base, netns=netns, engine=engine, **as_root())
    if not python:
        yield _fail(f"{base}: its python3 does not run ({engine} run {base} python3)")
        return
    key = stack_lock.lock_key(lock_data, rocm_version, python)
    path = stack_lock.lock_path(lock_data, key, lock_cwd)
    if not path.exists():
        yield _fail(
            f"no hash lock {path} for the stack {key} (the image's Python {python}): a container host "
            "installs from the lab's lock and does not resolve one; deploy one venv host of this stack first "
            "(it writes the lock), or commit one"
        )
        return
    lock = stack_lock.parse_lock(path.read_text(), key)
    lines = derived.install_pins(lock, extras, provides)
    requirements = lock.install_text(lines, tuple(indexes) == lock.indexes)
    image_key = derived.image_key(base_digest, lines)
    if labels.get(f"{derived.LABEL}key") == image_key:
        host.noop(f"the training image {name}:{image_key} is built (base {base_digest}, lock {key})")
        return
    context = f"{BUILD_DIR}/{image_key}"
    yield f"mkdir -p {shlex.quote(context)}"
    yield from files.put._inner(
        src=io.StringIO(requirements),
        dest=f"{context}/requirements.txt",
        user="root",
        group="root",
        mode="644",
    )
    dockerfile = derived.containerfile(derived.base_reference(base, base_digest), index_args)
    yield from files.put._inner(
        src=io.StringIO(dockerfile), dest=f"{context}/Containerfile", user="root", group="root", mode="644"
    )
    built = {
        "image": f"{name}:{image_key}",
        "base.image": base,
        "base.digest": base_digest,
        "lock": key,
        "key": image_key,
        "python": python,
    }
    logger.info(f"{host.name}: building {name}:{image_key} from {base}@{base_digest} + {len(lines)} locked")
    yield derived.build_command(context, name, image_key, built, netns, build_options, ENGINE_TABLE[engine])
    yield f"rm -rf {shlex.quote(context)}"
