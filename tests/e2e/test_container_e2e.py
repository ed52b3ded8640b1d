"""End to end: `radeonlab_runtime: container` on a sandbox host (SIMULATED workstation, registry and image).

deploy/setup.py with the container runtime installs Podman from Debian's archive, writes the engine config
the test bed passes as inventory data (sandbox/containerlab.py), and pulls the SIMULATED rocm/pytorch image
(sandbox/ociimage.py, named from amdworld/containers.yaml) from the SIMULATED registry on loopback
(sandbox/registry.py), pinned by digest, then verify runs the stack check in the image with AMD's run
options (stand-in /dev/kfd and /dev/dri nodes passed with --device). What it cannot show: AMD's real
image, a real GPU in a container.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator

import pytest

from radeonlab.sandbox import containerlab, ociimage, provision, registry
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from tests.support.provisioned import run_deploy

pytestmark = pytest.mark.sandbox


@pytest.fixture
def served(sandbox: Sandbox) -> Iterator[registry.Registry]:
    """The SIMULATED registry, and the SIMULATED AMD apt repository and wheel index the deploy reads."""
    with registry.serve() as reg, provision.serving(sandbox):
        yield reg


def _digest(host: SandboxHost, ref: str) -> str:
    return host.exec(f"podman image inspect --format '{{{{.Digest}}}}' {shlex.quote(ref)}").stdout.strip()


def test_container_runtime_pulls_the_pinned_image_once_and_refuses_another(
    sandbox: Sandbox, make_host: Callable[..., SandboxHost], served: registry.Registry
) -> None:
    image = ociimage.ensure_image(sandbox.cache_dir)
    other = ociimage.ensure_image(sandbox.cache_dir, variant="moved")  # same name and tag, another image
    assert image.tag == "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"  # AMD's tag shape, from the data
    assert other.digest != image.digest
    ref = served.push(image)
    host = make_host(
        card="rx7900xtx",
        data={
            "radeonlab_runtime": "container",
            "container_image": ref,
            "container_image_digest": image.digest,
            **containerlab.engine_data(served.address),
            # The SIMULATED torch has no torch.version.hip: a CPU build to verify, as the venv's stand-in.
            "python_stack_allow_cpu_torch": True,
        },
    )
    containerlab.stub_cgroup_fs(host)
    layers = json.loads((image.blobs / "sha256" / image.digest.split(":")[1]).read_bytes())["layers"]

    first = run_deploy(sandbox, [host])
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
    changed = first.changed_ops(host.name)
    assert any(op.endswith(f"| Pull {ref} ({image.digest})") for op in changed), changed
    assert _digest(host, ref) == image.digest
    run = host.exec(f"podman run --rm {shlex.quote(ref)} python3 -c 'import torch; print(torch.__version__)'")
    assert run.stdout.strip() == image.torch_version == "2.9.1+rocm7.2.4"
    # verify ran the stack check inside the container, with AMD's run options, and wrote the host record
    said = first.stdout + first.stderr
    assert f"stack check in the container {ref}@{image.digest}: torch 2.9.1+rocm7.2.4" in said, said[-3000:]
    record = json.loads(host.exec("cat /etc/radeonlab/host.json").stdout)
    assert (record["runtime"], record["image"], record["image_digest"]) == ("container", ref, image.digest)
    assert record["torch"]["version"] == "2.9.1+rocm7.2.4" and record["problem"] is None
    report = json.loads(host.exec("cat /etc/radeonlab/stack-check.json").stdout)["report"]
    assert report["user"] == "root" and "torch" not in host.exec("ls /usr/lib/python3/dist-packages").stdout

    again = run_deploy(sandbox, [host])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.changed_ops(host.name) == []
    assert {served.blob_gets.get(layer["digest"]) for layer in layers} == {1}  # pulled once

    served.push(other)  # another image under the pinned tag
    refused = run_deploy(sandbox, [host])
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert image.digest in said and other.digest in said, said[-3000:]
    assert _digest(host, ref) == image.digest  # the host keeps the pinned image
