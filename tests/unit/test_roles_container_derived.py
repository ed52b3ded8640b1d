"""roles/container: the derived training image (lock lines -> Containerfile and build, its key), the lab's
image pins beside the locks (record once, refuse another digest naming both), the image facts."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from radeonlab.roles.container import derived, pins, plan
from radeonlab.roles.container.defaults import DEFAULTS
from radeonlab.roles.container.facts import ImagePython, LocalImage
from radeonlab.roles.python_stack import lock as stack_lock

BASE = "127.0.0.1:5000/rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"
DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
H = "c" * 64
LOCK = stack_lock.parse_lock(
    "\n".join(
        [
            "# radeonlab lock: amd-rocm10.1-py3.11-torch2.14.0-lf0.9.5",
            f"torch==2.14.0+rocm10.1.0 --hash=sha256:{H}  # url: http://x/torch.whl",
            f"rocm==10.1.0 --hash=sha256:{H}",
            f"rocm-sdk-core==10.1.0 --hash=sha256:{H}",
            f"torchaudio==2.11.0 --hash=sha256:{H}",
            f"peft==0.17.1 --hash=sha256:{H}  # url: http://x/peft.whl",
            f"llamafactory==0.9.5 --hash=sha256:{H}  # url: http://x/lf.whl",
            f"amd-torch-device-gfx1100==2.14.0+rocm10.1.0 --hash=sha256:{H}  # target: gfx1100",
            f"tensorboard==2.21.0 --hash=sha256:{H}  # extras: tensorboard",
        ]
    ),
    "amd-rocm10.1-py3.11-torch2.14.0-lf0.9.5",
)
PROVIDES = DEFAULTS["container_image_provides"]


def test_the_image_installs_the_locks_common_lines_minus_what_the_image_brings() -> None:
    names = [p.name for p in derived.install_pins(LOCK, [], PROVIDES)]
    assert names == ["peft", "llamafactory"]  # no torch, torchaudio, rocm, rocm-sdk-*, device lines
    with_extra = [p.name for p in derived.install_pins(LOCK, ["tensorboard"], PROVIDES)]
    assert with_extra == ["peft", "llamafactory", "tensorboard"]
    assert "torch" in [p.name for p in derived.install_pins(LOCK, [], [])]  # the setting decides


def test_the_key_changes_with_the_base_digest_or_a_lock_line_and_only_then() -> None:
    lines = derived.install_pins(LOCK, [], PROVIDES)
    key = derived.image_key(DIGEST, lines)
    assert key == derived.image_key(DIGEST, list(lines)) and len(key) == 12
    assert derived.image_key(OTHER, lines) != key
    moved = [dataclasses.replace(lines[0], version="0.17.2"), *lines[1:]]
    assert derived.image_key(DIGEST, moved) != key
    assert derived.image_key(DIGEST, [dataclasses.replace(p, url="") for p in lines]) == key  # where from


def test_containerfile_builds_from_the_pulled_digest_and_installs_with_hashes() -> None:
    base = derived.base_reference(BASE, DIGEST)
    assert base == f"127.0.0.1:5000/rocm/pytorch@{DIGEST}"  # the registry's port is not a tag
    assert derived.base_reference("docker.io/rocm/pytorch", DIGEST) == f"docker.io/rocm/pytorch@{DIGEST}"
    text = derived.containerfile(base, ["--index-url", "http://idx/simple"])
    lines = text.splitlines()
    assert f"FROM {base}" in lines and f"COPY requirements.txt {derived.REQUIREMENTS}" in lines
    run = next(line for line in lines if line.startswith("RUN "))
    words = shlex.split(run.removeprefix("RUN "))
    assert words[:4] == ["PIP_BREAK_SYSTEM_PACKAGES=1", "python3", "-m", "pip"]
    assert {"--require-hashes", "--no-deps"} <= set(words) and words[-2:] == ["-r", derived.REQUIREMENTS]
    assert words[words.index("--index-url") + 1] == "http://idx/simple"


def test_build_command_tags_the_key_and_current_with_the_labels() -> None:
    labels = {"image": "localhost/radeonlab/train:k", "base.digest": DIGEST}
    command = derived.build_command(
        "/b/k", "localhost/radeonlab/train", "k", labels, "host", ["--isolation=chroot"]
    )
    build, _, prune = command.partition(" && ")
    words = shlex.split(build)
    assert words[:4] == ["podman", "build", "--layers=false", "--pull=never"]
    assert words[words.index("--network") + 1] == "host" and "--isolation=chroot" in words
    assert f"--label=radeonlab.base.digest={DIGEST}" in words
    tags = [words[i + 1] for i, w in enumerate(words) if w == "-t"]
    assert tags == ["localhost/radeonlab/train:k", "localhost/radeonlab/train:current"]
    assert words[-3:] == ["-f", "/b/k/Containerfile", "/b/k"]
    assert "podman rmi" in prune and "|| true" in prune  # older builds go; one in use stays
    assert "--network" not in derived.build_command("/b", "n", "k", {}, "", [])


def test_lab_pin_is_recorded_once_and_never_rewritten(tmp_path: Path) -> None:
    path = pins.pins_path(tmp_path / "locks")
    assert pins.pinned(path, BASE, "") == ("", "")  # no file yet: no pin
    assert pins.record(path, BASE, DIGEST) is True
    assert pins.parse(path.read_text()) == {BASE: DIGEST}
    assert pins.record(path, BASE, OTHER) is False  # a deploy never moves a pin
    digest, source = pins.pinned(path, BASE, "")
    assert digest == DIGEST and str(path) in source
    assert pins.pinned(path, BASE, OTHER) == (OTHER, "container_image_digest")  # the inventory wins
    path.write_text(path.read_text() + "oops\n")
    with pytest.raises(ValueError, match="line 4"):
        pins.read(path)


def test_a_registry_serving_another_digest_than_the_lab_pin_is_refused_naming_both(tmp_path: Path) -> None:
    path = pins.pins_path(tmp_path)
    pins.record(path, BASE, DIGEST)
    digest, source = pins.pinned(path, BASE, "")
    with pytest.raises(plan.DigestMismatch) as exc:
        plan.pull_command(BASE, digest, DIGEST, OTHER, source)
    said = str(exc.value)
    assert DIGEST in said and OTHER in said and str(path) in said
    command = plan.pull_command(BASE, digest, None, None, source)  # first pull on a host: checked itself
    assert command is not None and str(path) in command


def test_image_facts_read_podmans_answers() -> None:
    inspect = [
        {"Digest": DIGEST, "RepoTags": ["localhost/radeonlab/train:k"], "Labels": {"radeonlab.key": "k"}}
    ]
    found = LocalImage().process(json.dumps(inspect, indent=1).splitlines())
    assert found == {
        "digest": DIGEST,
        "tags": ["localhost/radeonlab/train:k"],
        "labels": {"radeonlab.key": "k"},
    }
    assert LocalImage().process([]) is None and LocalImage().process(["[]"]) is None
    assert ImagePython().process(["python 3.12"]) == "3.12"
    assert ImagePython().process([]) is None
    assert "--network host" in ImagePython().command(BASE, "host")
