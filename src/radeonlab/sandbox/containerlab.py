"""SIMULATED: what lets a sandbox host run Podman (roles/container), kept here, not in the role. The host
data below are ordinary settings a real host could set too; the cgroup stub is the host's, not a setting.
Why each is needed (the error seen without it): docs/design/containers-sandbox.md.

- Storage driver vfs: the host's / is an overlayfs; an overlay on it needs fuse-overlayfs, and the host has
  no /dev/fuse.
- cgroups disabled + an empty tmpfs on /sys/fs/cgroup: the host mounts no cgroup filesystem (and must not
  touch the machine's); crun refuses a /sys/fs/cgroup that is not a cgroup or tmpfs mount, and a container
  with cgroups finds no controllers in the stub.
- netns host: the host shares the machine's network namespace; bridge networking would change the machine's.
- The SIMULATED registry (registry.py) serves plain HTTP: insecure for the engine.
- podman build --isolation=chroot: the build's RUN steps (buildah, OCI isolation) join a cgroup whatever
  containers.conf says ("could not join cgroup" without a cgroup hierarchy); chroot isolation joins none.
"""

from __future__ import annotations

from typing import Any

from radeonlab.sandbox.hosts import SandboxHost


def engine_data(registry_address: str) -> dict[str, Any]:
    """Host data (the container role's settings) for a sandbox host pulling from `registry_address`."""
    return {
        "container_storage_driver": "vfs",
        "container_cgroups": "disabled",
        "container_netns": "host",
        "container_insecure_registries": [registry_address],
        "container_build_options": ["--isolation=chroot"],
    }


def stub_cgroup_fs(host: SandboxHost) -> None:
    """SIMULATED: an empty tmpfs on the host's /sys/fs/cgroup (a real host's systemd mounts cgroup2 there).
    Lasts until the host stops."""
    host.exec(
        "mountpoint -q /sys/fs/cgroup || mount -t tmpfs -o mode=755,nosuid,nodev cgroup-stub /sys/fs/cgroup"
    )
