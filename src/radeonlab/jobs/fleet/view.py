"""What the laptop knows of a workstation after one probe: its record, its GPUs now, its jobs, and what a job
being planned asked of it (its folders, the contents its store holds, its model cache).

A HostView is a value: made from the probe tool's JSON (jobs/host/probe.py) by `parse_probe`, read by
placement, the plan, `radeonlab fleet`, `list` and the job handle; nothing here reaches a host (the round
trip is jobs/fleet/probe.py, the connections jobs/fleet/context.py). "Provisioned" means: the host record
exists, has the schema this radeonlab reads, and its GPUs are the cards sysfs shows now (a swapped or
missing card is named, and the host is not used until the deploy runs again).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from radeonlab.contract.messages import ProbeJob
from radeonlab.contract.records import HOST_RECORD_SCHEMA, RUNTIME_NO_JOBS_YET, HostRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import NotProvisionedError
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.roles.gpu.cards import card_name

FLEET_DEFAULTS: dict[str, Any] = {"timeout_s": 10.0}  # per host, connect + the one round trip
DEPLOY = "deploy/setup.py"
CPU_SLOT = "cpu"  # the queue key of a job without a GPU (the launcher's cpu.lock)


@dataclass(frozen=True)
class ProbeAsk:
    """What a job being planned asks the probe besides the host's state: the spec's folders on the host,
    the contents its uploads would send (does the host's store hold them?), and a Hub model's revision (does
    the host's model cache hold it whole?). Computed on the laptop before any host is asked; a sweep asks
    once for all its jobs (`merged`)."""

    paths: tuple[str, ...] = ()
    blobs: tuple[str, ...] | None = None  # None: not asked (the upload asks anyway)
    models: tuple[str, ...] = ()  # "repo@revision" (model_key)

    def args(self) -> list[str]:
        """The probe tool's arguments (jobs/host/probe.py)."""
        out = [a for p in self.paths for a in ("--path", p)]
        out += [a for sha in self.blobs or () for a in ("--blob", sha)]
        out += [a for m in self.models for a in ("--model", m)]
        return out

    def merged(self, other: ProbeAsk) -> ProbeAsk:
        def union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys([*a, *b]))

        blobs = (
            None if self.blobs is None and other.blobs is None else union(self.blobs or (), other.blobs or ())
        )
        return ProbeAsk(union(self.paths, other.paths), blobs, union(self.models, other.models))


def model_key(repo: str, revision: str) -> str:
    """How the probe names a model revision it was asked about."""
    return f"{repo}@{revision}"


@dataclass(frozen=True)
class ModelCache:
    """The probe's answer about one Hub model in the host's shared cache."""

    complete: bool
    reason: str = ""


@dataclass
class HostView:
    """One host as one probe saw it."""

    name: str
    reachable: bool = True
    error: str | None = None  # why unreachable (one line), or what went wrong reading the host
    record: HostRecord | None = None  # None: not provisioned (note says why)
    raw_record: dict[str, Any] | None = None  # as written, even when not usable (it may name the GPUs)
    note: str = ""
    gpus: list[GpuReading] = field(default_factory=list)
    jobs: list[ProbeJob] = field(default_factory=list)  # the probe's job summaries
    seconds: float | None = None
    # what the lab's scheduler says of the host (jobs/scheduler describe_hosts: Slurm's node state), under
    # the scheduler's name; the jobs it holds pending (staged here, not started); and, for a host with no GPU
    # stack by design (a Slurm controller), what it is
    scheduler: str = ""
    scheduler_name: str = ""
    scheduler_pending: frozenset[str] = frozenset()
    no_stack_because: str = ""
    paths: dict[str, dict[str, Any]] = field(default_factory=dict)  # ProbeAsk.paths: what each is here
    blobs: frozenset[str] | None = None  # ProbeAsk.blobs the host's store holds (None: not asked)
    models: dict[str, ModelCache] = field(default_factory=dict)  # ProbeAsk.models: in the host's cache?

    @property
    def provisioned(self) -> bool:
        return self.record is not None

    def reading(self, index: int) -> GpuReading | None:
        return next((g for g in self.gpus if g.index == index), None)

    def live_jobs(self, state: JobState) -> list[ProbeJob]:
        return [j for j in self.jobs if j.state.state is state and j.alive]

    @property
    def queued(self) -> list[str]:
        """Jobs waiting here: in the host's own GPU queue (a live launcher), or staged here for a job the
        lab's scheduler holds pending (no launcher until Slurm starts it, here or on another candidate)."""
        waiting = [j for j in self.jobs if j.state.state is JobState.QUEUED]
        return [j.id for j in waiting if j.alive or j.id in self.scheduler_pending]

    @property
    def stale(self) -> list[str]:
        """Jobs recorded as running whose processes are gone (host rebooted, launcher killed)."""
        return [j.id for j in self.jobs if j.state.state is JobState.RUNNING and not j.alive]

    def queue(self) -> dict[str, int]:
        """Queued + running jobs per GPU index ("cpu" for jobs without a GPU)."""
        out: dict[str, int] = {}
        for job in self.live_jobs(JobState.QUEUED) + self.live_jobs(JobState.RUNNING):
            for slot in [str(g) for g in job.gpus] or [CPU_SLOT]:
                out[slot] = out.get(slot, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """`fleet --json`: one object per host (GPUs as recorded, with the live readings)."""
        record = self.raw_record or {}
        named = {int(g["index"]): g for g in record.get("gpus") or [] if "index" in g}
        gpus = [
            {
                **asdict(g),
                "name": (named.get(g.index) or {}).get("name"),
                "gfx": (named.get(g.index) or {}).get("gfx"),
                "temp_c": g.temp_c,
            }
            for g in self.gpus
        ]
        return {
            "host": self.name,
            "reachable": self.reachable,
            "error": self.error,
            "provisioned": self.provisioned,
            "provisioned_note": self.note,
            "gpus": gpus,
            "rocm": (record.get("rocm") or {}).get("installed"),
            "torch": (record.get("torch") or {}).get("version"),
            "running": [j.id for j in self.live_jobs(JobState.RUNNING)],
            "queued": self.queued,
            "stale": self.stale,
            "seconds": self.seconds,
            "slurm": self.scheduler,  # the key `fleet --json` has always had (Slurm: the one such scheduler)
        }


def card_changes(entries: Sequence[Mapping[str, Any]], readings: Sequence[GpuReading]) -> str:
    """Where the live cards differ from the ones the host record describes (by PCI device id), or "".

    A recorded GPU with no live card (removed, or amdgpu not loaded after a kernel update) is a change too.
    Records without device ids (older ones) and readings without them compare as unchanged."""
    by_index = {r.index: r for r in readings}
    out = []
    for g in entries:
        live = by_index.get(int(g["index"]))
        if g.get("device_id") is None:
            continue
        if live is None:
            out.append(
                f"GPU {g['index']} {g.get('name')} is not in sysfs (card removed, or amdgpu not loaded)"
            )
        elif live.device_id is not None and int(g["device_id"]) != live.device_id:
            now = card_name(live.device_id, live.revision)
            out.append(f"GPU {g['index']} was {g.get('name')}, is now {now}")
    return "; ".join(out)


def _probe_job(data: Mapping[str, Any]) -> ProbeJob | None:
    """One job summary, or None for one this laptop cannot read (a state.json a newer radeonlab wrote, or a
    broken one): that job is left out, not the whole host."""
    try:
        return ProbeJob.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None


def parse_probe(name: str, data: Mapping[str, Any]) -> HostView:
    """A reachable host's view from the probe tool's JSON."""
    raw = data.get("record") if isinstance(data.get("record"), dict) else None
    view = HostView(name, raw_record=raw, note=str(data.get("record_error") or ""))
    view.gpus = [GpuReading(**g) for g in data.get("gpus") or []]
    view.jobs = [job for job in map(_probe_job, data.get("jobs") or []) if job is not None]
    view.paths = dict(data.get("paths") or {})
    if isinstance(data.get("blobs"), list):
        view.blobs = frozenset(str(b) for b in data["blobs"])
    for key, said in (data.get("models") or {}).items():
        view.models[str(key)] = ModelCache(bool(said.get("complete")), str(said.get("reason") or ""))
    if data.get("jobs_error"):
        view.error = f"jobs folder: {data['jobs_error']}"
    if raw is None:
        return view
    if raw.get("schema") != HOST_RECORD_SCHEMA:  # first: another schema may lack or rename fields
        view.note = (
            f"host record schema {raw.get('schema')!r}, this radeonlab reads schema {HOST_RECORD_SCHEMA}"
        )
        return view
    try:
        record = HostRecord.from_dict(raw)
    except (TypeError, ValueError) as exc:
        view.note = f"host record unreadable ({exc})"
        return view
    view.note = record.unusable() or ""
    changed = card_changes(raw.get("gpus") or [], view.gpus)
    if changed and not view.note:  # provisioned for another card: wrong arch, override, record
        view.note = f"card changed since provisioning: {changed}; re-run deploy/setup.py"
    view.record = None if view.note else record
    return view


def deploy_command(inventory: str, host: str) -> str:
    """The one command that provisions `host` (what a not-provisioned error tells the user to run)."""
    return shlex.join(["pyinfra", "-y", "--limit", host, inventory, DEPLOY])


def require_record(view: HostView, inventory: str) -> HostRecord:
    """The usable host record, or NotProvisionedError naming the host, why, and the deploy command."""
    if view.record is not None:
        return view.record
    fix = f"provision it first: {deploy_command(inventory, view.name)}"
    why = view.note or "no host record"
    if why.startswith(RUNTIME_NO_JOBS_YET):  # provisioned as asked: no deploy fixes it
        raise NotProvisionedError(f"{view.name} runs no job: {why}; choose another host")
    if why.startswith("verification failed:"):  # provisioned, but its check failed: the fix is in the reason
        fix = f"fix that (the reason says how), then re-run {deploy_command(inventory, view.name)}"
    if why == "no host record":
        raise NotProvisionedError(f"{view.name} is not provisioned (no /etc/radeonlab/host.json): {fix}")
    raise NotProvisionedError(f"{view.name} is not provisioned ({why}): {fix}")
