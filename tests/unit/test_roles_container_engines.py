"""roles/container engines.py: Podman, or Docker where the host has it. Settings and facts -> the engine,
its commands and the job's container command. Docker is not run here (no test bed host can run a Docker
daemon; docs/guide/runtimes.md says what was run by hand against a real one); its commands run against a
stand-in `docker` that answers as dockerd 20.10 did there (RepoDigests lines), and the image inspect shape
is the one that dockerd printed, written here, not recorded."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from radeonlab.contract.records import HostRecord
from radeonlab.jobs.host.runtime import Runtime
from radeonlab.roles.container import derived, engines, plan
from radeonlab.roles.container.defaults import DEFAULTS
from radeonlab.roles.container.facts import ImagePython, LocalImage, LocalImageDigest
from radeonlab.roles.verify.facts import UserEngine
from radeonlab.roles.verify.record import job_container_command

IMAGE = "127.0.0.1:5000/rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"
PINNED = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
DOCKER = engines.ENGINE_TABLE["docker"]
PODMAN = engines.ENGINE_TABLE["podman"]


def test_the_engine_is_the_setting_else_the_hosts_podman_first() -> None:
    assert engines.choose("", has_podman=False, has_docker=False).name == "podman"  # installed by the role
    assert engines.choose("", has_podman=False, has_docker=True).name == "docker"  # the host's Docker
    assert engines.choose("", has_podman=True, has_docker=True).name == "podman"  # a host that had Podman
    assert engines.choose("docker", has_podman=True, has_docker=False).name == "docker"  # as set
    with pytest.raises(ValueError, match="container_engine is 'moby'; one of podman, docker"):
        engines.choose("moby", has_podman=True, has_docker=True)
    assert DEFAULTS["container_engine"] == "" and DEFAULTS["container_packages"] == []


def test_podman_is_installed_docker_only_used() -> None:
    assert PODMAN.packages == ("podman", "skopeo", "catatonit")
    assert DOCKER.packages == ("skopeo",)  # the registry's digest; Docker itself is the host's
    assert DOCKER.user_group == "docker" and not DOCKER.per_user_store
    assert PODMAN.per_user_store and not PODMAN.user_group


def test_docker_gets_only_skopeos_registries_conf() -> None:
    data = {
        **DEFAULTS,
        "container_storage_driver": "vfs",
        "container_insecure_registries": ["127.0.0.1:5000"],
    }
    assert set(plan.engine_files(data, DOCKER)) == {plan.REGISTRIES_CONF}
    assert set(plan.engine_files(data, PODMAN)) == {
        plan.REGISTRIES_CONF,
        plan.CONTAINERS_CONF,
        plan.STORAGE_CONF,
    }


def test_the_digest_is_podmans_line_or_after_dockers_at() -> None:
    assert engines.digest_of([PINNED]) == PINNED
    assert engines.digest_of(["", f"127.0.0.1:5000/rocm/pytorch@{OTHER}"]) == OTHER
    assert engines.digest_of([]) is None
    assert "--format '{{range .RepoDigests}}{{println .}}{{end}}'" in LocalImageDigest().command(
        IMAGE, "docker"
    )
    assert LocalImageDigest().command(IMAGE).startswith("command -v podman")


def test_the_repository_of_an_image_keeps_a_registrys_port() -> None:
    assert engines.repository(IMAGE) == "127.0.0.1:5000/rocm/pytorch"
    assert engines.repository(f"127.0.0.1:5000/rocm/pytorch@{PINNED}") == "127.0.0.1:5000/rocm/pytorch"
    assert engines.repository("localhost/radeonlab/train") == "localhost/radeonlab/train"
    assert derived.base_reference(IMAGE, PINNED) == f"127.0.0.1:5000/rocm/pytorch@{PINNED}"
    docker = LocalImageDigest().command(IMAGE, "docker")
    assert "| grep -F -- 127.0.0.1:5000/rocm/pytorch@" in docker  # its own repository's line only
    assert "grep" not in LocalImageDigest().command(IMAGE)  # Podman's .Digest is the image's own


def test_dockers_image_inspect_gives_digest_tags_and_labels() -> None:
    """Docker's `image inspect` shape (its reference): RepoDigests, RepoTags, the labels under Config."""
    docker = [{"Id": "sha256:" + "c" * 64, "RepoTags": ["localhost/radeonlab/train:current"],
               "RepoDigests": [f"127.0.0.1:5000/rocm/pytorch@{PINNED}"],
               "Config": {"Labels": {"radeonlab.key": "abc"}}}]  # fmt: skip
    found = LocalImage().process(json.dumps(docker, indent=1).splitlines())
    assert found == {
        "digest": PINNED,
        "tags": ["localhost/radeonlab/train:current"],
        "labels": {"radeonlab.key": "abc"},
    }
    built = [{"Id": "x", "RepoTags": ["t:1"], "RepoDigests": [], "Config": {"Labels": None}}]  # built here
    assert LocalImage().process([json.dumps(built)]) == {"digest": "", "tags": ["t:1"], "labels": {}}
    assert ImagePython().command(IMAGE, engine="docker").startswith(f"docker run --rm {IMAGE} python3")


def _run_with_fake(
    tmp_path: Path, engine: str, command: str, inspect: str
) -> subprocess.CompletedProcess[str]:
    """Run `command` with a stand-in `engine` that 'pulls' and answers `image inspect` with `inspect`."""
    fake = tmp_path / engine
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n'
        f'[ "$1 $2" = "image inspect" ] && echo \'{inspect}\'\nexit 0\n'
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)


@pytest.mark.parametrize(("served", "ok"), [(PINNED, True), (OTHER, False)])
def test_docker_pull_checks_the_repo_digest_against_the_pin(tmp_path: Path, served: str, ok: bool) -> None:
    command = plan.pull_command(IMAGE, PINNED, None, None, engine=DOCKER)
    assert command is not None and command.startswith(f"docker pull --quiet {IMAGE}")
    # the same image pulled under another name too: Docker lists that repository's digest first
    other_repo = f"mirror.lan/rocm/pytorch@{PINNED if served == OTHER else OTHER}"
    done = _run_with_fake(tmp_path, "docker", command, f"{other_repo}\n127.0.0.1:5000/rocm/pytorch@{served}")
    assert (done.returncode == 0) is ok, done.stderr
    calls = (tmp_path / "calls").read_text()
    assert (f"rmi {IMAGE}" in calls) is not ok  # another image under the tag is removed again
    if not ok:
        assert PINNED in done.stderr and OTHER in done.stderr


def test_docker_builds_without_podmans_options_and_prunes_with_docker() -> None:
    command = derived.build_command(
        "/ctx", "localhost/radeonlab/train", "k1", {"key": "k1"}, "host", [], DOCKER
    )
    assert command.startswith("docker build --network host --label=radeonlab.key=k1 ")
    assert "--layers" not in command and "--pull" not in command and "podman" not in command
    assert "-f /ctx/Containerfile /ctx" in command and "xargs -r docker rmi" in command
    podman = derived.build_command("/ctx", "n", "k1", {}, "", [])
    assert podman.startswith("podman build --layers=false --pull=never ")


def test_a_docker_job_runs_as_the_user_and_its_groups_by_number(tmp_path: Path) -> None:
    amd = ["--device=/dev/kfd", "--device=/dev/dri", "--group-add=video", "--group-add=render", "--ipc=host"]
    command = job_container_command(amd, "docker")
    assert command == ["docker", "run", "--device=/dev/kfd", "--device=/dev/dri", "--ipc=host"]
    record = HostRecord.from_dict(
        {"host": "ws1", "user": "lab", "venv": "/home/lab/venv", "jobs_dir": str(tmp_path),
         "runtime": "container", "image": "localhost/radeonlab/train:k1", "image_digest": PINNED,
         "container_command": command}
    )  # fmt: skip
    where = Runtime.of(record, record.venv)
    argv, _ = where.command_for(
        ["python3", "-V"], {"A": "1"}, name="radeonlab-j-1", workdir=str(tmp_path), base={}
    )
    groups = sorted(set(os.getgroups()) - {os.getgid()})
    assert f"--user={os.getuid()}:{os.getgid()}" in argv
    assert [a for a in argv if a.startswith("--group-add")] == [f"--group-add={g}" for g in groups]
    assert argv[-3:] == ["localhost/radeonlab/train:k1", "python3", "-V"]
    assert where.stop_command("radeonlab-j-1") == ["docker", "rm", "--force", "radeonlab-j-1"]
    assert where.signal_command("radeonlab-j-1", 15) == ["docker", "kill", "--signal=15", "radeonlab-j-1"]
    podman = Runtime.of(
        HostRecord.from_dict({**record.to_dict(), "container_command": ["podman", "run"]}), ""
    )
    assert podman.user_options() == []  # keep-id and keep-groups are in Podman's command already


def test_the_users_engine_fact_asks_each_engine_and_names_its_init() -> None:
    docker = UserEngine().command(engine="docker")
    assert "docker version --format '{{.Server.Version}}'" in docker and "/usr/bin/docker-init" in docker
    assert "no docker-init, the init of docker run --init (install tini)" in docker
    podman = UserEngine().command()
    assert "podman info --format '{{.Host.Security.Rootless}}'" in podman
    assert "/usr/lib/podman/catatonit" in podman and "(install catatonit)" in podman
    assert UserEngine().process(["failed", "permission denied ... docker.sock"]) == {
        "ok": False,
        "error": "permission denied ... docker.sock",
    }
