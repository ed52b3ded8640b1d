"""End to end: `radeonlab_runtime: container` on sandbox hosts (SIMULATED workstations, registry and image),
deployed by deploy/setup.py and used through the `radeonlab` CLI as a user types it.

ONE inventory, ONE deploy run for the module: a venv host and a container host of the same stack. The venv
host writes the lab's hash lock in that run, and the container host installs from it (it resolves none).
The container host gets Podman from Debian's archive, the engine config the test bed passes as inventory
data (sandbox/containerlab.py), the SIMULATED rocm/pytorch image (sandbox/ociimage.py: a CPU torch and
torchaudio standing in, named from amdworld/containers.yaml) pulled from the SIMULATED registry on loopback
(sandbox/registry.py), its digest pinned in the lab's container-images.txt beside the lock, and the training
image built FROM it with the lock's lines (LLaMA-Factory, peft, ...; not torch) through the SIMULATED wheel
index; verify runs the stack check in that image with AMD's run options (stand-in /dev/kfd and /dev/dri
nodes passed with --device). Jobs then run in the image as the training user's rootless container, the job
folder and model cache mounted at the same paths; the launcher and supervisor run on the host's python3.
The module ends with the no-op re-run and the refusal of another image under the pinned tag.
What it cannot show: AMD's real image, a real GPU in a container.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.ssh import hostcode
from radeonlab.roles.container import derived, pins
from radeonlab.sandbox import containerlab, ociimage, provision, registry
from radeonlab.sandbox.demo import write_job_folder, write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from tests.support.provisioned import Run, run_deploy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST = "ctr1"
VENV_HOST = "ctrv1"
GROUP = "ctrlab"  # an inventory group of these two hosts alone (the worker's sandbox may hold others)
JOBS_DIR = "/home/lab/radeonlab/jobs"
DEMO_STEPS = 30


@dataclass
class Lab:
    sandbox: Sandbox
    host: SandboxHost
    venv_host: SandboxHost
    work: Path
    env: dict[str, str]
    record: dict
    served: registry.Registry
    image: ociimage.Image
    ref: str
    locks: Path
    first: Run


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    t0 = time.monotonic()
    image = ociimage.ensure_image(sandbox.cache_dir)
    print(f"\nSIMULATED image: {time.monotonic() - t0:.1f}s (cached after the first build)")
    work = tmp_path_factory.mktemp("ctr")
    locks = work / "locks"  # the lab's lock folder of this module alone
    shared = {"python_stack_lock_dir": str(locks), "sandbox_groups": [GROUP]}
    made: list[str] = []
    with registry.serve() as served, provision.serving(sandbox):
        ref = served.push(image)
        try:
            venv_host = sandbox.create_host(VENV_HOST, card="rx7900xtx", data=shared)
            made.append(VENV_HOST)
            host = sandbox.create_host(
                HOST,
                card="rx7900xtx",
                data={
                    **shared,
                    "radeonlab_runtime": "container",
                    "container_image": ref,  # no container_image_digest: the lab's pin holds it
                    **containerlab.engine_data(served.address),
                    # The SIMULATED torch is a CPU build (torch.version.hip None): verify accepts it, as for
                    # the venv.
                    "python_stack_allow_cpu_torch": True,
                },
            )
            made.append(HOST)
            containerlab.stub_cgroup_fs(host)
            first = run_deploy(sandbox, [venv_host, host])
            print(f"provisioned {VENV_HOST} (venv) and {HOST} (container) in one run: {first.seconds:.1f}s")
            assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-3000:]
            record = json.loads(host.exec("cat /etc/radeonlab/host.json").stdout)
            env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
            yield Lab(sandbox, host, venv_host, work, env, record, served, image, ref, locks, first)
        finally:
            for name in made:
                sandbox.destroy_host(name)


def cli(lab: Lab, *args: str):
    return CliRunner().invoke(main, [args[0], *args[1:]], env=lab.env, catch_exceptions=False)


def submitted_ids(result) -> list[str]:
    assert result.exit_code == 0, result.output
    return re.findall(r"submitted (\S+) to", result.stdout)


def submit(lab: Lab, spec: Path) -> str:
    (job_id,) = submitted_ids(cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST))
    return job_id


def job_json(host: SandboxHost, job_id: str) -> dict:
    return json.loads(host.exec(["cat", f"{JOBS_DIR}/{job_id}/job.json"]).stdout)


def containers_of_lab(lab: Lab, running_only: bool = False) -> str:
    listing = "podman ps --format '{{.Names}}'" if running_only else "podman ps -a --format '{{.Names}}'"
    return lab.host.exec(["runuser", "-l", "lab", "-c", listing]).stdout


def _inspect(host: SandboxHost, ref: str, what: str = "{{.Digest}}") -> str:
    return host.exec(f"podman image inspect --format {shlex.quote(what)} {shlex.quote(ref)}").stdout.strip()


def test_one_run_provisions_a_venv_host_and_a_container_host(lab: Lab) -> None:
    host, first, image, ref = lab.host, lab.first, lab.image, lab.ref
    assert image.tag == "rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.9.1"  # AMD's tag shape, from the data
    stack_locks = [p for p in lab.locks.glob("*.txt") if p.name != pins.FILE_NAME]
    assert stack_locks, "the venv host wrote no lab lock"
    assert json.loads(lab.venv_host.exec("cat /etc/radeonlab/host.json").stdout)["runtime"] == "venv"
    changed = first.changed_ops(host.name)
    assert any(op.endswith(f"| Pull {ref}") for op in changed), changed
    assert any("Build the training image" in op for op in changed), changed
    assert _inspect(host, ref) == image.digest
    # the first pull pinned the digest beside the lab's lock
    assert pins.read(pins.pins_path(lab.locks)) == {ref: image.digest}

    record = lab.record
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
        "import json, llamafactory, peft, torch, torchaudio; "
        f"print(json.dumps([torch.__version__, torch.__file__, open('{derived.REQUIREMENTS}').read()]))"
    )
    run = host.exec(f"podman run --rm {shlex.quote(train)} python3 -c {shlex.quote(probe)}", timeout=600)
    print(f"import llamafactory, peft, torch, torchaudio in {train}: {time.monotonic() - t1:.1f}s")
    torch_version, torch_file, requirements = json.loads(run.stdout.strip().splitlines()[-1])
    assert torch_version == "2.9.1+rocm7.2.4"  # the image's own torch, not the lock's installed over it
    assert "/dist-packages/torch/" in torch_file
    names = {re.split(r"[ =@]", line)[0] for line in requirements.splitlines() if not line.startswith("#")}
    assert {"llamafactory", "peft", "transformers"} <= names, names
    assert not names & {"torch", "torchaudio", "rocm"}, names  # what the image brings is not installed
    report = json.loads(host.exec("cat /etc/radeonlab/stack-check.json").stdout)["report"]
    assert report["user"] == "root" and "torch" not in host.exec("ls /usr/lib/python3/dist-packages").stdout
    print(
        host.exec(
            "podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}'; du -sh /var/lib/containers"
        ).stdout
    )


def test_the_record_says_how_the_training_user_starts_the_image(lab: Lab) -> None:
    record = lab.record
    assert record["container_problem"] is None, record["container_problem"]
    command = record["container_command"]
    assert command[:2] == ["podman", "run"] and "--device=/dev/kfd" in command
    assert "--userns=keep-id" in command and "--group-add=keep-groups" in command
    # the training user's own (rootless) store has the image the record names, by the same image ID
    inspect = f"podman image inspect --format '{{{{.Id}}}}' {record['image']}"
    as_lab = lab.host.exec(["runuser", "-l", "lab", "-c", inspect]).stdout.strip()
    assert as_lab == lab.host.exec(inspect).stdout.strip() != ""
    assert lab.host.exec(["stat", "-c", "%U", record["jobs_dir"], record["model_cache"]]).stdout.split() == [
        "lab", "lab",
    ]  # fmt: skip


def test_the_venv_python_on_a_container_host_runs_in_the_image_as_the_user(lab: Lab) -> None:
    """<venv>/bin/python is the deploy's shim: the laptop's venv tools run by it start in the image, with
    radeonlab's host code mounted and the user's id (keep-id)."""
    record = lab.record
    for rel, data in hostcode.files().items():  # radeonlab's host code, as a tool call has it
        (lab.host.root / "tmp" / "code" / rel).parent.mkdir(parents=True, exist_ok=True)
        (lab.host.root / "tmp" / "code" / rel).write_bytes(data)
    lab.host.exec("chmod -R a+rX /tmp/code")
    probe = "import os, torch, radeonlab.jobs.host; print(torch.__version__, os.getuid(), os.getcwd())"
    ran = lab.host.exec(
        ["runuser", "-l", "lab", "-c", f"PYTHONPATH=/tmp/code {record['venv']}/bin/python -c '{probe}'"],
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    uid = lab.host.exec(["id", "-u", "lab"]).stdout.strip()
    assert ran.stdout.split() == ["2.9.1+rocm7.2.4", uid, record["jobs_dir"]], ran.stdout


@pytest.fixture(scope="module")
def demo_spec(lab: Lab) -> Path:
    """The demo's job folder (model, data, spec): the other jobs' specs are written beside it."""
    return write_job_folder(lab.work / "demo", {"max_steps": DEMO_STEPS})


@pytest.fixture(scope="module")
def demo_job(lab: Lab, demo_spec: Path) -> dict[str, object]:
    spec = demo_spec
    t0 = time.monotonic()
    job_id = submit(lab, spec)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    took = time.monotonic() - t0
    local = lab.work / "results" / job_id
    ask = ("--try", "Uppercase the word.\\napple")
    fetched = cli(lab, "fetch", job_id, "-i", INVENTORY, "--to", str(local.parent), *ask)
    print(f"\ncontainer demo job: submit to end {took:.1f}s")
    return {"id": job_id, "watch": watched, "fetch": fetched, "local": local}


def test_the_demo_job_trains_in_the_image_and_watch_shows_it(lab: Lab, demo_job: dict) -> None:
    watched = demo_job["watch"]
    assert watched.exit_code == 0, watched.output
    last = watched.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{demo_job['id']}: succeeded"), watched.stdout[-2000:]
    assert re.search(rf"step {DEMO_STEPS}/{DEMO_STEPS}  loss ", watched.stdout), watched.stdout[-2000:]
    # the panel's readings: the supervisor reads the (SIMULATED) card on the host, beside the container
    assert "VRAM" in watched.stdout and re.search(r" \d+ tok/s", watched.stdout), watched.stdout[-2000:]
    job = job_json(lab.host, demo_job["id"])
    assert (job["runtime"], job["image"], job["image_digest"]) == (
        "container", lab.record["image"], lab.record["image_digest"],
    )  # fmt: skip
    # the adapter was written by the container as the training user (keep-id), in the mounted job folder
    owner = lab.host.exec(
        ["stat", "-c", "%U", f"{JOBS_DIR}/{demo_job['id']}/output/adapter_model.safetensors"]
    )
    assert owner.stdout.strip() == "lab"
    assert demo_job["id"] not in containers_of_lab(lab)  # no container is left behind
    shown = cli(lab, "status", demo_job["id"], "-i", INVENTORY)
    assert f"ran in the container image {lab.record['image']} @ {lab.record['image_digest']}" in shown.stdout


def test_fetch_brings_the_adapter_and_it_answers_in_the_image(lab: Lab, demo_job: dict) -> None:
    fetched = demo_job["fetch"]
    assert fetched.exit_code == 0, fetched.output
    assert (demo_job["local"] / "output" / "adapter_model.safetensors").stat().st_size > 0
    assert "adapter's answer: " in fetched.stdout, fetched.stdout[-2000:]
    chat = cli(lab, "chat", demo_job["id"], "-i", INVENTORY, "--prompt", "apple", "--max-new-tokens", "4")
    assert chat.exit_code == 0, chat.output


def test_the_nan_ladder_works_in_the_image(lab: Lab, demo_spec: Path) -> None:
    nan = {"max_steps": 12, "save_steps": 2, "learning_rate": "1.0e+30"}
    spec = write_spec(demo_spec.parent, nan, name="nan.yaml")
    job_id = submit(lab, spec)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    assert watched.exit_code == 0, watched.output
    assert re.search(r"(?m)^attempt 2: flash_attn auto -> disabled \(NaN at step \d+\)", watched.stdout)
    job = job_json(lab.host, job_id)
    states = [a["state"] for a in job["attempts"]]
    assert states == ["stopped", "stopped", "succeeded"], job["attempts"]
    for a in job["attempts"][:2]:  # the supervisor's SIGTERM, through the engine to the container's init
        assert a["exit_code"] == 128 + signal.SIGTERM, a
    assert job_id not in containers_of_lab(lab)


def test_cancel_stops_the_container(lab: Lab, demo_spec: Path) -> None:
    spec = write_spec(demo_spec.parent, {"max_steps": 5000, "save_steps": 1000}, name="long.yaml")
    job_id = submit(lab, spec)
    name = f"radeonlab-{job_id}-1"
    deadline = time.monotonic() + 120
    running = ""
    while name not in running and time.monotonic() < deadline:
        running = containers_of_lab(lab, running_only=True)
        time.sleep(1)
    assert name in running
    cancelled = cli(lab, "cancel", job_id, "-i", INVENTORY)
    assert cancelled.exit_code == 0, cancelled.output
    assert name not in containers_of_lab(lab)
    state = json.loads(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/state.json"]).stdout)
    assert state["state"] == "cancelled"


def test_one_sweep_places_a_job_on_each_runtime_and_both_succeed(lab: Lab, demo_spec: Path) -> None:
    """Placement and the queue are the runtime's business no more than the venv's: a two-value sweep over the
    lab's group lands one job on the venv host and one on the container host."""
    spec = write_spec(demo_spec.parent, {"max_steps": 10}, name="sweep.yaml")
    spec.write_text(spec.read_text() + f"radeonlab:\n  placement: {{host_group: {GROUP}}}\n")
    ids = submitted_ids(cli(lab, "submit", str(spec), "-i", INVENTORY, "--sweep", "learning_rate=5e-3,1e-3"))
    assert len(ids) == 2
    hosts = {HOST: lab.host, VENV_HOST: lab.venv_host}
    placed = {}
    for job_id in ids:
        status = json.loads(cli(lab, "status", job_id, "-i", INVENTORY, "--json").stdout)
        placed[status["host"]] = job_id
    assert set(placed) == {HOST, VENV_HOST}, placed
    for host, job_id in placed.items():
        watched = cli(lab, "watch", job_id, "-i", INVENTORY)
        assert watched.exit_code == 0 and f"{job_id}: succeeded" in watched.stdout, watched.output[-2000:]
        assert job_json(hosts[host], job_id)["runtime"] == ("container" if host == HOST else "venv")


def test_a_re_run_changes_nothing(lab: Lab) -> None:
    layers = json.loads((lab.image.blobs / "sha256" / lab.image.digest.split(":")[1]).read_bytes())["layers"]
    again = run_deploy(lab.sandbox, [lab.venv_host, lab.host])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.changed_ops(lab.host.name) == [] and again.changed_ops(lab.venv_host.name) == []
    assert {lab.served.blob_gets.get(layer["digest"]) for layer in layers} == {1}  # pulled once
    assert json.loads(lab.host.exec("cat /etc/radeonlab/host.json").stdout)["image"] == lab.record["image"]
    print(f"no-op re-run (both hosts): {again.seconds:.1f}s, first {lab.first.seconds:.1f}s")


def test_another_image_under_the_pinned_tag_is_refused_naming_both_digests(lab: Lab) -> None:
    other = ociimage.ensure_image(lab.sandbox.cache_dir, variant="moved")  # same name and tag, another image
    assert other.digest != lab.image.digest
    lab.served.push(other)
    refused = run_deploy(lab.sandbox, [lab.host])
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert lab.image.digest in said and other.digest in said, said[-3000:]
    assert "container-images.txt" in said  # the lab's pin is named as the reason
    assert _inspect(lab.host, lab.ref) == lab.image.digest  # the host keeps the pinned image
