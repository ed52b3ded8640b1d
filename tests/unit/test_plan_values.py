"""Observe, plan, apply (issue 24 item 2): `plan_job` over hand-made views, with no host and no connection
anywhere (the placement it chooses, the bytes it would send, the Hub environment, its refusals); the plan
as a value `dataclasses.asdict` walks, with no secret value in it; and the one probe that answers what the
plan needs (the host's store and model cache), run from the shipped host code."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import pytest

from radeonlab.contract.parts import CodeDigest
from radeonlab.contract.records import HostRecord
from radeonlab.errors import ModelError, NotProvisionedError, PlacementError
from radeonlab.jobs.apply.secrets import Secrets
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.view import HostView, ModelCache, ProbeAsk, model_key
from radeonlab.jobs.plan.inputs import JobInputs, candidates, prepare, probe_ask
from radeonlab.jobs.plan.model import ModelInfo
from radeonlab.jobs.plan.plan import JobPlan, plan_job
from radeonlab.jobs.plan.sweep import plan_sweep
from radeonlab.jobs.ssh import hostcode
from tests.support.laptop_doubles import (
    demo_job,
    gpu,
    host_record,
    job_summary,
    run_host_tool,
    ship_code,
    target,
    view,
)
from tests.unit.test_fleet import run_probe

TOKEN = "hf_" + "Q" * 34  # the shape of a Hub token (jobs/spec/tokens.py): a secret wherever it appears
CODE = hostcode.file_digests()  # read once: the tests below compare plans, not the code


def inputs(tmp_path: Path, environ: dict[str, str] | None = None, extra: str = "") -> JobInputs:
    """The demo job as the laptop sees it (local model, local dataset): no host is asked."""
    spec = demo_job(tmp_path, extra=extra)
    return prepare(spec, TARGETS, environ or {}, CodeDigest(hostcode.digest(), CODE))


JOBS = "/home/lab/radeonlab/jobs"
CACHE = "/home/lab/radeonlab/models"
TARGETS: dict[str, HostTarget] = {n: target(n, f"10.0.0.{i}") for i, n in enumerate(("ws1", "ws2", "ws3"), 1)}


def fleet_views(**busy: int) -> dict[str, HostView]:
    """ws1..ws3, each an RX 7900 XTX; `busy`: jobs running on GPU 0 of that host."""
    out = {}
    for name in TARGETS:
        jobs = [job_summary(f"j{name}-{k}", "running") for k in range(busy.get(name, 0))]
        record = host_record(name, [gpu("rx7900xtx")], jobs_dir=JOBS, model_cache=CACHE)
        out[name] = view(record, jobs=jobs)
    return out


def test_placement_is_chosen_from_the_views_alone(tmp_path: Path) -> None:
    """No connection exists here: the shortest queue wins, every host's line is said and kept in the plan."""
    said: list[str] = []
    plan = plan_job(inputs(tmp_path), fleet_views(ws1=2, ws2=0, ws3=1), TARGETS, say=said.append)
    node = plan.rank0
    assert (node.host, node.address, node.queue) == ("ws2", "10.0.0.2", 0)
    assert node.placed.startswith("placement: GPU 0 ") and "queue 0" in node.placed
    assert said == plan.placement and said[-1].startswith("placement: chose ws2 (")
    assert [line.split(":")[1].strip() for line in said[:3]] == ["ws1", "ws2", "ws3"]


def test_a_host_not_probed_is_judged_unreachable_not_skipped(tmp_path: Path) -> None:
    views = fleet_views()
    del views["ws1"], views["ws2"]
    plan = plan_job(inputs(tmp_path), views, TARGETS, say=lambda _l: None)
    assert plan.rank0.host == "ws3"
    assert plan.placement[0] == "placement: ws1: rejected: unreachable (not probed)"


def test_the_probe_asks_for_what_the_plan_reads(tmp_path: Path) -> None:
    job = inputs(tmp_path)
    ask = probe_ask(job, ask_blobs=True)
    digests = {u.local.sha256 for u in job.uploads}
    assert set(ask.blobs or ()) == digests and len(ask.blobs or ()) == len(digests)  # each content once
    assert ask.models == ()  # a local model: no cache question
    assert probe_ask(job, ask_blobs=False).blobs is None
    hub = dataclasses.replace(job, model=ModelInfo("org/m", sha="c0ffee"))
    assert probe_ask(hub, ask_blobs=False).models == ("org/m@c0ffee",)
    args = ProbeAsk(("/data/m",), ("aa", "bb"), ("org/m@main",)).args()
    assert args == ["--path", "/data/m", "--blob", "aa", "--blob", "bb", "--model", "org/m@main"]
    # placement's candidates: the host group's; a named host: that one (an unknown name refused before SSH)
    assert candidates(job, TARGETS, None, None) == (list(TARGETS.values()), False)
    assert candidates(job, TARGETS, "ws3", None) == ([TARGETS["ws3"]], True)


def test_the_bytes_to_send_are_what_the_probe_did_not_find(tmp_path: Path) -> None:
    job = inputs(tmp_path)
    first, *rest = job.uploads
    views = fleet_views()
    views["ws1"].blobs = frozenset({first.local.sha256, "f" * 64})  # one of ours, one of another job
    plan = plan_job(job, views, TARGETS, host="ws1", say=lambda _l: None)
    node = plan.rank0
    assert node.present == {first.local.sha256}
    assert node.bytes_to_send == sum({u.local.sha256: u.local.size for u in rest}.values()) > 0
    not_asked = plan_job(job, fleet_views(), TARGETS, host="ws1", say=lambda _l: None)
    assert not_asked.rank0.present is None and not_asked.rank0.bytes_to_send is None  # unknown, not zero


def test_a_hub_model_the_cache_holds_runs_offline_and_one_it_lacks_is_refused_offline(tmp_path: Path) -> None:
    job = inputs(tmp_path)
    model = ModelInfo("org/m", sha="c0ffee", offline=True)  # the Hub unreachable from the laptop
    hub = dataclasses.replace(job, model=model, uploads=[])
    views = fleet_views()
    views["ws1"].models = {model_key("org/m", "c0ffee"): ModelCache(True)}
    said: list[str] = []
    plan = plan_job(hub, views, TARGETS, host="ws1", say=said.append)
    assert plan.rank0.env["HF_HUB_OFFLINE"] == "1"
    assert plan.rank0.env["HF_HUB_CACHE"] == CACHE
    views["ws2"].models = {model_key("org/m", "c0ffee"): ModelCache(False, "not pulled into this cache")}
    with pytest.raises(ModelError) as err:
        plan_job(hub, views, TARGETS, host="ws2", say=said.append)
    assert str(err.value) == (
        "org/m: the Hub is unreachable from this laptop and ws2's model cache does not hold it (not pulled "
        "into this cache); pull it first when the Hub is back: radeonlab models pull org/m --limit ws2"
    )
    online = dataclasses.replace(hub, model=dataclasses.replace(model, offline=False))
    assert "HF_HUB_OFFLINE" not in plan_job(online, views, TARGETS, host="ws2", say=said.append).rank0.env


def test_refusals_name_the_host_and_why(tmp_path: Path) -> None:
    job = inputs(tmp_path)
    views = fleet_views()
    views["ws1"] = view(None, "ws1")  # reachable, not provisioned
    with pytest.raises(NotProvisionedError, match=r"^ws1 is not provisioned \(no /etc/radeonlab/host.json\)"):
        plan_job(job, views, TARGETS, inventory="lab.py", host="ws1", say=lambda _l: None)
    everyone_down = {n: HostView(n, reachable=False, error="timed out") for n in TARGETS}
    with pytest.raises(PlacementError, match=r"^no host fits this job: ws1: rejected: unreachable"):
        plan_job(job, everyone_down, TARGETS, say=lambda _l: None)
    small = inputs(tmp_path, extra="radeonlab:\n  placement: {min_vram_gb: 48}\n")
    with pytest.raises(PlacementError, match=r"^ws2: GPU 0 .* placement min_vram_gb is 48 GB$"):
        plan_job(small, fleet_views(), TARGETS, host="ws2", say=lambda _l: None)


def test_the_plan_is_a_value_asdict_walks_with_no_secret_in_it(tmp_path: Path) -> None:
    environ = {"HF_TOKEN": TOKEN}
    block = "radeonlab:\n  env: {WANDB_API_KEY: w-SECRET, ORG: lab}\n  notify: ['json://n-SECRET@127.0.0.1/']\n"
    job = inputs(tmp_path, environ, extra=block)
    plan = plan_job(job, fleet_views(), TARGETS, host="ws1", say=lambda _l: None)
    walked = dataclasses.asdict(plan)
    text = json.dumps(walked, default=str)
    assert TOKEN not in text and "w-SECRET" not in text and "n-SECRET" not in text and "Secrets" not in text
    assert walked["secret_names"] == ["HF_TOKEN", "RADEONLAB_NOTIFY_URLS", "WANDB_API_KEY"]
    assert walked["spec"]["radeonlab"]["env"] == {"ORG": "lab"}  # the plain part of the spec's env stays
    assert plan.secrets() == {  # for the stage request only
        "HF_TOKEN": TOKEN,
        "WANDB_API_KEY": "w-SECRET",
        "RADEONLAB_NOTIFY_URLS": '["json://n-SECRET@127.0.0.1/"]',
    }
    assert TOKEN not in repr(plan) and TOKEN not in json.dumps(plan.to_dict())
    # what asdict makes is the plan again: its nodes, record and rendered config, field by field
    (node,) = walked["nodes"]
    assert node["host"] == "ws1" and node["record"] == dataclasses.asdict(plan.rank0.record)
    assert node["rendered"]["config"] == plan.rank0.rendered.config
    assert walked["code"]["files"] == CODE
    assert copy.deepcopy(plan).secrets() == plan.secrets()
    # the secrets' own type never serialises
    secret = Secrets({"HF_TOKEN": TOKEN})
    assert repr(secret) == "Secrets(HF_TOKEN)" and copy.deepcopy(secret) is secret
    with pytest.raises(TypeError, match="not serialised"):
        pickle.dumps(secret)
    assert {f.name for f in dataclasses.fields(JobPlan)}.isdisjoint({"secret_values", "_secrets"})


def test_a_sweep_is_planned_over_one_set_of_views(tmp_path: Path) -> None:
    """Two jobs, two free hosts: side by side; a third queues after the first (placement's spread)."""
    job = inputs(tmp_path)
    jobs = [dataclasses.replace(job), dataclasses.replace(job), dataclasses.replace(job)]
    views = fleet_views(ws3=5)
    plans = plan_sweep(jobs, views, TARGETS, say=lambda _l: None)
    assert [p.rank0.host for p in plans] == ["ws1", "ws2", "ws1"]
    assert plans[2].rank0.after == [plans[0].job_id] and plans[1].rank0.after == []
    assert plans[2].rank0.placed.endswith(", after 1 job(s) of this sweep")


def test_one_probe_answers_the_store_and_the_model_cache(tmp_path: Path) -> None:
    """The host side (jobs/host/probe.py from the shipped code, stdlib only): which of the asked contents
    the store holds, and whether the model cache holds a revision whole (the manifest a pull writes)."""
    jobs_dir = tmp_path / "lab" / "jobs"
    cache = tmp_path / "lab" / "models"
    record = host_record("ws1", jobs_dir=str(jobs_dir), model_cache=str(cache)).to_dict()
    record_path = tmp_path / "host.json"
    record_path.write_text(json.dumps(record))
    blob = b"SIMULATED dataset row\n"
    held = hashlib.sha256(blob).hexdigest()
    (tmp_path / "lab" / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "lab" / "blobs" / "sha256" / held).write_bytes(blob)
    sha = "a" * 40
    folder = cache / "models--org--m"
    (folder / "snapshots" / sha).mkdir(parents=True)
    (folder / "snapshots" / sha / "config.json").write_text("{}")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(sha)
    (folder / ".radeonlab").mkdir()
    (folder / ".radeonlab" / f"{sha}.json").write_text(
        json.dumps({"files": [{"path": "config.json", "size": 2}]})
    )
    args = ProbeAsk(blobs=(held, "0" * 64), models=("org/m@main", "org/other@main")).args()
    out = run_probe(tmp_path, record_path, "--jobs", "none", *args)
    assert out["blobs"] == [held]
    assert out["models"]["org/m@main"] == {"complete": True, "reason": ""}
    assert out["models"]["org/other@main"]["complete"] is False
    assert "not pulled" in out["models"]["org/other@main"]["reason"]
    parsed = view(HostRecord.from_dict(record), "ws1")
    assert parsed.blobs is None and parsed.models == {}  # not asked: unknown
    plain = run_host_tool(
        ship_code(tmp_path / "code2"), "probe", "--record", str(record_path), "--jobs", "none"
    )
    assert "blobs" not in json.loads(plain.stdout) and "models" not in json.loads(plain.stdout)
