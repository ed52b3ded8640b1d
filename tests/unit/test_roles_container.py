"""roles/container: settings -> engine config files; facts (image digests) -> the pull, or a refusal."""

from __future__ import annotations

import os
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from radeonlab.roles.container import images, plan
from radeonlab.roles.container.defaults import DEFAULTS
from radeonlab.roles.container.facts import LocalImageDigest, RegistryDigest
from radeonlab.roles.verify.facts import CHECK_SCRIPT, StackReport

IMAGE = "127.0.0.1:5000/rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"
PINNED = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
SANDBOX = {  # what the test bed passes through inventory data (tests/e2e/test_container_e2e.py)
    "container_storage_driver": "vfs",
    "container_cgroups": "disabled",
    "container_netns": "host",
    "container_insecure_registries": ["127.0.0.1:5000"],
}


def test_defaults_leave_the_distributions_engine_config_alone() -> None:
    files = plan.engine_files(dict(DEFAULTS))
    assert plan.STORAGE_CONF not in files  # storage.conf has no drop-ins: only written when asked
    for text in files.values():
        assert tomllib.loads(text) == {}


def test_sandbox_settings_become_the_engine_config_the_spike_needed() -> None:
    files = {path: tomllib.loads(text) for path, text in plan.engine_files({**DEFAULTS, **SANDBOX}).items()}
    assert files[plan.STORAGE_CONF]["storage"]["driver"] == "vfs"
    assert files[plan.CONTAINERS_CONF] == {"containers": {"cgroups": "disabled", "netns": "host"}}
    assert files[plan.REGISTRIES_CONF] == {"registry": [{"location": "127.0.0.1:5000", "insecure": True}]}


def test_digest_facts_take_the_digest_line_only() -> None:
    assert LocalImageDigest().process([PINNED]) == PINNED
    assert LocalImageDigest().process([]) is None  # no podman yet, or no such image
    assert RegistryDigest().process(["", OTHER]) == OTHER
    assert "skopeo inspect --no-tags" in RegistryDigest().command(IMAGE)  # no tag list: one manifest
    assert "docker://" + IMAGE in RegistryDigest().command(IMAGE)


def test_the_pinned_image_on_the_host_pulls_nothing() -> None:
    assert plan.pull_command(IMAGE, PINNED, PINNED, PINNED) is None
    assert plan.pull_command(IMAGE, PINNED, PINNED, None) is None  # registry unreachable: the host has it
    assert plan.pull_command(IMAGE, "", OTHER, None) is None  # no pin: the image pulled once is kept


def test_registry_serving_another_digest_is_refused_naming_both() -> None:
    with pytest.raises(plan.DigestMismatch) as exc:
        plan.pull_command(IMAGE, PINNED, PINNED, OTHER)  # even with the pinned image on the host
    assert PINNED in str(exc.value) and OTHER in str(exc.value) and IMAGE in str(exc.value)


def _run_with_fake_podman(tmp_path: Path, command: str, digest: str) -> subprocess.CompletedProcess[str]:
    """Run the pull command with a stand-in `podman` that 'pulls' an image of `digest` and logs its calls."""
    fake = tmp_path / "podman"
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n[ "$1 $2" = "image inspect" ] && echo {digest}\nexit 0\n'
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)


def test_pull_checks_the_pulled_digest_and_removes_another_image(tmp_path: Path) -> None:
    command = plan.pull_command(IMAGE, PINNED, None, None)  # first deploy: skopeo not there to ask
    assert command is not None
    done = _run_with_fake_podman(tmp_path, command, OTHER)
    assert done.returncode == 1
    assert PINNED in done.stderr and OTHER in done.stderr
    assert f"rmi {IMAGE}" in (tmp_path / "calls").read_text()


def test_pull_of_the_pinned_digest_succeeds(tmp_path: Path) -> None:
    command = plan.pull_command(IMAGE, PINNED, OTHER, PINNED)  # the host has an old image: pull again
    assert command is not None
    done = _run_with_fake_podman(tmp_path, command, PINNED)
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == f"pull --quiet {IMAGE}" and not any(c.startswith("rmi") for c in calls)


def test_unpinned_pull_is_the_plain_pull() -> None:
    assert plan.pull_command(IMAGE, "", None, None) == f"podman pull --quiet {IMAGE} >/dev/null"


def test_amd_images_table_is_named_as_amd_names_its_images() -> None:
    """The product's table of AMD's images (images.py) against AMD's documents as the test bed keeps them
    (sandbox/amdworld/containers.yaml), not itself: every row a tag AMD's data lists, every tag a row."""
    amd = yaml.safe_load(
        (Path(__file__).parents[2] / "src/radeonlab/sandbox/amdworld/containers.yaml").read_text()
    )
    names = {f"{amd['registry']}/{amd['repository']}:{amd['tag_shape'].format(**t)}" for t in amd["tags"]}
    assert {i.reference for i in images.AMD_IMAGES} == names
    assert DEFAULTS["container_image"] == ""  # the stack's, from the table


def test_default_image_follows_the_stacks_rocm_and_torch() -> None:
    tag = "docker.io/rocm/pytorch:rocm{}_ubuntu24.04_py3.12_pytorch_release_{}"
    assert images.default_image("7.2.4", "2.9.1") == tag.format("7.2.4", "2.9.1")
    assert images.default_image("7.2.3", "2.10.0") == tag.format("7.2.3", "2.10.0")
    # a series picks its newest release with that torch; a local version label is not the public version
    assert images.default_image("7.2", "2.10.0+rocm7.2.4") == tag.format("7.2.4", "2.10.0")
    with pytest.raises(ValueError, match="ROCm 10.1 with torch 2.14.0") as exc:
        images.default_image("10.1", "2.14.0")  # the product's default stack: no image of AMD's known
    assert "container_image" in str(exc.value)


def _one_word(option: str) -> str:
    """AMD writes `--group-add video`; the setting keeps one argv word each: `--group-add=video`."""
    return option.replace(" ", "=", 1)


def test_run_options_are_the_ones_amd_documents_for_rocm_containers() -> None:
    """The product's copy against AMD's documents as the test bed records them (amdworld/containers.yaml)."""
    amd = yaml.safe_load(
        (Path(__file__).parents[2] / "src/radeonlab/sandbox/amdworld/containers.yaml").read_text()
    )
    options = DEFAULTS["container_run_options"]
    # all of AMD's but the shared-memory size, which Podman refuses beside --ipc=host (defaults.py)
    assert {_one_word(o) for o in amd["run_options"]} - set(options) == {"--shm-size=8G"}
    assert "--ipc=host" in options
    assert "--group-add=render" in options  # /dev/dri/renderD* is group render's (udev)
    assert all(" " not in o for o in options)


def test_run_options_become_the_podman_run_of_the_stack_check() -> None:
    prefix = plan.run_prefix(IMAGE, ["--device=/dev/kfd", "--group-add=video", "--shm-size=8G"])
    assert prefix == f"podman run --rm --device=/dev/kfd --group-add=video --shm-size=8G {IMAGE}"
    command = StackReport().command(python="python3", user="lab", matmul_size=64, container=prefix)
    words = shlex.split(command)
    assert words[: len(shlex.split(prefix))] == shlex.split(prefix)  # as root, not in the user's login
    assert words[-4:] == ["python3", "-c", CHECK_SCRIPT, "64"]
    venv = StackReport().command(python="/opt/v/bin/python", user="lab", matmul_size=64)
    assert venv.startswith("runuser -l lab") and "podman" not in venv


def test_an_option_with_a_space_stays_one_word() -> None:
    prefix = plan.run_prefix(IMAGE, ["--security-opt=label=disable x"])
    assert shlex.split(prefix)[3] == "--security-opt=label=disable x"
