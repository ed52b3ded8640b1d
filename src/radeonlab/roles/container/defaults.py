"""The container role's settings (role-prefixed data keys): the one place they are set."""

from __future__ import annotations

from typing import Any

# deploy/setup.py runs this role only on hosts with `radeonlab_runtime: container`; "venv" is the default.
RUNTIMES = ("venv", "container")
RUNTIME_DEFAULT = "venv"

DEFAULTS: dict[str, Any] = {
    # The engine: "podman", "docker", or empty for the host's (Podman where installed, else Docker where
    # the host has it, else Podman from the distribution's packages): engines.py, chosen once in
    # deploy/setup.py. radeonlab installs Podman; a host's Docker is only used.
    "container_engine": "",
    # The distribution's packages installed; empty: the engine's (engines.py). Podman's: podman (Debian 12:
    # 4.3.1, with crun, conmon, netavark), skopeo, which asks a registry for a tag's digest without pulling,
    # and catatonit, the init `podman run --init` starts as a job container's PID 1 so that a stop signal
    # reaches the training (jobs/host/runtime.py). Docker's: skopeo (Docker's docker-init is its own).
    "container_packages": [],
    # AMD's ROCm PyTorch image (the base of the training image). Empty: the stack's, from the table of AMD's
    # images in images.py (the ROCm release and torch of the stack choice, AMD's tag shape
    # rocm<ROCm>_ubuntu<release>_py<python>_pytorch_release_<torch>, sources there).
    "container_image": "",
    # The image's manifest digest ("sha256:..."), pinned: a registry serving another digest under the tag
    # fails the deploy (both digests named). Empty: the lab's pin (container-images.txt beside the lab's
    # hash locks, written by the first deploy that pulls the image: pins.py) holds it the same way.
    "container_image_digest": "",
    # Engine settings, empty = the distribution's default. A host whose / is an overlayfs (some containers,
    # the test bed's hosts) needs storage driver "vfs"; a host without a cgroup hierarchy of its own needs
    # cgroups "disabled"; netns "host" keeps containers off bridge networking.
    "container_storage_driver": "",
    "container_cgroups": "",
    "container_netns": "",
    # How a container gets the GPU (verify's stack check runs with these; one argv word each). AMD's ROCm
    # docs, "Installing PyTorch for ROCm" (rocm.docs.amd.com/projects/install-on-linux/en/docs-6.2.0/how-to/
    # 3rd-party/pytorch-install.html): `docker run -it --cap-add=SYS_PTRACE --security-opt seccomp=unconfined
    # --device=/dev/kfd --device=/dev/dri --group-add video --ipc=host --shm-size 8G`; AMD's Radeon docs
    # (rocm.docs.amd.com/projects/radeon/en/docs-6.4.2/docs/install/native_linux/install-pytorch.html) give
    # the same devices, video group, host IPC and shared memory. /dev/dri/renderD* belongs to group render on
    # Ubuntu (udev's 60-drm.rules), which AMD's ROCm install guide adds the user to beside video.
    # Not `--shm-size 8G`: Podman (4.3.1, seen on the test bed) refuses it beside --ipc=host ("cannot set
    # shmsize when running in the host IPC Namespace"); with host IPC the container has the host's /dev/shm,
    # sized by the host, so AMD's 8G is the host's to give (Docker accepts the pair and ignores the size).
    "container_run_options": [
        "--device=/dev/kfd",
        "--device=/dev/dri",
        "--group-add=video",
        "--group-add=render",
        "--ipc=host",
        "--security-opt=seccomp=unconfined",
        "--cap-add=SYS_PTRACE",
    ],
    # Registries reached over plain HTTP ("host:port"): registries.conf's `insecure = true`.
    "container_insecure_registries": [],
    # The training image built on the host FROM the base (derived.py): its name; tagged <key> and current.
    "container_derived_name": "localhost/radeonlab/train",
    # What the base image brings, left out of the derived image's install (PEP 503 names, fnmatch patterns):
    # torch and its companions (AMD's image ships torch, torchvision, torchaudio and ROCm's triton: AMD's
    # ROCm docs, "Installing PyTorch for ROCm"), AMD's ROCm and device wheels (the `rocm` selector,
    # rocm-sdk-*, amd-torch-device-*: TheRock RELEASES.md's package graph; the image has ROCm installed).
    "container_image_provides": [
        "torch",
        "torchvision",
        "torchaudio",
        "triton",
        "pytorch-triton-rocm",
        "rocm",
        "rocm-sdk-*",
        "amd-torch-device-*",
    ],
    # More `podman build` options, one argv word each (e.g. "--isolation=chroot" where the default OCI
    # isolation cannot run: docs/design/containers-sandbox.md).
    "container_build_options": [],
}
