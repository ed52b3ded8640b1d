"""Plan pieces without a host: which local files a job uploads and where they land, what job.json records
(code digests, LLaMA-Factory defaults, the exact model, the command line's overrides), that the plan for
scripts holds no secret value, and render's diff of spec vs rendered config and its YAML header.

The job record and the plan's JSON come from plan_job run against one recording remote (tests/
laptop_doubles.py: a schema-2 record of a simulated RX 7900 XTX, no SSH)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from radeonlab.contract.jobdir import JobDir
from radeonlab.contract.messages import BlobLink
from radeonlab.contract.parts import CodeDigest, ModelRef
from radeonlab.errors import InputError
from radeonlab.jobs.host.remedies import STEP_KEYS
from radeonlab.jobs.plan import model as model_module
from radeonlab.jobs.plan.plan import JobPlan
from radeonlab.jobs.plan.render import FORCED, render
from radeonlab.jobs.plan.uploads import dataset_files, local_dataset_info, uploads_of
from radeonlab.jobs.spec.load import load, parse_text
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.transfer import sha256_file
from radeonlab.sandbox import demodata
from tests.support.laptop_doubles import demo_job, gpu, host_record, plan_with, target

TOKEN = "hf_planSECRET0123456789"


# --- the files a job uploads ---------------------------------------------------------------------------
def test_dataset_files_are_the_ones_the_spec_trains_and_evaluates_on(tmp_path: Path) -> None:
    spec_path = demo_job(tmp_path)
    data = tmp_path / "data"
    (data / "unused.jsonl").write_text("{}\n")
    (data / "eval.jsonl").write_text("{}\n")
    info = json.loads((data / "dataset_info.json").read_text())
    info |= {"unused": {"file_name": "unused.jsonl"}, "evalset": {"file_name": "eval.jsonl"}}
    info |= {"hub": {"hf_hub_url": "llamafactory/alpaca_en"}}  # fetched on the host: no local file
    spec = load(spec_path)
    assert dataset_files(spec, info) == [data / demodata.FILE_NAME]
    both = parse_text(spec_path.read_text() + "eval_dataset: evalset, hub, demo\n", spec_path)
    assert dataset_files(both, info) == [data / demodata.FILE_NAME, data / "eval.jsonl"]  # each file once
    (data / "folder").mkdir()
    with pytest.raises(InputError, match=r"^dataset demo: .*/data/folder is a folder \(not supported"):
        dataset_files(spec, {**info, "demo": {"file_name": "folder"}})


def test_uploads_name_every_local_file_and_where_it_lands(tmp_path: Path) -> None:
    """Datasets to data/, the local model folder to model/, the radeonlab block's files to inputs/files/
    (their path relative to the spec kept), and a file a config key points at (a DeepSpeed JSON) to
    inputs/<key>/, as render points the key there."""
    spec_path = demo_job(tmp_path, extra="deepspeed: ds_z0.json\nradeonlab:\n  files: [notes.txt]\n")
    (tmp_path / "ds_z0.json").write_text('{"zero_optimization": {"stage": 0}}\n')
    (tmp_path / "notes.txt").write_text("read me on the host\n")
    spec = load(spec_path)
    info = local_dataset_info(spec)
    assert info is not None
    uploads = uploads_of(spec, model_module.resolve(spec), info)
    assert [(u.local.path, u.dest) for u in uploads] == [
        (tmp_path / "data" / demodata.FILE_NAME, f"data/{demodata.FILE_NAME}"),
        (tmp_path / "tiny-llama" / "config.json", "model/config.json"),
        (tmp_path / "tiny-llama" / "model.safetensors", "model/model.safetensors"),
        (tmp_path / "notes.txt", "inputs/files/notes.txt"),
        (tmp_path / "ds_z0.json", "inputs/deepspeed/ds_z0.json"),
    ]
    for u in uploads:  # content-addressed: what the host's store and the stage's links use
        assert (u.local.sha256, u.local.size) == (sha256_file(u.local.path), u.local.path.stat().st_size)


# --- job.json and the plan for scripts -------------------------------------------------------------------
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: object) -> JobPlan:
    spec = demo_job(tmp_path, extra="radeonlab:\n  env: {WANDB_API_KEY: w-SECRET, HF_HUB_OFFLINE: '1'}\n")
    record = host_record("ws1", [gpu("rx7900xtx")], jobs_dir="/home/lab/radeonlab/jobs")
    return plan_with(spec, {"ws1": (target("ws1"), record)}, host="ws1", **options)


def test_the_job_record_says_what_runs_on_what(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = planned(tmp_path, monkeypatch, overrides=["learning_rate=1e-4"], environ={"HF_TOKEN": TOKEN})
    node = plan.rank0
    job = plan.job_record(node)
    assert job.id == plan.job_id and job.name == "demo" and job.spec_file == "demo.yaml" and job.host == "ws1"
    # the host code the launcher must find in the job folder, file by file
    assert job.code == CodeDigest(hostcode.digest(), hostcode.file_digests())
    assert set(job.code.files) >= {"radeonlab/jobs/host/launcher.py", "radeonlab/contract/records.py"}
    # LLaMA-Factory 0.9.5's defaults for what the remedies read (the host has no copy of the key list)
    assert set(job.lf_defaults) == set(STEP_KEYS)
    assert job.lf_defaults["learning_rate"] == 5e-05 and job.lf_defaults["flash_attn"] == "auto"
    assert job.model == ModelRef(name="tiny-llama", revision=None, sha=None, local=True, endpoint=None)
    assert job.overrides == {"learning_rate": "1e-4"}  # as typed; the config gets the YAML value
    assert node.rendered.config["learning_rate"] == 1e-4 and plan.to_dict()["overrides"] == job.overrides
    assert job.gpus == [0] and job.memory_total == gpu("rx7900xtx").vram_total
    assert [a.n for a in job.attempts] == [1] and job.nodes is None and job.rank == 0
    assert job.env == {"HF_HUB_OFFLINE": "1"} and job.secret_names == ["HF_TOKEN", "WANDB_API_KEY"]
    assert node.job == JobDir.of("/home/lab/radeonlab/jobs", plan.job_id)


def test_the_plan_for_scripts_has_no_secret_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = planned(tmp_path, monkeypatch, environ={"HF_TOKEN": TOKEN})
    shown = plan.to_dict()
    text = json.dumps(shown)
    assert plan.secrets() == {"HF_TOKEN": TOKEN, "WANDB_API_KEY": "w-SECRET"}  # kept for the stage only
    assert TOKEN not in text and "w-SECRET" not in text
    assert shown["secret_names"] == ["HF_TOKEN", "WANDB_API_KEY"]
    (node,) = shown["nodes"]
    assert node["host"] == "ws1" and node["precision"] == "bf16" and node["env"] == {"HF_HUB_OFFLINE": "1"}
    assert node["changes"]["output_dir"]["rendered"] == f"/home/lab/radeonlab/jobs/{shown['id']}/output"
    assert node["bytes_to_send"] is None  # not asked (ask_blobs=False): unknown, not zero
    assert node["estimate"]["fits"] is True  # the tiny model fits the card


# --- render: the diff against the spec and the YAML header ----------------------------------------------
def test_changes_are_every_key_radeonlab_set_with_the_spec_value_and_why(tmp_path: Path) -> None:
    spec = load(demo_job(tmp_path))
    job = JobDir.of("/j", "demo-20260101-000000-abcd")
    out = render(spec, host_record("ws1", [gpu("rx7900xtx")]), job, model_local=True, base_dataset_info={})
    assert out.changes["output_dir"] == ("output", f"{job.root}/output", "the job folder's output/")
    assert out.changes["dataset_dir"] == ("data", f"{job.root}/data", "the job's uploaded data folder")
    assert out.changes["model_name_or_path"] == (
        "tiny-llama",
        f"{job.root}/model",
        "the uploaded model folder",
    )
    assert out.changes["overwrite_output_dir"] == (True, False, FORCED["overwrite_output_dir"][1])
    assert out.changes["bf16"] == (None, True, "bf16: every GPU this job uses has bf16")
    assert out.changes["include_num_input_tokens_seen"][:2] == (None, True)
    # what the spec already says is not a change: report_to none, plot_loss true, logging_nan_inf_filter false
    assert not {"report_to", "plot_loss", "logging_nan_inf_filter", "learning_rate"} & set(out.changes)
    for key, (_spec_value, rendered, _why) in out.changes.items():
        assert out.config.get(key) == rendered, key


def test_the_yaml_header_lists_the_changes_and_the_body_is_the_config(tmp_path: Path) -> None:
    spec = load(demo_job(tmp_path))
    job = JobDir.of("/j", "demo-20260101-000000-abcd")
    out = render(spec, host_record("ws2", [gpu("rx6700xt")]), job, base_dataset_info={})
    header = [line for line in out.yaml_text.splitlines() if line.startswith("#")]
    assert header[0] == (
        "# radeonlab job demo-20260101-000000-abcd on host ws2: GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2)"
    )
    assert header[1] == "# fp16: GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2) has no bf16"
    assert f"# output_dir: output -> {job.root}/output (the job folder's output/)" in header
    assert "# overwrite_output_dir: True -> False (" + FORCED["overwrite_output_dir"][1] + ")" in header
    assert (
        "# include_effective_tokens_per_second: (unset) -> True (effective tokens/s in the end summary)"
        in header
    )
    assert not [line for line in header if line.startswith("# fp16:") and "->" in line]  # precision: line 2
    assert header[-1] == "# Rendered by radeonlab from the job's spec; edit the spec, not this file."
    assert len(header) == len(out.changes) + 2  # job line, precision line, one per change but fp16, last line
    assert yaml.safe_load(out.yaml_text) == out.config


def test_no_upload_lands_on_a_name_of_the_job_folder_or_on_another_upload(tmp_path: Path) -> None:
    """A dataset file called dataset_info.json would replace the rendered data/dataset_info.json; two
    datasets with one basename would replace each other: refused, naming both files."""
    spec = load(demo_job(tmp_path))
    info = local_dataset_info(spec)
    assert info is not None
    (tmp_path / "data" / "dataset_info.json").write_text("{}")
    with pytest.raises(InputError, match=r"one of the job folder's own names"):
        uploads_of(spec, model_module.resolve(spec), {**info, "demo": {"file_name": "dataset_info.json"}})
    other = tmp_path / "other"
    other.mkdir()
    (other / demodata.FILE_NAME).write_text((tmp_path / "data" / demodata.FILE_NAME).read_text() + "\n")
    twin = {"file_name": f"../other/{demodata.FILE_NAME}", "formatting": "alpaca"}
    spec.train["dataset"] = "demo,twin"
    with pytest.raises(InputError, match=r"would both be 'data/"):
        uploads_of(spec, model_module.resolve(spec), {**info, "twin": twin})


@pytest.mark.parametrize(
    "dest",
    ["config.yaml", "config.json", "launcher.log", "train.log", "cancel.requested", "env.secret", "job.json",
     "state.json", "host/x.py", "data/dataset_info.json", "../x", "inputs/../config.yaml", "/etc/x"],
)  # fmt: skip
def test_the_host_refuses_a_link_onto_the_job_folders_own_files(tmp_path: Path, dest: str) -> None:
    """Defense on the host too (jobs/host/stage.py): whatever the laptop sends, no link replaces them."""
    from radeonlab.jobs.host import stage

    job = tmp_path / "jobs" / "j1"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("stage: sft\n")
    with pytest.raises(SystemExit, match="refusing link destination"):
        stage.link_blobs(str(job), str(tmp_path / "blobs"), [BlobLink("0" * 64, dest)])
    assert (job / "config.yaml").read_text() == "stage: sft\n"


def test_output_paths_stay_in_the_job_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """logging_dir, tokenized_path, export_dir, offload_folder, swanlab_logdir, profiler_output_dir were
    rendered as written, with the job folder as working directory: `../other-job/output` or `/home/lab/x`
    wrote into another job's folder or anywhere. Relative values land under the job's output/; absolute,
    `~` and `..` are refused by check with the relative fix; cache_dir (the shared model cache) is refused."""
    from radeonlab.jobs.spec.checks import check_spec

    extra = "logging_dir: runs/tb\ntokenized_path: tok\nexport_dir: exported\noffload_folder: offloaded\n"
    spec = demo_job(tmp_path, extra=extra)
    record = host_record("ws1", [gpu("rx7900xtx")], jobs_dir="/home/lab/radeonlab/jobs")
    plan = plan_with(spec, {"ws1": (target("ws1"), record)}, host="ws1")
    config, output = plan.rank0.rendered.config, plan.rank0.job.output
    assert config["logging_dir"] == f"{output}/runs/tb" and config["tokenized_path"] == f"{output}/tok"
    assert config["export_dir"] == f"{output}/exported"
    assert config["offload_folder"] == f"{output}/offloaded"
    bad = "logging_dir: ../other-job/output\nswanlab_logdir: /home/lab/x\nprofiler_output_dir: ~/p\n"
    bad += "cache_dir: c\n"
    (tmp_path / "bad").mkdir()
    problems = {p.message: p.fix for p in check_spec(load(demo_job(tmp_path / "bad", extra=bad)))}
    escaping = [m for m in problems if "is outside the job folder" in m]
    assert [m.split("`")[1] for m in escaping] == [
        "logging_dir: ../other-job/output",
        "swanlab_logdir: /home/lab/x",
        "profiler_output_dir: ~/p",
    ]
    assert problems[escaping[0]] == "logging_dir: output (relative: it lands under the job's output/)"
    assert any(m.startswith("`cache_dir` cannot be set: every job reads models from") for m in problems)


def test_a_job_with_nothing_to_upload_draws_no_bar_and_says_so() -> None:
    """A job whose model and datasets all come from the Hub uploads nothing: submit drew an empty progress
    bar for it; now one line says there is nothing to send (and no connection is used for it)."""
    import contextlib
    from types import SimpleNamespace

    from radeonlab.jobs.apply.submit import upload

    drawn: list[str] = []
    said: list[str] = []

    @contextlib.contextmanager
    def bar(label: str):  # noqa: ANN202
        drawn.append(label)
        yield lambda done, total: None

    node = SimpleNamespace(host="ws1", uploads=[], present=None, record=None)
    report = upload(node, None, bar, said.append)  # type: ignore[arg-type]
    assert drawn == [] and said == ["upload -> ws1: nothing to send"]
    assert report.files == [] and report.bytes_sent == 0
