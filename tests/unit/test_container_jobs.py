"""Jobs on a container host (issue 29): the host record in, the engine's argv and environment out.

The pure half: jobs/host/runtime.py builds `podman run ... IMAGE PROGRAM` from the host record (mounts at
the same path, the environment by name only, the container's name per attempt); roles/verify turns AMD's
run options into the record's rootless command. The running half: the real Supervisor (the shipped host
code, in its own process) runs the NaN ladder through a SIMULATED engine, a small script that does what
`podman run` does with these options (only the named variables get in, the working folder, the program from
the image's PATH) and logs every call, so the test sees what a real engine would have been asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from radeonlab.contract.records import HostRecord, JobRecord
from radeonlab.jobs.host import launcher, runtime
from radeonlab.jobs.host.remedies import STEP_KEYS
from radeonlab.jobs.host.runtime import Runtime
from radeonlab.jobs.ssh import hostcode
from radeonlab.roles.verify.record import job_container_command

IMAGE = "localhost/radeonlab-train:abc"
DIGEST = "sha256:" + "d" * 64


def container_record(tmp_path: Path, **over: object) -> HostRecord:
    gpu_env = tmp_path / "radeonlab-gpu.sh"
    gpu_env.write_text(
        "# radeonlab\nexport HSA_OVERRIDE_GFX_VERSION=11.0.0\nexport PYTORCH_ROCM_ARCH=gfx1100\n"
    )
    fields: dict = {
        "host": "ws1", "user": "lab", "venv": "/home/lab/venv", "jobs_dir": "/home/lab/jobs",
        "model_cache": "/home/lab/models", "gpu_env_file": str(gpu_env), "runtime": "container",
        "image": IMAGE, "image_digest": DIGEST,
        "container_command": ["podman", "run", "--device=/dev/kfd", "--userns=keep-id"],
    }  # fmt: skip
    return HostRecord.from_dict({**fields, **over})


def test_a_venv_host_runs_the_program_itself_with_the_environment_unchanged() -> None:
    record = HostRecord(host="ws1", user="lab", venv="/v", jobs_dir="/j")
    venv = Runtime.of(record, "/v")
    assert not venv.container and venv.program("llamafactory-cli") == "/v/bin/llamafactory-cli"
    argv, env = venv.command_for(["/v/bin/llamafactory-cli", "train"], {"A": "1"}, name="x", workdir="/j/1")
    assert (argv, env) == (["/v/bin/llamafactory-cli", "train"], {"A": "1"})
    assert venv.stop_command("x") == [] and venv.job_fields()["runtime"] == "venv"


def test_a_container_attempt_mounts_the_job_and_cache_and_passes_names_not_values(tmp_path: Path) -> None:
    record = container_record(tmp_path)
    where = Runtime.of(record, record.venv)
    job_dir = tmp_path / "jobs" / "demo-1"
    job_dir.mkdir(parents=True)
    job = JobRecord.from_dict(
        {"id": "demo-1", "name": "demo", "spec_file": "d.yaml", "created_at": "t", "host": "ws1", "gpus": [0],
         "env": {"HF_HUB_CACHE": "/home/lab/models", "PLAIN": "yes"}}
    )  # fmt: skip
    login = {"PATH": "/usr/bin", "HOME": "/home/lab", "LANG": "C", "HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(login)
        env = launcher.child_env(str(job_dir), job, {"MY_TOKEN": "s3cret"}, record.venv, where)
        argv, engine_env = where.command_for(
            [where.program("llamafactory-cli"), "train", f"{job_dir}/config.yaml"],
            env,
            name=runtime.container_name(job.id, "1"),
            workdir=str(job_dir),
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert env["PATH"] == "/usr/bin"  # not the venv's: the image's PATH has llamafactory-cli
    image_at = argv.index(IMAGE)
    assert argv[:4] == ["podman", "run", "--device=/dev/kfd", "--userns=keep-id"]
    assert argv[image_at + 1 :] == ["llamafactory-cli", "train", f"{job_dir}/config.yaml"]
    opts = argv[4:image_at]
    assert "--rm" in opts and "--init" in opts  # --init: a stop signal reaches the training (not PID 1)
    assert "--name=radeonlab-demo-1-1" in opts and "--network=host" in opts
    pairs = list(zip(opts, opts[1:], strict=False))
    mounts = {b for a, b in pairs if a == "-v"}
    assert mounts == {f"{job_dir}:{job_dir}", "/home/lab/models:/home/lab/models"}  # at the same paths
    assert ("-w", str(job_dir)) in pairs and ("-e", f"HOME={job_dir}/cache/home") in pairs
    names = {b for a, b in pairs if a == "-e" and "=" not in b}
    assert {"MY_TOKEN", "PLAIN", "HF_HUB_CACHE", "HF_HOME", "HF_DATASETS_CACHE", "MPLCONFIGDIR"} <= names
    assert {"HIP_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION"} <= names  # the job's GPU, profile.d's setting
    assert not names & {"PATH", "HOME", "LANG"}  # the host's login environment is the host's
    assert "s3cret" not in " ".join(argv) and engine_env["MY_TOKEN"] == "s3cret"  # the value: env only
    assert where.stop_command("radeonlab-demo-1-1")[:3] == ["podman", "rm", "--force"]
    assert where.job_fields() == {"runtime": "container", "image": IMAGE, "image_digest": DIGEST}


def test_a_container_hosts_record_takes_jobs_only_with_an_image_and_a_command(tmp_path: Path) -> None:
    assert container_record(tmp_path).unusable() is None
    older = container_record(tmp_path, container_command=[])  # written before jobs ran in the image
    assert older.unusable() == "host record of a container host names no image or container command"
    assert container_record(tmp_path, image="").unusable() is not None
    # the training user's rootless engine does not start (verify found it): the stack is fine, jobs are not
    cannot = container_record(tmp_path, container_command=[], container_problem="lab's rootless Podman ...")
    assert cannot.unusable() == "provisioned with radeonlab_runtime: container: lab's rootless Podman ..."
    again = HostRecord.from_dict(json.loads(json.dumps(container_record(tmp_path).to_dict())))
    assert again.container_command == ["podman", "run", "--device=/dev/kfd", "--userns=keep-id"]


def test_verify_makes_amds_options_rootless_for_the_training_user() -> None:
    amd = ["--device=/dev/kfd", "--device=/dev/dri", "--group-add=video", "--group-add=render", "--ipc=host"]
    assert job_container_command(amd) == [
        "podman", "run", "--device=/dev/kfd", "--device=/dev/dri", "--ipc=host", "--userns=keep-id",
        "--group-add=keep-groups",
    ]  # fmt: skip


def test_the_job_record_names_the_runtime_only_once_the_launcher_wrote_it() -> None:
    base = {"id": "j", "name": "n", "spec_file": "s", "created_at": "t", "host": "h"}
    assert "runtime" not in JobRecord.from_dict(base).to_dict()  # an older job.json stays as it was
    ran = JobRecord.from_dict({**base, "runtime": "container", "image": IMAGE, "image_digest": DIGEST})
    assert (ran.runtime, ran.image, ran.image_digest) == ("container", IMAGE, DIGEST)
    assert ran.to_dict()["image_digest"] == DIGEST


# ---------------------------------------------------------------------- the supervisor, in a SIMULATED engine

ENGINE = f"""#!{sys.executable}
# SIMULATED podman: `run` starts the program after the image with only the -e names (from its own
# environment) and -e NAME=VALUE pairs, in the -w folder, the program looked up in the image's bin folder,
# as a process of its own session (the container), and waits for it: as with the real client, a signal to
# `run` ends the client and leaves the container running. `kill --signal=N NAME` signals the container;
# `rm` is logged. Every call is logged (argv and which variables it was given) to engine.log.
import json, os, signal, sys
args = sys.argv[1:]
logs = os.environ["ENGINE_LOG_DIR"]
with open(os.path.join(logs, "engine.log"), "a") as f:
    f.write(json.dumps({{"argv": args, "env_keys": sorted(os.environ)}}) + "\\n")
if args[0] == "kill":
    pid = int(open(os.path.join(logs, args[-1] + ".pid")).read())
    os.kill(pid, int(args[1].removeprefix("--signal=")))
if args[0] != "run":
    sys.exit(0)
container = next(a for a in args if a.startswith("--name=")).removeprefix("--name=")
image = os.environ["ENGINE_IMAGE"]
at = args.index(image)
opts, program = args[1:at], args[at + 1:]
env, workdir = {{}}, "/"
for flag, value in zip(opts, opts[1:]):
    if flag == "-e":
        name, eq, val = value.partition("=")
        env[name] = val if eq else os.environ.get(name, "")
    if flag == "-w":
        workdir = value
env["PATH"] = os.environ["ENGINE_IMAGE_BIN"]
os.chdir(workdir)
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execve(os.path.join(env["PATH"], program[0]), program, env)
open(os.path.join(logs, container + ".pid"), "w").write(str(pid))
status = os.waitpid(pid, 0)[1]
sys.exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
"""

FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli in the SIMULATED image: NaN from step 2 while learning_rate > 1 (then it hangs,
# as LLaMA-Factory carries on); else 3 falling losses and an adapter. Logs what it was given.
import json, os, re, sys, time
text = open(sys.argv[2]).read()
lr = float(re.search(r"(?m)^learning_rate: (.*)$", text).group(1))
os.makedirs("output", exist_ok=True)
with open("seen.jsonl", "a") as f:
    f.write(json.dumps({{"cwd": os.getcwd(), "env": dict(os.environ)}}) + "\\n")
with open("output/trainer_log.jsonl", "a") as f:
    for step in range(1, 4):
        loss = float("nan") if lr > 1 and step >= 2 else 1.0 / step
        f.write(json.dumps({{"current_steps": step, "total_steps": 3, "loss": loss, "lr": lr}}) + "\\n")
        f.flush()
        time.sleep(0.2)
    if lr > 1:
        time.sleep(60)
open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
"""

RUN = """
import json, sys
from radeonlab.contract.records import HostRecord
from radeonlab.jobs.host.process import StateFile
from radeonlab.jobs.host.runtime import Runtime
from radeonlab.jobs.host.supervisor import Supervisor
job_dir, record, argv = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
env = json.loads(sys.stdin.read())
where = Runtime.of(HostRecord.from_dict(record), record["venv"])
argv = [where.program(argv[0]), *argv[1:]]
sys.exit(Supervisor(job_dir, argv, env, [], StateFile(job_dir), where).run(False))
"""


def test_the_nan_ladder_runs_each_attempt_in_its_own_container(tmp_path: Path) -> None:
    image_bin = tmp_path / "image" / "bin"
    image_bin.mkdir(parents=True)
    (image_bin / "llamafactory-cli").write_text(FAKE_CLI)
    (image_bin / "llamafactory-cli").chmod(0o755)
    engine = tmp_path / "podman"
    engine.write_text(ENGINE)
    engine.chmod(0o755)
    job = tmp_path / "jobs" / "nan-20260101-000000-abcd"
    for rel, data in hostcode.files().items():
        (job / "host" / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / "host" / rel).write_bytes(data)
    record = {"id": job.name, "name": "nan", "spec_file": "nan.yaml", "created_at": "2026-01-01T00:00:00Z",
              "host": "ws1", "attempts": [{"n": 1, "created_at": "x"}],
              "remedies": {"nan": {"enabled": True, "steps": []}},
              "lf_defaults": {k: {"flash_attn": "auto"}.get(k) for k in STEP_KEYS}}  # fmt: skip
    (job / "job.json").write_text(json.dumps(record))
    (job / "config.json").write_text(json.dumps({"learning_rate": 1e30, "output_dir": str(job / "output")}))
    (job / "config.yaml").write_text("learning_rate: 1.0e+30\n")
    host = container_record(tmp_path, container_command=[str(engine), "run", "--device=/dev/kfd"])
    env = {"PATH": os.environ["PATH"], "MY_TOKEN": "s3cret", "HF_HOME": str(job / "cache" / "hf")}
    engine_env = {"ENGINE_LOG_DIR": str(tmp_path), "ENGINE_IMAGE": IMAGE, "ENGINE_IMAGE_BIN": str(image_bin)}
    argv = ["llamafactory-cli", "train", str(job / "config.yaml")]
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(job), json.dumps(host.to_dict()), json.dumps(argv)],
        input=json.dumps({**env, **engine_env}),
        env={**os.environ, **engine_env, "PYTHONPATH": str(job / "host")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    final = json.loads((job / "job.json").read_text())
    assert [a["state"] for a in final["attempts"]] == ["stopped", "stopped", "succeeded"]
    # stopped through the engine: the container's SIGTERM ended the training (128 + 15), no SIGKILL needed
    assert [a["exit_code"] for a in final["attempts"]] == [143, 143, 0], final["attempts"]
    calls = [json.loads(line) for line in (tmp_path / "engine.log").read_text().splitlines()]
    kills = [c["argv"] for c in calls if c["argv"][0] == "kill"]
    assert kills == [["kill", "--signal=15", f"radeonlab-{job.name}-{n}"] for n in (1, 2)]
    runs = [c["argv"] for c in calls if c["argv"][0] == "run"]
    names = [next(a for a in r if a.startswith("--name=")) for r in runs]
    assert names == [f"--name=radeonlab-{job.name}-{n}" for n in (1, 2, 3)]
    # after each attempt the job runner makes sure its container is gone (a NaN stop may SIGKILL podman run)
    removed = [c["argv"][-1] for c in calls if c["argv"][0] == "rm"]
    assert removed == [f"radeonlab-{job.name}-{n}" for n in (1, 2, 3)]
    assert all("s3cret" not in " ".join(c["argv"]) for c in calls)
    seen = [json.loads(line) for line in (job / "seen.jsonl").read_text().splitlines()]
    assert len(seen) == 3 and all(s["cwd"] == str(job) for s in seen)
    assert all(s["env"]["MY_TOKEN"] == "s3cret" and s["env"]["PATH"] == str(image_bin) for s in seen)
    assert all(s["env"]["HOME"] == str(job / "cache" / "home") for s in seen)
    assert not any("PYTHONPATH" in s["env"] for s in seen)


def test_cancel_removes_the_running_attempts_container(tmp_path: Path, monkeypatch) -> None:
    """A SIGKILLed `podman run` leaves its container running: cancel removes it by name (only on a job
    that ran in a container, and only once an attempt started)."""
    record = container_record(tmp_path)
    removed: list[str] = []
    monkeypatch.setattr(runtime, "read_record", lambda: record)
    monkeypatch.setattr(runtime, "stop", lambda where, name: removed.append(f"{where.kind} {name}"))
    job_dir = tmp_path / "jobs" / "long-1"
    job_dir.mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({"id": "long-1", "runtime": "container"}))
    launcher.stop_container(str(job_dir), {"attempt": 2})
    launcher.stop_container(str(job_dir), {"attempt": None})  # cancelled before an attempt started
    (job_dir / "job.json").write_text(json.dumps({"id": "long-1", "runtime": "venv"}))
    launcher.stop_container(str(job_dir), {"attempt": 1})
    assert removed == ["container radeonlab-long-1-2"]
