"""Carry a plan out: upload what the hosts lack, stage each job folder, start rank 0 first, remember it.

Per node: one `receive` stream (jobs/ssh/transfer.py: only the contents the host does not hold, resumable,
verified as written), then one `stage` round trip (jobs/host/stage.py) that writes config.yaml,
config.json, dataset_info.json, env.secret and job.json, links the uploaded contents into the job folder,
copies radeonlab's host code into it, starts the launcher detached and answers with the state the launcher
recorded. A one-host job is started in that same round trip. The ranks of a multi-node job are all staged
first and then started, rank 0 first (its torchrun serves the rendezvous), without queueing (a rank waiting
in its host's GPU line while its peer waits in torchrun's rendezvous would time out): if any rank does not
start, every rank is cancelled.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from radeonlab.contract.jobdir import FILES
from radeonlab.contract.messages import BlobLink, LaunchOptions, StageAnswer, StageRequest
from radeonlab.contract.records import StateRecord
from radeonlab.errors import RadeonlabError
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.modelcopy import from_peers
from radeonlab.jobs.plan.plan import Clock, JobPlan, NodePlan
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.connection import SETTINGS as SSH_SETTINGS
from radeonlab.jobs.ssh.transfer import FileTransfer, Progress, UploadReport, upload_blobs

Say = Callable[[str], None]
ProgressBar = Callable[[str], AbstractContextManager[Progress | None]]


@contextlib.contextmanager
def no_progress(_description: str) -> Iterator[Progress | None]:
    yield None


@dataclass
class SubmitResult:
    """What submit did: the job, where it runs, what moved, the state it started in."""

    job_id: str
    host: str
    remote_dir: str
    precision: str
    state: StateRecord
    uploads: UploadReport
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # per phase (submit --verbose)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "host": self.host,
            "remote_dir": self.remote_dir,
            "precision": self.precision,
            "state": self.state.to_dict(),
            "bytes_sent": self.uploads.bytes_sent,
            "files": [f.__dict__ for f in self.uploads.files],
            "notes": self.notes,
            "seconds": self.seconds,
        }


def upload(node: NodePlan, progress_bar: ProgressBar, say: Say) -> UploadReport:
    """Send the node's missing contents into its host's store (one stream)."""
    files = [u.local for u in node.uploads]
    label = f"upload -> {node.host}"
    if not files:  # nothing to upload at all (no dataset file, no local model): one line, no empty bar
        say(f"{label}: nothing to send")
        return UploadReport()
    # the plan asked the host which contents it holds: when it holds them all, no bar is drawn for nothing
    nothing_new = node.present is not None and all(f.sha256 in node.present for f in files)
    with contextlib.nullcontext(None) if nothing_new else progress_bar(label) as bar:
        have, _sent = upload_blobs(node.connection, files, node.record.blobs_dir, bar)
    report = UploadReport()
    seen: set[str] = set()
    for u in node.uploads:
        skipped = u.local.sha256 in have or u.local.sha256 in seen
        sent = 0 if skipped else u.local.size
        seen.add(u.local.sha256)
        report.files.append(
            FileTransfer(u.dest, u.local.sha256, u.local.size, sent, skipped=u.local.sha256 in have)
        )
    say(f"{label}: {report.summary()}")
    return report


def stage_request(plan: JobPlan, node: NodePlan, launch: bool) -> StageRequest:
    """What jobs/host/stage.py makes of the node's job folder (the secrets travel in this stdin, only)."""
    return StageRequest(
        job_dir=node.job.root,
        blobs=node.record.blobs_dir,
        links=[BlobLink(u.local.sha256, u.dest) for u in node.uploads],
        files={
            FILES["config"]: node.rendered.yaml_text,
            FILES["config_json"]: json.dumps(node.rendered.config, indent=1) + "\n",
            FILES["dataset_info"]: node.rendered.dataset_info_text,
        },
        code=f"{SSH_SETTINGS['code_dir']}/{hostcode.digest()}",
        job=plan.job_record(node).to_dict(),
        secret=plan.secrets() or None,
        launch=launch_options(plan, node) if launch else None,
    )


def launch_options(plan: JobPlan, node: NodePlan) -> LaunchOptions:
    return LaunchOptions(node.record.venv, allow_shared=plan.allow_shared, queue=len(plan.nodes) == 1)


def run_stage(node: NodePlan, request: StageRequest) -> StateRecord:
    """One round trip to jobs/host/stage.py; the state its launcher recorded (queued if it said nothing)."""
    # the code folder is relative to the SSH user's home; stage.py runs there (sshd's working directory)
    answer = StageAnswer.from_dict(node.connection.tool("stage", stdin_text=request.to_json()).last_json())
    return answer.state.reconciled(answer.alive)


def apply_plan(plan: JobPlan, *, progress_bar: ProgressBar = no_progress, say: Say = print) -> SubmitResult:
    """Upload, stage and start the planned job on its host(s); returns once it started (or was refused)."""
    single = len(plan.nodes) == 1
    clock = Clock()
    for node in plan.nodes:  # a Hub model another host holds is copied from there, not downloaded again
        if not node.env.get("HF_HUB_OFFLINE") and from_peers(
            plan.model, node.connection, node.record, plan.peers, say
        ):
            node.env["HF_HUB_OFFLINE"] = "1"
    clock.lap("model from a peer")
    reports = [upload(node, progress_bar, say) for node in plan.nodes]
    clock.lap("upload")
    states = [run_stage(node, stage_request(plan, node, launch=single)) for node in plan.nodes]
    clock.lap("stage and launch")
    if not single:
        states = [run_stage(n, StageRequest(n.job.root, launch=launch_options(plan, n))) for n in plan.nodes]
        refused = [(n.host, s) for n, s in zip(plan.nodes, states, strict=True) if s.state.is_finished()]
        if refused:
            for node in plan.nodes:  # a lone rank would wait for its peer until torchrun's timeout
                node.connection.tool("launcher", ["cancel", node.job.root], check=False)
            why = "; ".join(f"{name}: {s.summary()}" for name, s in refused)
            raise RadeonlabError(f"{plan.job_id}: a node did not start, every node cancelled: {why}")
    rank0 = plan.rank0
    with contextlib.closing(store.connect()) as conn:  # the job's row is rank 0's
        store.upsert_from_host(
            conn,
            store.HostJob(rank0.host, rank0.job.root, plan.job_record(rank0).to_dict(), states[0].to_dict()),
        )
    notes = list(rank0.rendered.notes)
    if not single:
        peers = ", ".join(f"rank {n.rank} {n.host}" for n in plan.nodes)
        port = rank0.nodes.master_port if rank0.nodes else ""
        notes.append(f"{len(plan.nodes)} nodes: {peers}; rendezvous {rank0.address}:{port}")
    seconds = {**plan.timings, **clock.laps}
    return SubmitResult(
        plan.job_id,
        rank0.host,
        rank0.job.root,
        rank0.rendered.precision,
        states[0],
        reports[0],
        notes,
        seconds,
    )
