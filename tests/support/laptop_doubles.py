"""Stand-ins for the laptop-side tests (no SSH): host records and views as the deploy and the probe make them,
the host tools run from the code radeonlab ships, and a Remote that records what would be sent.

Host records go through the contract's HostRecord (schema 2, what roles/verify/record.py writes); the
cards are the sandbox's SIMULATED cards (radeonlab/sandbox/simcards.py CARDS: values from recordings of
real cards, see tests/fixtures/SOURCES.md). Views are made by the probe's own parser (jobs/fleet/probe.py
parse_probe) from the JSON the host's probe tool prints, so a test sees what placement and fleet see.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.contract.records import GpuRecord, HostRecord
from radeonlab.jobs.fleet.context import Fleet
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.observe import observe_job
from radeonlab.jobs.fleet.probe import HostView, parse_probe
from radeonlab.jobs.plan import plan as plan_module
from radeonlab.jobs.spec.needs import base_stack
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.connection import RunResult
from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.simcards import CARDS
from radeonlab.sandbox.tinymodel import MODEL_CONFIG

# docs/notes/rocm-facts.md's card table: bf16 on RDNA3/RDNA4, not on RDNA2 (which needs
# HSA_OVERRIDE_GFX_VERSION)
BF16 = {"rx7900xtx": True, "rx6700xt": False, "rx9070xt": True}
FAMILY = {"rx7900xtx": "RDNA3", "rx6700xt": "RDNA2", "rx9070xt": "RDNA4"}
OVERRIDE = {"rx6700xt": "10.3.0"}
JOBS_DIR = "/home/lab/radeonlab/jobs"


def gpu(card: str, index: int = 0, node: int = 1, **changes: Any) -> GpuRecord:
    """One simulated card as the deploy records it (PCI ids, VRAM, bf16, override)."""
    c = CARDS[card]
    values: dict[str, Any] = {
        "index": index,
        "node": node,
        "gfx": c["gfx"],
        "name": c["name"],
        "device_id": int(c["device"], 16),
        "revision": int(c["revision"], 16),
        "family": FAMILY[card],
        "vram_total": c["vram_total"],
        "vram_used": c["vram_used"],
        "bf16": BF16[card],
        "override": OVERRIDE.get(card),
    }
    return GpuRecord(**{**values, **changes})


def host_record(
    name: str, gpus: Sequence[GpuRecord] = (), *, cpu_torch: bool = False, **changes: Any
) -> HostRecord:
    """A provisioned host's record with the stack the deploy installs; cpu_torch: a CPU build of torch the
    deploy allowed (python_stack_allow_cpu_torch, as on the sandbox's hosts)."""
    torch = (
        {
            "version": "2.13.0+cpu",
            "hip": None,
            "cuda_available": False,
            "cpu_build": True,
            "cpu_allowed": True,
        }
        if cpu_torch
        else {"version": "2.13.0+rocm7.2", "hip": "7.2.53211", "cuda_available": True, "cpu_build": False}
    )
    values: dict[str, Any] = {
        "host": name,
        "user": "lab",
        "venv": "/home/lab/radeonlab/venv",
        "jobs_dir": JOBS_DIR,
        "written_at": "2026-12-01T00:00:00Z",
        "home": "/home/lab",
        "cpu_only": not gpus,
        "rocm": {"stream": "legacy", "version": "7.2.4", "installed": "7.2.4.70204-1"},
        "torch": torch,
        "llamafactory_version": "0.9.5",
        "gpus": list(gpus),
        "packages": base_stack(),  # the venv the python_stack role installs
    }
    return HostRecord.from_dict({**values, **changes})  # rocm and torch as host.json holds them


def job_summary(job_id: str, state: str, gpus: Sequence[int] = (0,), alive: bool = True) -> dict[str, Any]:
    """A job as the probe tool summarises it (jobs/host/probe.py job_summary)."""
    return {
        "id": job_id,
        "state": {"state": state},
        "alive": alive,
        "gpus": list(gpus),
        "created_at": "2026-12-01T00:00:00Z",
        "name": job_id.split("-")[0],
        "rank": 0,
    }


def view(
    record: HostRecord | None,
    name: str | None = None,
    jobs: Sequence[Mapping[str, Any]] = (),
    readings: Sequence[Mapping[str, Any]] | None = None,
) -> HostView:
    """What the probe of a reachable host with this record (None: not provisioned) makes of it; the live
    readings default to the recorded cards, as sysfs shows them (same PCI ids, the recorded VRAM use)."""
    if readings is None:
        readings = [recorded_reading(g) for g in record.gpus] if record else []
    data = {
        "record": record.to_dict() if record else None,
        "record_error": "" if record else "no host record",
        "gpus": list(readings),
        "jobs": list(jobs),
    }
    return parse_probe(name or (record.host if record else "host"), data)


def recorded_reading(card: GpuRecord, **changes: Any) -> dict[str, Any]:
    """A live reading (jobs/host/readings.py GpuReading fields) of the card the record describes."""
    values = {
        "index": card.index,
        "device_id": card.device_id,
        "revision": card.revision,
        "vram_total": card.vram_total,
        "vram_used": card.vram_used,
        "source": "sysfs",
    }
    return {**values, **changes}


def unreachable(name: str, error: str) -> HostView:
    return HostView(name, reachable=False, error=error)


# ------------------------------------------------------------------------------------------- a job's files
CLOSED_HUB = "http://127.0.77.250:1"  # HF_ENDPOINT where nothing listens: the Hub is "unreachable" at once


def demo_job(tmp_path: Path, overrides: dict[str, object] | None = None, extra: str = "") -> Path:
    """The demo spec, its dataset, and a local model folder holding the tiny model's config.json and a
    stand-in weights file (planning hashes files, it does not load them; no Hub is asked)."""
    spec = write_spec(tmp_path, {"max_steps": 5, **(overrides or {})})
    demodata.write_dataset(tmp_path / "data")
    (tmp_path / "tiny-llama").mkdir(exist_ok=True)
    (tmp_path / "tiny-llama" / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (tmp_path / "tiny-llama" / "model.safetensors").write_bytes(b"SIMULATED weights, never loaded")
    if extra:
        spec.write_text(spec.read_text() + extra)
    return spec


# ---------------------------------------------------------------------------------------- host tools, here
def ship_code(dest: Path) -> Path:
    """radeonlab's host code exactly as a workstation receives it (the tar the laptop streams)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(hostcode.tar())) as archive:
        archive.extractall(dest, filter="data")
    return dest


def run_host_tool(
    code: Path, module: str, *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`python3 -m radeonlab.jobs.host.<module>` from the shipped code, without site-packages (-S): what a
    host runs, and proof that the tool needs nothing but the standard library."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    return subprocess.run(
        [sys.executable, "-S", "-m", f"radeonlab.jobs.host.{module}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or code.parent,  # not the checkout: its radeonlab/ folder would shadow the shipped one
        timeout=120,
    )


# ----------------------------------------------------------------------------------- a Remote that records
Answer = Callable[[str, list[str], dict[str, Any] | None], dict[str, Any]]


def queued_answer(_module: str, _args: list[str], _request: dict[str, Any] | None) -> dict[str, Any]:
    return {"state": {"state": "queued"}, "alive": False}


@dataclass
class ToolCall:
    module: str
    args: list[str]
    stdin: str | None

    @property
    def request(self) -> dict[str, Any] | None:
        return json.loads(self.stdin) if self.stdin else None


@dataclass
class RecordingRemote:
    """Stands in for jobs/ssh/connection.Remote: records every host tool call; `answer` plays the host."""

    target: HostTarget
    answer: Answer = queued_answer
    calls: list[ToolCall] = field(default_factory=list)
    closed: bool = False

    def tool(
        self, module: str, args: Sequence[str] = (), *, stdin_text: str | None = None, **_: Any
    ) -> RunResult:
        call = ToolCall(module, list(args), stdin_text)
        self.calls.append(call)
        return RunResult(json.dumps(self.answer(module, call.args, call.request)) + "\n", "", 0)

    def of(self, module: str) -> list[ToolCall]:
        return [c for c in self.calls if c.module == module]

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> RecordingRemote:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def target(name: str, address: str | None = None, groups: Sequence[str] = (), **data: Any) -> HostTarget:
    return HostTarget(name=name, hostname=address or name, groups=tuple(groups), data=data)


def probe_answer(record: HostRecord | None) -> dict[str, Any]:
    """What the probe tool of a host with this record prints (the cards as recorded, no jobs)."""
    return {
        "record": record.to_dict() if record else None,
        "record_error": "" if record else "no host record",
        "gpus": [recorded_reading(g) for g in record.gpus] if record else [],
        "jobs": [],
    }


def fleet_with(hosts: Mapping[str, tuple[HostTarget, HostRecord]], answer: Answer = queued_answer) -> Fleet:
    """A Fleet over `hosts` (the inventory, in order) whose connections are RecordingRemotes, not SSH: the
    probe answered from each host's record, every other tool by `answer`."""

    def opener(t: HostTarget) -> RecordingRemote:
        def reply(module: str, args: list[str], request: dict[str, Any] | None) -> dict[str, Any]:
            return probe_answer(hosts[t.name][1]) if module == "probe" else answer(module, args, request)

        return RecordingRemote(t, reply)

    return Fleet("inventory.py", {n: t for n, (t, _) in hosts.items()}, opener=opener)  # type: ignore[arg-type]


def planned_on(
    spec: Path,
    hosts: Mapping[str, tuple[HostTarget, HostRecord]],
    answer: Answer = queued_answer,
    *,
    host: str | None = None,
    nodes: int | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    ask_blobs: bool = False,
    **options: Any,
) -> tuple[plan_module.JobPlan, Fleet]:
    """Observe (over fleet_with's recording remotes) and plan a job, as `submit` does: the plan and the
    fleet whose connections apply_plan would use."""
    fleet = fleet_with(hosts, answer)
    job, views = observe_job(fleet, spec, environ or {}, host=host, nodes=nodes, overrides=overrides,
                             ask_blobs=ask_blobs)  # fmt: skip
    options = {"say": lambda _line: None, **options}
    plan = plan_module.plan_job(job, views, fleet.targets, inventory=fleet.inventory, host=host, nodes=nodes,
                                **options)  # fmt: skip
    return plan, fleet


def plan_with(
    spec: Path,
    hosts: Mapping[str, tuple[HostTarget, HostRecord]],
    answer: Answer = queued_answer,
    **options: Any,
) -> plan_module.JobPlan:
    """planned_on's plan alone."""
    return planned_on(spec, hosts, answer, **options)[0]
