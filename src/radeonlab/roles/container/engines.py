"""The two container engines a container host may use, Podman and Docker, as data: where their commands
differ, each says its own (tests/unit/test_roles_container_engines.py).

Which one (`container_engine`, chosen once in deploy/setup.py): "podman" or "docker" as set; empty, the
host's: Podman where it is installed, else Docker where the host has it, else Podman from the
distribution's packages. radeonlab installs Podman; Docker it only uses (a host's Docker is its owner's,
installed and configured their way: radeonlab writes none of its daemon settings).

What differs (each from the engine's own manual: podman-run(1), podman-build(1), podman-image-inspect(1);
Docker's CLI reference for `docker run`, `docker build`, `docker image inspect`, `docker rm`):
- the image store: Podman's is per user (root builds, the training user's rootless store gets a copy);
  Docker has one daemon store, which the training user reaches through the `docker` group. Docker's own
  documentation ("Linux post-installation steps", "Docker daemon attack surface") says that group grants
  root-level privileges on the host: on a Docker host the training user can become root.
- the manifest digest: Podman's `image inspect` has `.Digest`; Docker's has `.RepoDigests`
  ("name@sha256:...").
- build: Podman finds no layer cache wanted (`--layers=false`) and never pulls (`--pull=never`); Docker's
  `build` pulls only with `--pull` and its layer cache is its own.
- the job's user inside: Podman `--userns=keep-id --group-add=keep-groups` (rootless); Docker runs as the
  user by number, `--user UID:GID` and the user's groups by number (jobs/host/runtime.py adds them).
- removing a container in any state: Podman `rm --force --ignore --time=N`; Docker `rm --force` (no
  --ignore or --time: a missing container is an error, which the caller ignores).
- the init of `run --init`: Podman's catatonit; Docker's docker-init (Debian's docker.io: tini-static).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

PODMAN = "podman"
DOCKER = "docker"
ENGINES = (PODMAN, DOCKER)


@dataclass(frozen=True)
class Engine:
    name: str
    packages: tuple[str, ...]  # the distribution's packages the role installs for it
    digest_format: str  # `image inspect --format` printing the manifest digest (a line with "sha256:")
    build_options: tuple[str, ...]  # before the role's own options
    init_paths: tuple[str, ...]  # where the init of `run --init` is looked for (verify's engine fact)
    init_package: str  # the distribution's package that has it
    ready: str  # the engine's subcommand that succeeds only when it serves this user (verify's engine fact)
    per_user_store: bool  # the training user's images are its own (a copy from root's store is needed)
    user_group: str = ""  # the group the training user joins to reach the engine ("" none)
    writes_config: bool = True  # containers.conf/storage.conf are this engine's (roles/container plan.py)

    @property
    def init_name(self) -> str:
        return self.init_paths[0].rsplit("/", 1)[1]

    def digest_command(self, image: str) -> str:
        """The shell command printing `image`'s manifest digest line. Docker lists a digest per repository
        the image was pulled from (RepoDigests): only the line of `image`'s own repository is kept."""
        q = shlex.quote(image)
        command = f"{self.name} image inspect --format {shlex.quote(self.digest_format)} {q}"
        if "RepoDigests" in self.digest_format:
            command += f" | grep -F -- {shlex.quote(repository(image) + '@')}"
        return command


def repository(image: str) -> str:
    """`registry/repo:tag` (or `...@digest`) -> `registry/repo` (a registry's port is not a tag)."""
    image = image.split("@", 1)[0]
    last = image.rsplit("/", 1)[-1]
    return image[: image.rindex(":")] if ":" in last else image


ENGINE_TABLE: dict[str, Engine] = {
    # Debian 12: podman 4.3.1 with crun, conmon, netavark; skopeo asks a registry for a tag's digest without
    # pulling; catatonit is the init of `podman run --init`.
    PODMAN: Engine(
        name=PODMAN,
        packages=("podman", "skopeo", "catatonit"),
        digest_format="{{.Digest}}",
        build_options=("--layers=false", "--pull=never"),  # one new layer (each is a full copy with vfs)
        init_paths=tuple(
            f"{d}/catatonit"
            for d in (
                "/usr/local/libexec/podman",
                "/usr/local/lib/podman",
                "/usr/libexec/podman",
                "/usr/lib/podman",
            )
        ),
        init_package="catatonit",
        ready="info --format '{{.Host.Security.Rootless}}'",  # rootless: needs a user namespace of its own
        per_user_store=True,
    ),
    # The host's own Docker: only skopeo is installed (the registry's digest, read as for Podman).
    DOCKER: Engine(
        name=DOCKER,
        packages=("skopeo",),
        digest_format="{{range .RepoDigests}}{{println .}}{{end}}",
        build_options=(),
        init_paths=("/usr/bin/docker-init", "/usr/libexec/docker/docker-init", "/usr/local/bin/docker-init"),
        init_package="tini",  # docker.io depends on it: /usr/bin/docker-init is its tini-static
        # not `info`: it answers a missing daemon with a template error; `version` says "Cannot connect"
        ready="version --format '{{.Server.Version}}'",
        per_user_store=False,
        user_group="docker",
        writes_config=False,
    ),
}


def engine(name: str) -> Engine:
    """The table's row of `name` (ValueError naming the engines for another)."""
    try:
        return ENGINE_TABLE[name]
    except KeyError:
        raise ValueError(
            f"container_engine is {name!r}; one of {', '.join(ENGINES)} (or empty: the host's)"
        ) from None


def choose(setting: str, has_podman: bool, has_docker: bool) -> Engine:
    """`container_engine` as set, else the host's: Podman where installed, Docker where the host has it
    (and no Podman), else Podman (the role installs it)."""
    if setting:
        return engine(setting)
    if not has_podman and has_docker:
        return ENGINE_TABLE[DOCKER]
    return ENGINE_TABLE[PODMAN]


def digest_of(lines: list[str]) -> str | None:
    """The manifest digest in `image inspect` output: Podman's `sha256:...` line or Docker's first
    `name@sha256:...`."""
    for line in lines:
        text = line.strip()
        if text.startswith("sha256:"):
            return text
        if "@sha256:" in text:
            return text.rsplit("@", 1)[1]
    return None
