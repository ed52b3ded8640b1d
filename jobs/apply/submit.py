"""Submitting a job, top to bottom: spec -> checks -> pick host -> host record -> render -> upload -> launch.

`submit()` runs the same checks as `radeonlab check` before anything leaves the laptop (errors: nothing is
uploaded), opens ONE SSH connection to the chosen host, reads its host record (not provisioned: one line
naming the deploy command), renders the spec for that host's card, uploads the datasets (and the spec's
local model folder) content-addressed, writes config.yaml, dataset_info.json, job.json and the launcher,
starts the launcher detached (it outlives the connection) and records the job in the local SQLite store.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.jobs.apply import launch, secrets
from radeonlab.jobs.apply.sync import UploadReport, upload_files
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.hostrecord import blobs_dir, read_host_record
from radeonlab.jobs.fleet.inventory import HostTarget, InventoryError, get_host, load_inventory
from radeonlab.jobs.plan.render import Rendered, local_model_dir, pick_gpus, render
from radeonlab.jobs.spec import checks
from radeonlab.jobs.spec import load as spec_module
from radeonlab.jobs.spec.problems import ERROR, has_errors
from radeonlab.jobs.ssh.connection import Progress, Remote, TransportError, connect
from radeonlab.jobs.track import hostjobs

from radeonlab.contract.jobid import new_job_id
from radeonlab.contract.records import Attempt, JobPaths, JobRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import ChecksFailedError, RadeonlabError

SUBMIT: dict[str, float] = {
    "start_wait_s": 15.0,  # how long submit waits for the launcher to record "running" (or a refusal)
    "start_poll_s": 0.2,
}
GIB = 1024**3

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
    datasets: UploadReport
    model: UploadReport | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "host": self.host,
            "remote_dir": self.remote_dir,
            "precision": self.precision,
            "state": self.state.to_dict(),
            "dataset_bytes_sent": self.datasets.bytes_sent,
            "dataset_files": [f.__dict__ for f in self.datasets.files],
            "model_bytes_sent": self.model.bytes_sent if self.model else 0,
            "notes": self.notes,
        }


def submit(
    spec_path: str | Path,
    inventory: str | Path,
    host: str | None = None,
    *,
    allow_shared: bool = False,
    say: Say = print,
    progress_bar: ProgressBar = no_progress,
    nodes: int | None = None,
    strict: bool = False,
) -> SubmitResult:
    """Check, place, upload and launch the job described by `spec_path`; returns once it has started.

    nodes (default: the spec's radeonlab.nodes) > 1: one job across that many hosts (jobs/plan/nodes.py)."""
    # 1. the spec and its checks: refuse before anything is uploaded
    spec = spec_module.load(spec_path)
    problems = checks.check_spec(spec)
    if has_errors(problems):
        errors = [p for p in problems if p.severity == ERROR]
        raise ChecksFailedError(
            f"{spec_path}: {len(errors)} error(s) (see `radeonlab check {spec_path}`); nothing uploaded",
            problems,
        )
    # 2. the host(s)
    targets = load_inventory(inventory)
    if not targets:
        raise InventoryError(f"{inventory}: the inventory has no hosts")
    if (nodes or spec.radeonlab.nodes) > 1:
        from radeonlab.jobs.plan import nodes as multinode

        count = nodes or spec.radeonlab.nodes
        return multinode.submit_nodes(
            spec, spec_path, inventory, targets, host or spec.radeonlab.host, count,
            allow_shared=allow_shared, say=say, progress_bar=progress_bar, strict=strict,
        )  # fmt: skip
    target = choose_host(targets, host or spec.radeonlab.host, spec, say)
    with connect(target) as remote:
        # 3. its host record: provisioned? which card, which venv, where jobs live
        record = read_host_record(remote, str(inventory))
        check_placement(spec, record)
        # 4. render for this host's card
        job_id = new_job_id(Path(spec_path).stem)
        paths = JobPaths.for_job(record["jobs_dir"], job_id)
        model_dir = local_model_dir(spec)
        rendered = render(
            spec,
            record,
            paths,
            job_id=job_id,
            model_local=model_dir is not None,
            base_dataset_info=_local_dataset_info(spec),
        )
        say(f"{job_id}: {target.name}, {rendered.notes[0]}")
        preflight_check(rendered, record, model_dir, strict, say)  # --strict: refused before any upload
        # 5-6. upload, the job folder's own files (secrets in env.secret), then the detached launch
        created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        staged = stage_job(
            remote, record, spec, spec_path, rendered, job_id=job_id, created=created, say=say,
            progress_bar=progress_bar,
        )  # fmt: skip
        remote.run(launch.start_argv(launch.launcher_argv(paths, record["venv"], allow_shared)))
        state = wait_started(remote, paths)
        # 7. remember it locally (a cache of the host's job folder)
        with contextlib.closing(store.connect()) as conn:
            store.upsert_from_host(
                conn, store.HostJob(target.name, str(paths.root), staged.job, state.to_dict())
            )
    return SubmitResult(
        job_id,
        target.name,
        str(paths.root),
        rendered.precision,
        state,
        staged.datasets,
        staged.model,
        rendered.notes,
    )


@dataclass
class Staged:
    """One host's job folder, ready to launch: what was uploaded and the job.json written."""

    paths: JobPaths
    datasets: UploadReport
    model: UploadReport | None
    job: dict[str, Any]


def stage_job(
    remote: Remote,
    record: dict[str, Any],
    spec: spec_module.Spec,
    spec_path: str | Path,
    rendered: Rendered,
    *,
    job_id: str,
    created: str,
    say: Say,
    progress_bar: ProgressBar,
    node_env: Mapping[str, str] | None = None,
    job_extra: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Staged:
    """Stage one host's job folder (single-node submit and every rank of a multi-node job).

    Uploads the datasets, the spec's local model folder and extra files (content-addressed), then writes
    config.yaml, dataset_info.json, the launcher, the supervisor's files (config.json + its code),
    env.secret (0600, from stdin: jobs/apply/secrets.py) and job.json (plain env, the secrets' NAMES, the
    supervision fields). node_env: a rank's environment (multi-node); job_extra: more job.json keys;
    environ: the laptop's environment secrets are forwarded from (default os.environ).
    """
    paths = JobPaths.for_job(record["jobs_dir"], job_id)
    name = remote.target.name
    label = "" if node_env is None else f" -> {name}"
    store_dir = blobs_dir(record)
    with progress_bar(f"datasets{label}") as bar:
        data_report = upload_files(remote, dataset_files(spec, rendered), store_dir, str(paths.data), bar)
    say(f"datasets{label}: {data_report.summary()}")
    if data_report.files and data_report.bytes_sent == 0:
        say(f"datasets{label}: 0 bytes transferred (the host already has this exact data)")
    model_report = None
    model_dir = local_model_dir(spec)
    if model_dir is not None:
        files = sorted(p for p in Path(model_dir).iterdir() if p.is_file())
        with progress_bar(f"model{label}") as bar:
            model_report = upload_files(remote, files, store_dir, str(paths.model), bar)
        say(f"model{label}: {model_report.summary()}")
    extra = [spec.base_dir / f for f in spec.radeonlab.files]
    if extra:
        upload_files(remote, extra, store_dir, str(paths.root))
    plain_env, secret_env = secrets.job_env(
        spec.radeonlab.env, spec.radeonlab.forward_env, os.environ if environ is None else environ
    )
    job = JobRecord(
        id=job_id,
        name=Path(spec_path).stem,
        spec_file=Path(spec_path).name,
        created_at=created,
        host=name,
        gpus=[g["index"] for g in pick_gpus(record, None)],
        env={**plain_env, **(node_env or {})},
        secret_names=sorted(secret_env),
        attempts=[Attempt(n=1, created_at=created)],
        **supervision_fields(spec, record),
    )
    job_json = {**job.to_dict(), **(job_extra or {})}
    remote.write_text_atomic(str(paths.config), rendered.yaml_text)
    remote.write_text_atomic(posixpath.join(str(paths.data), "dataset_info.json"), rendered.dataset_info_text)
    remote.write_text_atomic(str(paths.launcher), launch.launcher_source())
    write_supervisor_files(remote, paths, rendered)
    write_secrets(remote, paths, secret_env)
    remote.write_text_atomic(str(paths.job), json.dumps(job_json, indent=1) + "\n")
    return Staged(paths, data_report, model_report, job_json)


def write_secrets(remote: Remote, paths: JobPaths, values: Mapping[str, str]) -> None:
    """env.secret (0600) from stdin, never argv; nothing is written when the job has no secrets."""
    if values:
        remote.run(launch.write_secret_argv(paths), stdin_text=launch.secret_text(values))


def choose_host(
    targets: dict[str, HostTarget], wanted: str | None, spec: spec_module.Spec, say: Say
) -> HostTarget:
    """--host (or the spec's radeonlab.host); else placement's best host (jobs/plan/placement.py), printing
    one line per host (accepted/rejected and why)."""
    from radeonlab.jobs.plan import placement

    if wanted:
        return get_host(targets, wanted)
    return placement.place(targets, placement.needs_of(spec), 1, say=say)[0]


def check_placement(spec: spec_module.Spec, record: dict[str, Any]) -> None:
    """The spec's placement wishes (gfx family, min VRAM, forced bf16) against the card the job would get
    (the same rules as placement, for a host named with --host)."""
    from radeonlab.jobs.plan import placement

    problems = placement.card_problems(placement.needs_of(spec), pick_gpus(record, None))
    if problems:
        raise RadeonlabError(f"{record['host']}: {'; '.join(problems)}")


def _local_dataset_info(spec: spec_module.Spec) -> dict[str, Any] | None:
    folder = spec.dataset_dir()
    info = folder / checks.DATASET_INFO if folder else None
    return json.loads(info.read_text()) if info and info.is_file() else None


def dataset_files(spec: spec_module.Spec, rendered: Rendered) -> list[Path]:
    """The local files of the datasets the job trains/evaluates on (hub datasets have none)."""
    from_block = {d.name: spec.base_dir / d.file for d in spec.radeonlab.datasets}
    folder = spec.dataset_dir()
    names = [
        n.strip()
        for key in ("dataset", "eval_dataset")
        for n in str(rendered.config.get(key) or "").split(",")
        if n.strip()
    ]
    files: list[Path] = []
    for name in names:
        entry = rendered.dataset_info.get(name) or {}
        if name in from_block:
            path = from_block[name]
        elif "file_name" in entry and folder is not None:
            path = folder / entry["file_name"]
        else:
            continue  # a hub / script dataset: fetched on the host
        if not path.is_file():
            raise RadeonlabError(f"dataset {name}: {path} is not a file (dataset folders are not supported)")
        if path not in files:
            files.append(path)
    return files


def wait_started(remote: Remote, paths: JobPaths) -> StateRecord:
    """Poll the launcher until it recorded the start (running) or a refusal; queued if it says nothing."""
    deadline = time.monotonic() + SUBMIT["start_wait_s"]
    state = StateRecord(JobState.QUEUED)
    while time.monotonic() < deadline:
        result = remote.run(launch.status_argv(paths), check=False)
        if result.ok and result.stdout.strip():
            state, _alive = launch.parse_state_output(result.stdout)
            if state.state is not JobState.QUEUED or state.pid is not None:  # queued with a pid: in line
                return state
        time.sleep(SUBMIT["start_poll_s"])
    return state


# ----------------------------------------------------------------- training health and the host-side queue


def preflight_check(
    rendered: Rendered, record: dict[str, Any], model_dir: str | None, strict: bool, say: Say
) -> None:
    """The VRAM estimate against the job's card (jobs/plan/preflight.py): a note, a warning, or with
    --strict a
    refusal."""
    from radeonlab.jobs.plan import preflight

    cards = pick_gpus(record, None)
    result = preflight.check(model_dir, rendered.config, cards[0] if cards else None)
    say(("warning: " if result.fits is False else "") + result.message)
    preflight.enforce(result, strict, str(record.get("host")))


def supervision_fields(spec: spec_module.Spec, record: dict[str, Any]) -> dict[str, Any]:
    """job.json fields the host-side supervisor reads: the spec's remedy switches and limits, the card's
    VRAM."""
    cards = pick_gpus(record, None)
    remedies = spec.radeonlab.remedies
    return {
        "remedies": {n: {"enabled": r.enabled, "steps": list(r.steps)} for n, r in remedies.items()},
        "limits": dict(spec.radeonlab.limits),
        "vram_total": cards[0].get("vram_total") if cards else None,
    }


def write_supervisor_files(remote: Remote, paths: JobPaths, rendered: Rendered) -> None:
    """config.json (the first attempt's config: the host has no YAML parser) and the supervisor's code."""
    from radeonlab.jobs.apply import bundle as hostbundle

    remote.write_text_atomic(str(paths.config_json), json.dumps(rendered.config, indent=1) + "\n")
    argv, stdin_text = hostbundle.install_request(paths)
    remote.run(argv, stdin_text=stdin_text)


@contextlib.contextmanager
def open_job(job_id: str, inventory: str | Path, host: str | None = None) -> Iterator[JobSession]:
    """Find `job_id` on the inventory's hosts (the cached host first) and keep that one connection open."""
    targets = load_inventory(inventory)
    candidates = [get_host(targets, host)] if host else hostjobs.candidate_hosts(job_id, targets)
    unreachable: list[str] = []
    for target in candidates:
        try:
            remote = connect(target)
        except TransportError as exc:  # an unreachable host must not hide the job on another
            unreachable.append(f"{target.name} ({exc})")
            continue
        try:
            record = read_host_record(remote, str(inventory))
            found = hostjobs.read_jobs(remote, record["jobs_dir"], [job_id])
            if not found or not _is_rank_zero(found[0]):  # a multi-node job is read from its rank 0
                remote.close()
                continue
            session = JobSession(
                target, remote, record, JobPaths.for_job(record["jobs_dir"], job_id), found[0]
            )
            session.cache()
            try:
                yield session
            finally:
                remote.close()
            return
        except BaseException:
            remote.close()
            raise
    where = ", ".join(t.name for t in candidates)
    gone = f"; unreachable: {'; '.join(unreachable)}" if unreachable else ""
    raise hostjobs.JobNotFoundError(f"no job {job_id} on {where}{gone}")


def _is_rank_zero(job: hostjobs.HostJobState) -> bool:
    from radeonlab.jobs.plan.nodes import is_rank_zero

    return is_rank_zero(job.host_job.job)


@dataclass
class JobSession:
    """An open connection to the host that holds one job."""

    target: HostTarget
    remote: Remote
    record: dict[str, Any]
    paths: JobPaths
    job: hostjobs.HostJobState

    def refresh(self) -> hostjobs.HostJobState:
        self.job = hostjobs.read_job(self.remote, self.record["jobs_dir"], self.paths.root.name)
        self.cache()
        return self.job

    def cache(self) -> None:
        with contextlib.closing(store.connect()) as conn:
            store.upsert_from_host(conn, self.job.host_job)
