"""Install a container engine from the distribution's packages (or use the host's Docker), pull AMD's
ROCm PyTorch image and build on the host the training image jobs run in (issue 29): two @deploy, so that
deploy/setup.py can put the meeting of a run's hosts between them (a venv host writes the lab's hash lock,
the build reads it).

deploy/setup.py runs it on hosts with `radeonlab_runtime: container`. Idempotent through facts: the
packages (apt's own), the engine's config files (files.put compares), the image (its digest on the host;
pinned by the inventory or the lab's pins file, pins.py), the derived image (its key label, derived.py).

    install_container_runtime(image, pins_file, engine)   # the engine, the pulled and pinned image
    build_training_image(image, LabLock(...), engine)      # deploy/setup.py fills them
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import Which
from pyinfra.operations import apt, files, python, server

from radeonlab.roles.container import derived, engines, operations, pins, plan
from radeonlab.roles.container.defaults import DEFAULTS
from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN
from radeonlab.roles.container.facts import LocalImageDigest, RegistryDigest
from radeonlab.roles.privilege import as_root


def _data() -> dict:
    return {key: host.data.get(key) for key in DEFAULTS}


@dataclass(frozen=True)
class LabLock:
    """Where the derived image's stack comes from: the lab's hash lock as roles/python_stack chooses a
    venv's (deploy/setup.py fills it from that role's settings), the image's Python choosing the lock."""

    data: Mapping[str, Any]  # python_stack settings (lock_key, lock_path read them)
    rocm_version: str
    cwd: str  # where pyinfra runs: the lab's `locks/` by default
    extras: Sequence[str]
    index_args: Sequence[str]  # pip's index options of the stack (a lock without URLs installs by name)
    indexes: Sequence[str]
    lock_dir: str  # the lab's lock folder: the image pins (pins.py) live beside the locks


@deploy("Container runtime: the engine and the ROCm PyTorch image", data_defaults=DEFAULTS)
def install_container_runtime(image: str, pins_file: str, engine: str = PODMAN) -> None:
    """`image`: the base image (container_image, else the stack's, images.py); `pins_file`: the lab's
    image pins (pins.py); `engine`: podman or docker (engines.py, chosen in deploy/setup.py). The training
    image is build_training_image's."""
    data = _data()
    row = ENGINE_TABLE[engine]
    packages = list(data["container_packages"] or row.packages)
    apt.packages(
        name=f"Install {', '.join(packages)} from the distribution's packages",
        packages=packages,
        update=True,
        cache_time=24 * 3600,
        **as_root(),
    )
    for path, text in plan.engine_files(data, row).items():
        files.put(
            name=f"Write {path}",
            src=StringIO(text),
            dest=path,
            user="root",
            group="root",
            mode="644",
            **as_root(),
        )
    try:
        pinned, source = pins.pinned(Path(pins_file), image, str(data["container_image_digest"]))
    except ValueError as exc:
        raise DeployError(f"{host.name}: {pins_file}: {exc}") from None
    local = host.get_fact(LocalImageDigest, image=image, engine=engine, **as_root())
    # Asked every run when pinned: a tag that moved in the registry is said at once, not at the next pull.
    served = host.get_fact(RegistryDigest, image=image, **as_root()) if pinned else None
    try:
        command = plan.pull_command(image, pinned, local, served, source, row)
    except plan.DigestMismatch as exc:
        raise DeployError(f"{host.name}: {exc}") from None
    if command:
        server.shell(
            name=f"Pull {image}" + (f" ({pinned})" if pinned else ""), commands=[command], **as_root()
        )
    if not pinned:  # the first pull of this image in the lab: its digest becomes the lab's pin
        python.call(
            name=f"Pin {image}'s digest in the lab's {pins.FILE_NAME}",
            function=operations.record_pin,
            pins_file=pins_file,
            image=image,
            root_args=as_root(),
            engine=engine,
        )


@deploy("Build the training image", data_defaults=DEFAULTS)
def build_training_image(image: str, lab_lock: LabLock, engine: str = PODMAN) -> None:
    """FROM the pulled `image`, the lab's hash lock `lab_lock` installed (derived.py), by `engine`; after
    install_container_runtime, and after the run's venv hosts wrote the lock (deploy/setup.py meets there)."""
    data = _data()
    operations.derived_image(
        name=f"Build the training image {data['container_derived_name']} (the lab's hash lock on {image})",
        base=image,
        image_name=data["container_derived_name"],
        lock_data=dict(lab_lock.data),
        rocm_version=lab_lock.rocm_version,
        lock_cwd=lab_lock.cwd,
        extras=list(lab_lock.extras),
        provides=list(data["container_image_provides"]),
        index_args=list(lab_lock.index_args),
        indexes=list(lab_lock.indexes),
        netns=str(data["container_netns"]),
        build_options=list(data["container_build_options"]),
        engine=engine,
        **as_root(),
    )


def choose_engine(setting: str) -> str:
    """The host's engine (engines.choose): `container_engine` as set, else what the host has. Read when the
    deploy is planned (the engine decides which operations run)."""
    try:
        return engines.choose(
            setting,
            bool(host.get_fact(Which, command="podman")),
            bool(host.get_fact(Which, command="docker")),
        ).name
    except ValueError as exc:
        raise DeployError(f"{host.name}: {exc}") from None


def derived_current(data_get: Any) -> str:
    """The name verify runs its check in: `<container_derived_name>:current` (derived.py)."""
    name = data_get("container_derived_name", DEFAULTS["container_derived_name"])
    return f"{name}:{derived.CURRENT}"
