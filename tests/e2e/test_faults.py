"""Faults on ONE provisioned SIMULATED workstation (tests/support/faultlab.py's shared trainer host).

Each test breaks something for real while radeonlab works: sshd stopped (and the open sessions killed by
pid) in the middle of an upload and of a fetch, the content store's disk full, the training process
killed, the host rebooted. What must hold: no half file is ever used or overwrites a complete one, the
retry finishes the transfer (resuming, checksums equal), a job that died is recorded as failed with a
reason and never stays "running".
(sshd lost DURING TRAINING is covered by tests/e2e/test_jobs_e2e.py::test_a_dropped_ssh_connection_neither_
stops_training_nor_watch: the job goes on and watch reconnects; not repeated here to save CI time.)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from radeonlab.contract.state import EndReason
from radeonlab.errors import TransportError
from radeonlab.jobs.ssh.connection import connect
from radeonlab.jobs.ssh.transfer import LocalFile, fetch, upload_blobs
from radeonlab.sandbox.hosts import Sandbox
from tests.support.faultlab import (
    BLOBS_DIR,
    HOST,
    INVENTORY,
    JOBS_DIR,
    LONG_STEPS,
    Lab,
    cli,
    host_target,
    kill_ssh_sessions,
    shared_lab,
    sshd_answers,
    state_on_host,
    submit,
    wait_for,
    wait_logged_step,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

BIG_MB = 24  # big enough to be cut in the middle on loopback, small enough for CI
CUT_AT = 0.3  # the fault strikes when this share of the bytes has moved
DISK_MB = 4  # the tiny filesystem mounted over the content store for the disk-full test


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = shared_lab(sandbox, tmp_path_factory.mktemp("faultlab"))
    print(f"\n{HOST} provisioned in {lab.provision_s:.1f}s")
    yield lab
    if lab.host.is_running() and not sshd_answers(lab.host):
        lab.host.start_sshd()


def random_file(path: Path, mb: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cut_ssh_at(lab: Lab, share: float):  # noqa: ANN201
    """A progress callback that stops sshd and kills the open sessions once `share` of the bytes moved."""
    fired: list[int] = []

    def progress(done: int, total: int) -> None:
        if not fired and total and done >= share * total:
            fired.append(done)
            lab.host.stop_sshd()
            kill_ssh_sessions(lab.host)

    return progress, fired


def host_sha256(lab: Lab, path: str) -> str:
    return lab.host.exec(["sha256sum", path]).stdout.split()[0]


def test_sshd_stopped_during_upload_no_half_blob_and_the_retry_resumes(lab: Lab, tmp_path: Path) -> None:
    src = tmp_path / "upload" / "train.jsonl"
    digest = random_file(src, BIG_MB)
    target = host_target(lab)
    blob = f"{BLOBS_DIR}/sha256/{digest}"
    progress, fired = cut_ssh_at(lab, CUT_AT)
    try:
        with pytest.raises(TransportError) as lost, connect(target) as remote:
            upload_blobs(remote, [LocalFile.of(src)], BLOBS_DIR, progress)
        assert fired, "the fault never struck"
        assert "\n" not in str(lost.value) and "the next upload resumes it" in str(lost.value)
        # no half file under the blob's name
        assert lab.host.exec(["test", "-e", blob], check=False).returncode != 0
        part_size = int(lab.host.exec(["stat", "-c", "%s", f"{blob}.part"]).stdout)
        assert 0 < part_size < src.stat().st_size
    finally:
        lab.host.start_sshd()
    with connect(target) as remote:
        have, sent = upload_blobs(remote, [LocalFile.of(src)], BLOBS_DIR)
    assert digest not in have and 0 < sent <= src.stat().st_size - part_size  # resumed, not started again
    assert host_sha256(lab, blob) == digest
    assert lab.host.exec(["test", "-e", f"{blob}.part"], check=False).returncode != 0
    print(f"\nupload cut after {fired[0]} B; .part kept {part_size} B; retry sent {sent} B")


def test_sshd_stopped_during_fetch_keeps_the_old_file_and_resumes(lab: Lab, tmp_path: Path) -> None:
    remote_dir = f"{JOBS_DIR}/fault-fetch"
    lab.host.exec(["mkdir", "-p", f"{remote_dir}/output"], user="lab")
    lab.host.exec(f"head -c {BIG_MB}M /dev/urandom > {remote_dir}/output/big.bin", user="lab")
    lab.host.exec(f"echo done > {remote_dir}/small.txt", user="lab")
    want = host_sha256(lab, f"{remote_dir}/output/big.bin")
    local = tmp_path / "results"
    old = local / "output/big.bin"
    random_file(old, 1)  # a complete file of an earlier fetch: it must survive a cut transfer whole
    old_bytes = old.read_bytes()
    target = host_target(lab)
    progress, fired = cut_ssh_at(lab, CUT_AT)
    try:
        with pytest.raises(TransportError) as lost, connect(target) as remote:
            fetch(remote, remote_dir, local, progress=progress)
        assert fired, "the fault never struck"
        assert "\n" not in str(lost.value) and "resumes it" in str(lost.value)
        assert old.read_bytes() == old_bytes  # never overwritten by the partial transfer
        part = old.with_name("big.bin.part")
        assert 0 < part.stat().st_size < BIG_MB << 20
    finally:
        lab.host.start_sshd()
    kept = part.stat().st_size
    with connect(target) as remote:
        report = fetch(remote, remote_dir, local)
    got = {f.name: f.transferred for f in report.files}
    assert got["output/big.bin"] <= (BIG_MB << 20) - kept, got  # resumed from the .part
    assert hashlib.sha256(old.read_bytes()).hexdigest() == want
    assert (local / "small.txt").read_text() == "done\n" and not part.exists()
    print(f"\nfetch cut with {kept} B in .part; the retry received {got['output/big.bin']} B")


def test_disk_full_during_upload_is_one_clear_line_and_nothing_corrupt(lab: Lab, tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    digest = random_file(src, DISK_MB * 2)
    store = f"{BLOBS_DIR}/sha256"
    before = lab.host.exec(["ls", store]).stdout
    lab.host.exec(f"mount -t tmpfs -o size={DISK_MB}m tmpfs {store} && chown lab:lab {store}")
    target = host_target(lab)
    try:
        with pytest.raises(TransportError) as full, connect(target) as remote:
            upload_blobs(remote, [LocalFile.of(src)], BLOBS_DIR)
        message = str(full.value)
        assert "\n" not in message and "No space left on device" in message, message
        assert "connection lost" not in message  # the host said why: not a network problem
        assert lab.host.exec(["test", "-e", f"{store}/{digest}"], check=False).returncode != 0
    finally:
        lab.host.exec(["umount", store])
    assert lab.host.exec(["ls", store]).stdout == before  # the real store underneath is untouched
    manifest = json.loads(lab.host.exec(["cat", f"{BLOBS_DIR}/manifest.json"], check=False).stdout or "{}")
    assert digest not in manifest
    print(f"\ndisk full: {message}")


@pytest.fixture(scope="module")
def killed_job(lab: Lab) -> Iterator[dict]:
    """A long job (remedies off: no automatic new attempt) whose training process gets SIGKILL once its
    first checkpoint is complete, as the kernel's OOM killer or a user would."""
    spec = lab.spec("killed.yaml", {"max_steps": LONG_STEPS, "save_steps": 5})
    spec.write_text(spec.read_text() + "radeonlab:\n  remedies: {nan: off, oom: off}\n")
    job_id = submit(lab, spec)
    done_file = f"{JOBS_DIR}/{job_id}/output/checkpoint-5/trainer_state.json"
    try:
        wait_for(
            lambda: lab.host.exec(["test", "-e", done_file], check=False).returncode == 0, 120, "checkpoint-5"
        )
        state = state_on_host(lab.host, job_id)
        assert state["state"] == "running"
        lab.host.exec(["kill", "-9", str(state["child_pid"])])
        done = wait_for(
            lambda: (s := state_on_host(lab.host, job_id))["state"] != "running" and s, 60, "the end"
        )
        yield {"id": job_id, "state": done}
    finally:
        cli(lab, "cancel", job_id, "-i", INVENTORY)  # whatever happened, no training left behind


def test_killed_training_is_recorded_failed_with_the_reason(lab: Lab, killed_job: dict) -> None:
    state = killed_job["state"]
    assert state["state"] == "failed" and state["exit_code"] == 137, state
    assert "SIGKILL" in state["reason"] or "137" in state["reason"], state
    status = cli(lab, "status", killed_job["id"], "-i", INVENTORY, "--json")
    assert json.loads(status.stdout)["state"] == "failed"


def test_a_killed_job_resumes_from_its_checkpoint(lab: Lab, killed_job: dict) -> None:
    job_id = killed_job["id"]
    resumed = cli(lab, "resume", job_id, "-i", INVENTORY)
    assert resumed.exit_code == 0, resumed.output
    record = json.loads(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/job.json"]).stdout)
    second = record["attempts"][1]
    assert len(record["attempts"]) == 2 and state_on_host(lab.host, job_id)["state"] == "running"
    # the new attempt starts from the newest complete checkpoint, not from step 1
    newest = max(
        int(n.split("-")[1])
        for n in lab.host.exec(["ls", f"{JOBS_DIR}/{job_id}/output"]).stdout.split()
        if n.startswith("checkpoint-")
    )
    assert second["resume_from_checkpoint"] == f"checkpoint-{newest}" and newest >= 5, second
    log = f"{JOBS_DIR}/{job_id}/output/trainer_log.jsonl"
    wait_for(lambda: len(lab.host.exec(["cat", log]).stdout.splitlines()) > newest, 120, "a step after it")
    steps = [json.loads(line)["current_steps"] for line in lab.host.exec(["cat", log]).stdout.splitlines()]
    assert steps == sorted(set(steps)) and steps[0] == 1  # every step once: resumed, not restarted
    cli(lab, "cancel", job_id, "-i", INVENTORY)


def test_a_reboot_marks_the_running_job_failed_not_running_forever(lab: Lab) -> None:
    job_id = submit(lab, lab.spec("reboot.yaml", {"max_steps": LONG_STEPS, "save_steps": 1000}))
    wait_logged_step(lab.host, job_id)
    lab.host.restart()  # every process ends; the disk (and the stale state.json saying running) stays
    assert state_on_host(lab.host, job_id)["state"] == "running"  # what the host's file still says
    status = cli(lab, "status", job_id, "-i", INVENTORY, "--json")
    assert status.exit_code in (0, 1), status.output
    shown = json.loads(status.stdout)
    assert shown["state"] == "failed" and shown["end"] == EndReason.PROCESS_GONE.value, shown
    listed = {row["id"]: row for row in json.loads(cli(lab, "list", "-i", INVENTORY, "--json").stdout)}
    assert listed[job_id]["state"] == "failed"
