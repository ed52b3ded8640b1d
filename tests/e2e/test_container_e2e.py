"""End to end: `radeonlab_runtime: container` on a sandbox host (SIMULATED workstation, registry and image).

A venv host of the same stack deploys first and writes the lab's hash lock (a container host installs from
the lab's lock and resolves none). Then deploy/setup.py with the container runtime installs Podman from
Debian's archive, writes the engine config the test bed passes as inventory data (sandbox/containerlab.py),
pulls the SIMULATED rocm/pytorch image (sandbox/ociimage.py: a CPU torch standing in, named from
amdworld/containers.yaml) from the SIMULATED registry on loopback (sandbox/registry.py), pins its digest in
the lab's container-images.txt beside the lock, builds the training image FROM it with the lock's lines
(LLaMA-Factory, peft, ...; not torch) through the SIMULATED wheel index, and verify runs the stack check in
that image with AMD's run options (stand-in /dev/kfd and /dev/dri nodes passed with --device). What it
cannot show: AMD's real image, a real GPU in a container.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from radeonlab.roles.container import derived, pins
from radeonlab.sandbox import containerlab, ociimage, provision, registry
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from tests.support.provisioned import run_deploy

pytestmark = pytest.mark.sandbox


@pytest.fixture
def served(sandbox: Sandbox) -> Iterator[registry.Registry]:
    """The SIMULATED registry, and the SIMULATED AMD apt repository and wheel index the deploy reads."""
    with registry.serve() as reg, provision.serving(sandbox):
        yield reg


def _inspect(host: SandboxHost, ref: str, what: str = "{{.Digest}}") -> str:
    return host.exec(f"podman image inspect --format {shlex.quote(what)} {shlex.quote(ref)}").stdout.strip()


def test_container_runtime_builds_the_training_image_once_and_refuses_another_base(
    sandbox: Sandbox,
    make_host: Callable[..., SandboxHost],
    served: registry.Registry,
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    image = ociimage.ensure_image(sandbox.cache_dir)
    other = ociimage.ensure_image(sandbox.cache_dir, variant="moved")  # same name and tag, another image
    print(f"\nSIMULATED images: {time.monotonic() - t0:.1f}s (cached after the first build)")
    assert image.tag == "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"  # AMD's tag shape, from the data
    assert other.digest != image.digest
    ref = served.push(image)
    locks = tmp_path / "locks"  # the lab's lock folder of this test alone
    lab = {"python_stack_lock_dir": str(locks)}

    venv_host = make_host(card="rx7900xtx", data=lab)
    made = run_deploy(sandbox, [venv_host])
    assert made.returncode == 0, made.stderr[-3000:] + made.stdout[-3000:]
    assert list(locks.glob("*.txt")), "the venv host wrote no lab lock"

    host = make_host(
        card="rx7900xtx",
        data={
            **lab,
            "radeonlab_runtime": "container",
            "container_image": ref,  # no container_image_digest: the lab's pin holds it
            **containerlab.engine_data(served.address),
            # The SIMULATED torch is a CPU build (torch.version.hip None): verify accepts it, as for the venv.
            "python_stack_allow_cpu_torch": True,
        },
    )
    containerlab.stub_cgroup_fs(host)
    layers = json.loads((image.blobs / "sha256" / image.digest.split(":")[1]).read_bytes())["layers"]

    first = run_deploy(sandbox, [host])
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
    changed = first.changed_ops(host.name)
    assert any(op.endswith(f"| Pull {ref}") for op in changed), changed
    assert any("Build the training image" in op for op in changed), changed
    assert _inspect(host, ref) == image.digest
    # the first pull pinned the digest beside the lab's lock
    assert pins.read(pins.pins_path(locks)) == {ref: image.digest}

    record = json.loads(host.exec("cat /etc/radeonlab/host.json").stdout)
    train = record["image"]
    assert train.startswith("localhost/radeonlab/train:") and not train.endswith(":current"), train
    assert (record["runtime"], record["base_image"], record["base_image_digest"]) == (
        "container",
        ref,
        image.digest,
    )
    assert record["image_digest"] == _inspect(host, train) and record["image_digest"] != image.digest
    assert record["torch"]["version"] == "2.9.1+rocm7.2.4" and record["problem"] is None
    assert record["packages"].get("llamafactory") and record["packages"].get("peft"), record["packages"]
    said = first.stdout + first.stderr
    assert f"stack check in the container {train}@{record['image_digest']}: torch 2.9.1+rocm7.2.4" in said
    t1 = time.monotonic()
    probe = (
        "import json, llamafactory, peft, torch; "
        f"print(json.dumps([torch.__version__, torch.__file__, open('{derived.REQUIREMENTS}').read()]))"
    )
    run = host.exec(f"podman run --rm {shlex.quote(train)} python3 -c {shlex.quote(probe)}", timeout=600)
    print(f"import llamafactory, peft, torch in {train}: {time.monotonic() - t1:.1f}s")
    torch_version, torch_file, requirements = json.loads(run.stdout.strip().splitlines()[-1])
    assert torch_version == "2.9.1+rocm7.2.4"  # the image's own torch, not the lock's installed over it
    assert "/dist-packages/torch/" in torch_file
    names = {re.split(r"[ =@]", line)[0] for line in requirements.splitlines() if not line.startswith("#")}
    assert {"llamafactory", "peft", "transformers"} <= names, names
    assert not names & {"torch", "torchaudio", "rocm"}, names  # what the image brings is not installed
    report = json.loads(host.exec("cat /etc/radeonlab/stack-check.json").stdout)["report"]
    assert report["user"] == "root" and "torch" not in host.exec("ls /usr/lib/python3/dist-packages").stdout
    print(f"first deploy (pull, build, verify): {first.seconds:.1f}s")
    print(
        host.exec(
            "podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}'; du -sh /var/lib/containers"
        ).stdout
    )

    again = run_deploy(sandbox, [host])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.changed_ops(host.name) == []
    assert {served.blob_gets.get(layer["digest"]) for layer in layers} == {1}  # pulled once
    assert json.loads(host.exec("cat /etc/radeonlab/host.json").stdout)["image"] == train  # not rebuilt
    print(f"no-op re-run: {again.seconds:.1f}s")

    served.push(other)  # another image under the pinned tag
    refused = run_deploy(sandbox, [host])
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert image.digest in said and other.digest in said, said[-3000:]
    assert "container-images.txt" in said  # the lab's pin is named as the reason
    assert _inspect(host, ref) == image.digest  # the host keeps the pinned image
