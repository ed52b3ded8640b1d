"""End to end: jobs on a `radeonlab_runtime: container` sandbox host (SIMULATED workstation, registry and
image), through the `radeonlab` CLI as a user types it.

ONE container host for the module, provisioned by deploy/setup.py with the container runtime (Podman from
Debian's archive, the SIMULATED image from the SIMULATED registry on loopback, the training image built on
the host). The launcher and supervisor run on the host's system python3; every attempt runs in the image as
the training user's rootless container, the job folder and model cache mounted at the same paths. What it
cannot show: AMD's real image, a real GPU in a container.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.ssh import hostcode
from radeonlab.sandbox import containerlab, ociimage, provision, registry
from radeonlab.sandbox.demo import write_job_folder, write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from tests.support.provisioned import run_deploy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST = "ctr1"
VENV_HOST = "ctrv1"
JOBS_DIR = "/home/lab/radeonlab/jobs"
DEMO_STEPS = 30


@dataclass
class Lab:
    sandbox: Sandbox
    host: SandboxHost
    work: Path
    env: dict[str, str]
    record: dict


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    image = ociimage.ensure_image(sandbox.cache_dir)
    work = tmp_path_factory.mktemp("ctrjobs")
    shared = {"python_stack_lock_dir": str(work / "locks")}  # the lab's lock folder of this module alone
    made: list[str] = []
    with registry.serve() as served, provision.serving(sandbox):
        ref = served.push(image)
        try:
            # a venv host of the same stack writes the lab's hash lock, which the training image installs
            venv_host = sandbox.create_host(VENV_HOST, card="rx7900xtx", data=shared)
            made.append(VENV_HOST)
            t0 = time.monotonic()
            done = run_deploy(sandbox, [venv_host])
            assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
            print(f"\nprovisioned {VENV_HOST} (venv) in {time.monotonic() - t0:.1f}s")
            host = sandbox.create_host(
                HOST,
                card="rx7900xtx",
                data={
                    **shared,
                    "radeonlab_runtime": "container",
                    "container_image": ref,  # the lab's pin holds its digest
                    **containerlab.engine_data(served.address),
                    "python_stack_allow_cpu_torch": True,  # the SIMULATED torch is a CPU build
                },
            )
            made.append(HOST)
            containerlab.stub_cgroup_fs(host)
            t0 = time.monotonic()
            done = run_deploy(sandbox, [host])
            print(f"provisioned {HOST} (container runtime) in {time.monotonic() - t0:.1f}s")
            assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
            record = json.loads(host.exec("cat /etc/radeonlab/host.json").stdout)
            env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
            yield Lab(sandbox, host, work, env, record)
        finally:
            for name in made:
                sandbox.destroy_host(name)


def cli(lab: Lab, *args: str):
    return CliRunner().invoke(main, [args[0], *args[1:]], env=lab.env, catch_exceptions=False)


def submit(lab: Lab, spec: Path) -> str:
    result = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST)
    assert result.exit_code == 0, result.output
    return re.search(r"submitted (\S+) to", result.stdout).group(1)  # type: ignore[union-attr]


def job_json(lab: Lab, job_id: str) -> dict:
    return json.loads(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/job.json"]).stdout)


def test_the_record_says_how_the_training_user_starts_the_image(lab: Lab) -> None:
    record = lab.record
    assert record["runtime"] == "container" and record["problem"] is None, record
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


# Not passed yet: in the SIMULATED training image LLaMA-Factory fails at import (`No module named
# 'torchaudio'`: AMD's image has it, the SIMULATED one not yet), and that llamafactory-cli did not exit (seen
# 2026-12-06: the watch waited until stopped). Unskip once the image carries torchaudio (ctrimg's part).
NEEDS_TORCHAUDIO = pytest.mark.skip(reason="the SIMULATED training image has no torchaudio yet")


@pytest.fixture(scope="module")
def demo_job(lab: Lab) -> dict[str, object]:
    spec = write_job_folder(lab.work / "demo", {"max_steps": DEMO_STEPS})
    t0 = time.monotonic()
    job_id = submit(lab, spec)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    took = time.monotonic() - t0
    local = lab.work / "results" / job_id
    ask = ("--try", "Uppercase the word.\\napple")
    fetched = cli(lab, "fetch", job_id, "-i", INVENTORY, "--to", str(local.parent), *ask)
    print(f"\ncontainer demo job: submit to end {took:.1f}s")
    return {"id": job_id, "watch": watched, "fetch": fetched, "local": local}


@NEEDS_TORCHAUDIO
def test_the_demo_job_trains_in_the_image_and_watch_shows_it(lab: Lab, demo_job: dict) -> None:
    watched = demo_job["watch"]
    assert watched.exit_code == 0, watched.output
    last = watched.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{demo_job['id']}: succeeded"), watched.stdout[-2000:]
    assert re.search(r"step\s+\d+/" + str(DEMO_STEPS), watched.stdout) or "loss" in watched.stdout
    job = job_json(lab, demo_job["id"])
    assert (job["runtime"], job["image"], job["image_digest"]) == (
        "container", lab.record["image"], lab.record["image_digest"],
    )  # fmt: skip
    # the adapter was written by the container as the training user (keep-id), in the mounted job folder
    owner = lab.host.exec(
        ["stat", "-c", "%U", f"{JOBS_DIR}/{demo_job['id']}/output/adapter_model.safetensors"]
    )
    assert owner.stdout.strip() == "lab"
    # no container is left behind
    left = lab.host.exec(["runuser", "-l", "lab", "-c", "podman ps -a --format '{{.Names}}'"]).stdout
    assert demo_job["id"] not in left
    shown = cli(lab, "status", demo_job["id"], "-i", INVENTORY)
    assert f"ran in the container image {lab.record['image']} @ {lab.record['image_digest']}" in shown.stdout


@NEEDS_TORCHAUDIO
def test_fetch_brings_the_adapter_and_it_answers_in_the_image(lab: Lab, demo_job: dict) -> None:
    fetched = demo_job["fetch"]
    assert fetched.exit_code == 0, fetched.output
    assert (demo_job["local"] / "output" / "adapter_model.safetensors").stat().st_size > 0
    assert "adapter's answer: " in fetched.stdout, fetched.stdout[-2000:]
    chat = cli(lab, "chat", demo_job["id"], "-i", INVENTORY, "--prompt", "apple", "--max-new-tokens", "4")
    assert chat.exit_code == 0, chat.output


@NEEDS_TORCHAUDIO
def test_the_nan_ladder_works_in_the_image(lab: Lab) -> None:
    nan = {"max_steps": 12, "save_steps": 2, "learning_rate": "1.0e+30"}
    spec = write_spec(lab.work / "demo", nan, name="nan.yaml")
    job_id = submit(lab, spec)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    assert watched.exit_code == 0, watched.output
    assert re.search(r"(?m)^attempt 2: flash_attn auto -> disabled \(NaN at step \d+\)", watched.stdout)
    job = job_json(lab, job_id)
    states = [a["state"] for a in job["attempts"]]
    assert states == ["stopped", "stopped", "succeeded"], job["attempts"]
    for a in job["attempts"][:2]:  # stopped by the supervisor's SIGTERM, passed on into the container
        assert a["exit_code"] in (128 + signal.SIGTERM, 128 + signal.SIGKILL), a
    left = lab.host.exec(["runuser", "-l", "lab", "-c", "podman ps -a --format '{{.Names}}'"]).stdout
    assert job_id not in left


@NEEDS_TORCHAUDIO
def test_cancel_stops_the_container(lab: Lab) -> None:
    spec = write_spec(lab.work / "demo", {"max_steps": 5000, "save_steps": 1000}, name="long.yaml")
    job_id = submit(lab, spec)
    name = f"radeonlab-{job_id}-1"
    deadline = time.monotonic() + 120
    running = ""
    while name not in running and time.monotonic() < deadline:
        running = lab.host.exec(["runuser", "-l", "lab", "-c", "podman ps --format '{{.Names}}'"]).stdout
        time.sleep(1)
    assert name in running
    cancelled = cli(lab, "cancel", job_id, "-i", INVENTORY)
    assert cancelled.exit_code == 0, cancelled.output
    left = lab.host.exec(["runuser", "-l", "lab", "-c", "podman ps -a --format '{{.Names}}'"]).stdout
    assert name not in left
    state = json.loads(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/state.json"]).stdout)
    assert state["state"] == "cancelled"
