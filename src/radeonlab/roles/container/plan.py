"""What the container role writes and runs, from settings and facts: pure functions
(tests/unit/test_roles_container.py)."""

from __future__ import annotations

import shlex
from typing import Any

from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN, Engine

STORAGE_CONF = "/etc/containers/storage.conf"
CONTAINERS_CONF = "/etc/containers/containers.conf.d/50-radeonlab.conf"
REGISTRIES_CONF = "/etc/containers/registries.conf.d/50-radeonlab.conf"
HEADER = "# Written by radeonlab (roles/container); settings: container_* in the inventory.\n"


def engine_files(data: dict[str, Any], engine: Engine = ENGINE_TABLE[PODMAN]) -> dict[str, str]:
    """Path -> content of the engine configuration this host's settings ask for. storage.conf is written
    only with a storage driver set (it has no drop-in folder: the whole file is ours then). With Docker only
    registries.conf, which skopeo reads (Docker's daemon settings are the host owner's)."""
    files: dict[str, str] = {}
    registries = "".join(
        f'\n[[registry]]\nlocation = "{r}"\ninsecure = true\n' for r in data["container_insecure_registries"]
    )
    if not engine.writes_config:
        return {REGISTRIES_CONF: HEADER + registries}
    if data["container_storage_driver"]:
        files[STORAGE_CONF] = (
            f'{HEADER}[storage]\ndriver = "{data["container_storage_driver"]}"\n'
            'runroot = "/run/containers/storage"\ngraphroot = "/var/lib/containers/storage"\n'
        )
    containers = [
        f'{key} = "{data[f"container_{key}"]}"' for key in ("cgroups", "netns") if data[f"container_{key}"]
    ]
    files[CONTAINERS_CONF] = HEADER + ("[containers]\n" + "\n".join(containers) + "\n" if containers else "")
    files[REGISTRIES_CONF] = HEADER + registries
    return files


class DigestMismatch(Exception):
    """The registry serves another image under the pinned image's name."""


def mismatch_message(image: str, pinned: str, served: str, source: str = "container_image_digest") -> str:
    """`source`: where the pin comes from (the inventory's container_image_digest, or the lab's pins file)."""
    return (
        f"{image}: the registry serves {served}, not the pinned {pinned} ({source}): another image under "
        "the same name. Check it, then pin it (container_image_digest, or its line in the lab's "
        "container-images.txt) or name the old one"
    )


def pull_command(
    image: str,
    pinned: str,
    local: str | None,
    served: str | None,
    source: str = "container_image_digest",
    engine: Engine = ENGINE_TABLE[PODMAN],
) -> str | None:
    """The pull to run, or None when the host has what it needs. Raises DigestMismatch when the registry
    is seen serving another digest than the pinned one. The command checks the pulled digest itself too:
    on a first deploy skopeo is not installed when the facts are read, and a tag can move between the two."""
    if pinned and served and served != pinned:
        raise DigestMismatch(mismatch_message(image, pinned, served, source))
    if local and (not pinned or local == pinned):
        return None
    q = shlex.quote(image)
    pull = f"{engine.name} pull --quiet {q} >/dev/null"
    if not pinned:
        return pull
    before, _, after = mismatch_message(image, pinned, "\0", source).partition("\0")
    # the digest line: Podman's `sha256:...`, Docker's `name@sha256:...` (the part after the @)
    digest = f"{engine.digest_command(image)} | sed -n 's/.*\\(sha256:[0-9a-f]*\\).*/\\1/p' | head -n 1"
    return (
        f"{pull} && got=$({digest}) && "
        f'if [ "$got" != {shlex.quote(pinned)} ]; then '
        f'echo {shlex.quote(before)}"$got"{shlex.quote(after)} >&2; '
        f"{engine.name} rmi {q} >/dev/null; exit 1; fi"
    )


def run_prefix(image: str, options: list[str], engine: Engine = ENGINE_TABLE[PODMAN]) -> str:
    """`<engine> run` of `image` with the run options (container_run_options), removed when it exits: the
    command to which a program and its arguments are appended (verify's stack check)."""
    return " ".join([f"{engine.name} run --rm", *(shlex.quote(str(o)) for o in options), shlex.quote(image)])
