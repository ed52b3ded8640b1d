"""Install a container engine from the distribution's packages and pull the ROCm PyTorch image (issue 29).

deploy/setup.py runs it on hosts with `radeonlab_runtime: container`. Idempotent through facts: the
packages (apt's own), the engine's config files (files.put compares), the image (its digest on the host).
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import apt, files, server

from radeonlab.roles.container import plan
from radeonlab.roles.container.defaults import DEFAULTS
from radeonlab.roles.container.facts import LocalImageDigest, RegistryDigest
from radeonlab.roles.privilege import as_root


def _data() -> dict:
    return {key: host.data.get(key) for key in DEFAULTS}


@deploy("Container runtime: Podman and the ROCm PyTorch image", data_defaults=DEFAULTS)
def install_container_runtime() -> None:
    data = _data()
    apt.packages(
        name=f"Install {', '.join(data['container_packages'])} from the distribution's packages",
        packages=data["container_packages"],
        update=True,
        cache_time=24 * 3600,
        **as_root(),
    )
    for path, text in plan.engine_files(data).items():
        files.put(
            name=f"Write {path}",
            src=StringIO(text),
            dest=path,
            user="root",
            group="root",
            mode="644",
            **as_root(),
        )
    image, pinned = str(data["container_image"]), str(data["container_image_digest"])
    local = host.get_fact(LocalImageDigest, image=image, **as_root())
    # Asked every run when pinned: a tag that moved in the registry is said at once, not at the next pull.
    served = host.get_fact(RegistryDigest, image=image, **as_root()) if pinned else None
    try:
        command = plan.pull_command(image, pinned, local, served)
    except plan.DigestMismatch as exc:
        raise DeployError(f"{host.name}: {exc}") from None
    if command:
        server.shell(
            name=f"Pull {image}" + (f" ({pinned})" if pinned else ""), commands=[command], **as_root()
        )
