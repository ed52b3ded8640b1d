"""After training, without hosts: sweeps (values -> jobs -> hosts), the host-side export (a stand-in
llamafactory-cli in a stand-in venv, so the folder handling is real), TensorBoard event files, the chat loop
and the terminal relay. End to end on sandbox hosts: tests/e2e/test_after_train_e2e.py."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from radeonlab.contract.records import GpuRecord
from radeonlab.errors import InputError, PlacementError
from radeonlab.jobs.host import chat as host_chat
from radeonlab.jobs.host import events
from radeonlab.jobs.host import export as host_export
from radeonlab.jobs.host.tryout import chat_args
from radeonlab.jobs.plan import sweep
from radeonlab.jobs.plan.placement import Decision
from radeonlab.jobs.track import chat as track_chat
from radeonlab.jobs.track import tensorboard
from radeonlab.jobs.track.export import export_name


# --- sweeps -------------------------------------------------------------------------------------------------
def test_sweep_values_become_one_override_list_per_combination() -> None:
    parsed = sweep.parse_sweeps(["learning_rate=1e-4, 5e-5", "lora_rank=8,16"], ["max_steps=3"])
    assert parsed == [("learning_rate", ["1e-4", "5e-5"]), ("lora_rank", ["8", "16"])]
    assert sweep.combinations(parsed) == [
        ["learning_rate=1e-4", "lora_rank=8"],
        ["learning_rate=1e-4", "lora_rank=16"],
        ["learning_rate=5e-5", "lora_rank=8"],
        ["learning_rate=5e-5", "lora_rank=16"],
    ]


@pytest.mark.parametrize(
    ("items", "overrides", "message"),
    [
        (["learning_rate"], [], "expected KEY=VALUE1,VALUE2"),
        (["=1,2"], [], "expected KEY=VALUE1,VALUE2"),
        (["learning_rate=1e-4,"], [], "an empty value"),
        (["lora_rank=8,8"], [], "a value is repeated"),
        (["lora_rank=8,16", "lora_rank=32,64"], [], "lora_rank is already given"),
        (["learning_rate=1e-4,5e-5"], ["learning_rate=1e-3"], "learning_rate is already given"),
    ],
)
def test_malformed_sweeps_are_input_errors(items: list[str], overrides: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        sweep.parse_sweeps(items, overrides)


def test_a_sweep_too_large_is_refused() -> None:
    values = ",".join(str(i) for i in range(9))
    with pytest.raises(InputError, match="makes 81 jobs, more than 64"):
        sweep.combinations(sweep.parse_sweeps([f"a={values}", f"b={values}"]))


def decision(host: str, queue: int = 0, free: int = 20, card: bool = True, ok: bool = True) -> Decision:
    return Decision(host, ok, "ok" if ok else "not provisioned", card, queue, free * 2**30)


def test_a_sweep_spreads_over_free_hosts_then_queues_where_the_line_is_shortest() -> None:
    hosts = [decision("ws1", free=22), decision("ws2", free=20), decision("cpu", card=False)]
    chosen = sweep.spread([hosts] * 3)
    assert [d.host for d in chosen] == ["ws1", "ws2", "ws1"]  # never the CPU host while a card is free-ish
    busy = [decision("ws1", queue=2), decision("ws2", queue=0)]
    assert [d.host for d in sweep.spread([busy] * 3)] == ["ws2", "ws2", "ws1"]


def test_each_job_of_a_sweep_is_judged_alone() -> None:
    small = [decision("ws1"), decision("ws2")]
    big = [decision("ws1", ok=False), decision("ws2")]  # e.g. batch 8 fits only ws2's card
    assert [d.host for d in sweep.spread([small, big])] == ["ws1", "ws2"]
    with pytest.raises(PlacementError, match="no host fits job 2 of the sweep: ws1: rejected"):
        sweep.spread([small, [decision("ws1", ok=False)]])


def node(host: str, gpus: list[int], queue: int = 0) -> SimpleNamespace:
    """What the dry run reads of a NodePlan (jobs/plan/plan.py)."""
    return SimpleNamespace(host=host, gpus=[GpuRecord(index=i, name="AMD Radeon RX 7900 XTX") for i in gpus],
                           queue=queue, after=[], rank=0, placed="sweep placement", bytes_to_send=0,
                           uploads=[], preflight=SimpleNamespace(message="VRAM estimate: fits"),
                           rendered=SimpleNamespace(precision="bf16", why_precision="bf16 card", changes={}),
                           job=SimpleNamespace(root=f"/jobs/{host}"))  # fmt: skip


def test_a_sweeps_dry_run_says_which_of_its_jobs_queue_behind_a_sibling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three jobs, two hosts: the third shares ws1's GPU 0 with the first and is started after it, so its
    dry run must not say "the GPU is free". ws2's GPU 1 and its CPU are other queues."""
    from radeonlab.cli.submit import print_plan, queue_words

    plans = [SimpleNamespace(job_id=f"sw-{n}", nodes=[nd], secret_names=[],
                             spec=SimpleNamespace(path=Path("sweep.yaml"), overrides={"lora_rank": n}))
             for n, nd in enumerate([node("ws1", [0]), node("ws2", [0]), node("ws1", [0], queue=1),
                                     node("ws1", [1]), node("ws1", [])], 1)]  # fmt: skip
    sweep.queue_in_sweep(plans)  # type: ignore[arg-type]
    assert [p.nodes[0].after for p in plans] == [[], [], ["sw-1"], [], []]
    words = [queue_words(p.nodes[0]) for p in plans]
    assert words[0] == words[1] == words[3] == words[4] == "the GPU is free"
    assert words[2] == "queues after sw-1 (this sweep's, on the same GPU); 1 job(s) on that GPU now"
    print_plan(plans[2])
    assert "    queue: queues after sw-1 (this sweep's, on the same GPU)" in capsys.readouterr().out


# --- export on the host (a stand-in llamafactory-cli) -------------------------------------------------------
FAKE_CLI = """#!{python}
import json, os, sys, yaml
cfg = yaml.safe_load(open(sys.argv[2]))
out = cfg["export_dir"]
os.makedirs(out, exist_ok=True)
open(os.path.join(out, "config.json"), "w").write(json.dumps(cfg))
if os.environ.get("FAKE_EXPORT") == "die-midway":
    open(os.path.join(out, "model-00001-of-00002.safetensors"), "wb").write(b"half")
    os.kill(os.getppid(), 9)  # the export tool is killed while the weights are being written
    sys.exit(1)
if os.environ.get("FAKE_EXPORT") == "fail":
    print("RuntimeError: out of memory while merging")
    sys.exit(1)
open(os.path.join(out, "model.safetensors"), "wb").write(b"weights")
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A finished job folder with an adapter and a local base model, and a venv with the stand-in CLI."""
    root = tmp_path / "jobs" / "demo-1"
    (root / "output").mkdir(parents=True)
    (root / "output" / "adapter_model.safetensors").write_bytes(b"lora")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    (root / "state.json").write_text(json.dumps({"state": "succeeded", "pid": 0}))
    (root / "job.json").write_text(
        json.dumps({"id": "demo-1", "model": {"name": "tiny-llama", "local": True}})
    )
    config = {"model_name_or_path": str(root / "model"), "template": "default", "finetuning_type": "lora"}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    cli = tmp_path / "venv" / "bin" / "llamafactory-cli"
    cli.parent.mkdir(parents=True)
    cli.write_text(FAKE_CLI.format(python=sys.executable))
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    return root


def run_tool(job: Path, env: dict[str, str] | None = None, **req: object) -> tuple[int, dict]:
    request = {"job_dir": str(job), "venv": str(job.parents[1] / "venv"), "name": "merged", **req}
    done = subprocess.run(
        [sys.executable, "-m", "radeonlab.jobs.host.export"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def test_export_writes_a_complete_folder_records_it_and_is_not_made_twice(job: Path) -> None:
    code, record = run_tool(job)
    assert code == 0, record
    final = job / "export" / "merged"
    assert sorted(os.listdir(final)) == ["config.json", "model.safetensors", "radeonlab-export.json"]
    args = json.loads((final / "config.json").read_text())  # what llamafactory-cli export was given
    assert args["adapter_name_or_path"] == str(job / "output") and args["export_legacy_format"] is False
    assert args["model_name_or_path"] == str(job / "model") and args["export_device"] == "cpu"
    assert [e["name"] for e in json.loads((job / "job.json").read_text())["exports"]] == ["merged"]
    assert record["dir"] == "export/merged" and record["bytes"] == len(b"weights") + len(json.dumps(args))
    assert not [n for n in os.listdir(job / "export") if n.startswith(".tmp-")]
    again_code, again = run_tool(job)
    assert again_code == 0 and again["already"] is True


def test_a_killed_export_leaves_no_model_under_its_name_and_the_next_one_clears_it(job: Path) -> None:
    code, _ = (
        subprocess.run(  # the tool is SIGKILLed: no JSON line at all
            [sys.executable, "-m", "radeonlab.jobs.host.export"],
            input=json.dumps({"job_dir": str(job), "venv": str(job.parents[1] / "venv"), "name": "merged"}),
            capture_output=True,
            text=True,
            env={**os.environ, "FAKE_EXPORT": "die-midway"},
        ).returncode,
        None,
    )
    assert code == -9
    left = os.listdir(job / "export")
    assert "merged" not in left and any(n.startswith(".tmp-merged-") for n in left)
    assert "exports" not in json.loads((job / "job.json").read_text())
    assert events.event_files(str(job)) == []  # and nothing of it is an event file either
    code, record = run_tool(job)
    assert code == 0 and record["cleared"] and record["cleared"][0].startswith(".tmp-merged-")
    assert not [n for n in os.listdir(job / "export") if n.startswith(".tmp-")]


def test_a_failed_export_says_why_in_one_line_and_leaves_nothing(job: Path) -> None:
    code, answer = run_tool(job, {"FAKE_EXPORT": "fail"})
    assert code == 1 and answer["kind"] == "failed"
    assert "exit 1" in answer["error"] and "out of memory while merging" in answer["error"]
    assert os.listdir(job / "export") == ["merged.log"]


def test_export_refuses_a_running_job_a_missing_adapter_and_a_gone_base_model(job: Path) -> None:
    (job / "state.json").write_text(json.dumps({"state": "running", "pid": os.getpid()}))
    code, answer = run_tool(job)
    assert code == 3 and answer["kind"] == "refused" and "the job is running" in answer["error"]
    (job / "state.json").write_text(json.dumps({"state": "failed", "pid": 0}))
    (job / "output" / "adapter_model.safetensors").unlink()
    code, answer = run_tool(job)
    assert code == 3 and "no adapter in" in answer["error"]
    (job / "output" / "adapter_model.safetensors").write_bytes(b"lora")
    (job / "model" / "config.json").unlink()
    code, answer = run_tool(job)
    assert code == 3 and "base model folder" in answer["error"] and "is gone from the host" in answer["error"]


def test_an_export_running_elsewhere_is_busy(job: Path) -> None:
    (job / "export" / f".tmp-merged-{os.getppid()}").mkdir(parents=True)
    with pytest.raises(host_export.ExportError, match=f"running on this host \\(pid {os.getppid()}\\)"):
        host_export.clear_dead(str(job / "export"), "merged")


def test_export_args_for_a_hub_model_and_gptq() -> None:
    cfg = {"model_name_or_path": "org/m", "model_revision": "abc123", "template": "llama3", "stage": "sft"}
    args = host_export.export_args(cfg, "/j", "/j/export/.tmp-x-1", {"quantize": 4, "quantize_dataset": "/c"})
    assert args["model_revision"] == "abc123" and "stage" not in args and args["finetuning_type"] == "lora"
    assert args["export_quantization_bit"] == 4 and args["export_quantization_dataset"] == "/c"
    assert args["export_device"] == "auto"
    assert export_name(None) == "merged" and export_name(8) == "merged-gptq8"


# --- TensorBoard --------------------------------------------------------------------------------------------
def test_event_files_are_found_in_every_attempts_runs_folder(tmp_path: Path) -> None:
    for rel in (
        "output/runs/Dec01_x/events.out.tfevents.1.x.1.0",
        "output.attempt-1/runs/a/events.out.tfevents.2",
        "data/events.out.tfevents.3",
        "output/trainer_log.jsonl",
        "logs/events.out.tfevents.4",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert events.event_files(str(tmp_path)) == [
        "logs/events.out.tfevents.4",
        "output.attempt-1/runs/a/events.out.tfevents.2",
        "output/runs/Dec01_x/events.out.tfevents.1.x.1.0",
    ]


def test_the_view_command_names_each_job_of_a_sweep() -> None:
    one = tensorboard.view_command([("j1", Path("/r/j1"))])
    assert one == ["tensorboard", "--logdir", "/r/j1", "--port", "6006"]
    two = tensorboard.view_command([("j1", Path("/r/j1")), ("j2", Path("/r/j2"))], port=7000)
    assert two == ["tensorboard", "--logdir_spec", "j1:/r/j1,j2:/r/j2", "--port", "7000"]


def test_no_event_files_is_explained() -> None:
    handle = SimpleNamespace(
        id="j1", dir=SimpleNamespace(root="/h/jobs/j1"), state=SimpleNamespace(summary=lambda: "running")
    )
    text = tensorboard.no_events_reason(handle, {"report_to": "none"})  # type: ignore[arg-type]
    assert "report_to: none" in text and "python_stack_extras: [tensorboard]" in text
    text = tensorboard.no_events_reason(handle, {"report_to": ["tensorboard"], "logging_dir": "/tmp/tb"})  # type: ignore[arg-type]
    assert "logging_dir /tmp/tb is outside the job folder" in text
    assert "no TensorBoard event files yet (running)" in tensorboard.no_events_reason(
        handle,  # type: ignore[arg-type]
        {"report_to": "tensorboard"},
    )


# --- chat ---------------------------------------------------------------------------------------------------
class FakeModel:
    def __init__(self, reply: str, interrupt_at: int | None = None) -> None:
        self.reply, self.interrupt_at, self.seen = reply, interrupt_at, []

    def stream_chat(self, messages):  # noqa: ANN001, ANN201
        self.seen.append([m["content"] for m in messages])
        for i, piece in enumerate(self.reply.split()):
            if i == self.interrupt_at:
                raise KeyboardInterrupt
            yield piece + " "


def test_the_chat_loop_keeps_history_and_treats_ctrl_c_and_ctrl_d_as_a_terminal_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    typed = iter(["apple", KeyboardInterrupt, "pear", "clear", "plum", EOFError])

    def fake_input(prompt: str) -> str:
        item = next(typed)
        if isinstance(item, type):
            raise item
        return item

    monkeypatch.setattr("builtins.input", fake_input)
    model, base = FakeModel("APPLE PEAR", interrupt_at=1), FakeModel("apple")
    host_chat.loop(model, base)
    out = capsys.readouterr().out
    assert "Assistant: APPLE  [stopped]" in out and "Base model: apple" in out and "^C" in out
    assert "History has been removed." in out
    assert model.seen == [["apple"], ["apple", "APPLE ", "pear"], ["plum"]]  # the history, then cleared
    assert base.seen[-1] == ["plum"]


def test_chat_args_with_and_without_the_adapter() -> None:
    cfg = {
        "model_name_or_path": "/j/model",
        "template": "default",
        "finetuning_type": "lora",
        "model_revision": "s",
    }
    with_adapter = chat_args(cfg, "/j/output", max_new_tokens=8, do_sample=None)
    assert with_adapter["adapter_name_or_path"] == "/j/output" and with_adapter["max_new_tokens"] == 8
    assert "do_sample" not in with_adapter and with_adapter["model_revision"] == "s"
    base = chat_args(cfg, None)
    assert "adapter_name_or_path" not in base and "finetuning_type" not in base


def test_chat_temperature_zero_is_greedy_and_none_keeps_llamafactorys_sampling() -> None:
    from radeonlab.jobs.host.chat import sampling

    assert sampling(None, 8) == {"max_new_tokens": 8}  # LLaMA-Factory's own defaults: do_sample, 0.95
    assert sampling(0, 8) == {"max_new_tokens": 8, "do_sample": False}
    assert sampling(0.7, None) == {"max_new_tokens": None, "do_sample": True, "temperature": 0.7}


class SocketChannel:
    """The parts of a paramiko Channel the relay uses, over a socket pair (the other end plays the host)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.status = sock, None

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return self.status is not None

    def recv_exit_status(self) -> int:
        return self.status or 0


def test_the_relay_carries_keys_up_and_output_down_until_the_program_ends(tmp_path: Path) -> None:
    laptop, host = socket.socketpair()
    chan = SocketChannel(laptop)
    got = bytearray()

    def remote() -> None:  # echoes upper-cased lines; ends on Ctrl-D (0x04) with status 7
        while b"\x04" not in got:
            got.extend(host.recv(100))
            host.sendall(bytes(got).upper().replace(b"\x04", b""))
        chan.status = 7
        host.close()

    thread = threading.Thread(target=remote)
    thread.start()
    stdin_r, stdin_w = os.pipe()
    out = tmp_path / "out"
    os.write(stdin_w, b"hello\n")
    os.close(stdin_w)  # not a terminal: its end is sent as one Ctrl-D
    with open(out, "wb") as f:
        status = track_chat.relay(chan, stdin_r, f.fileno())
    thread.join(5)
    assert status == 7 and bytes(got) == b"hello\n\x04"
    assert b"HELLO" in out.read_bytes()


def test_a_dead_exports_config_alone_is_cleared_too(tmp_path: Path) -> None:
    (tmp_path / ".tmp-merged-999999999.yaml").write_text("x: 1\n")  # killed before llamafactory wrote a file
    (tmp_path / ".tmp-merged-other").mkdir()  # not a pid: not ours
    assert host_export.clear_dead(str(tmp_path), "merged") == [".tmp-merged-999999999"]
    assert os.listdir(tmp_path) == [".tmp-merged-other"]


def test_a_hub_base_model_must_be_whole_in_the_hosts_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = "a" * 40
    repo = tmp_path / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    snapshot = repo / "snapshots" / sha
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(host_export.ExportError, match="config or weights missing") as gone:
        host_export.base_in_cache("org/tiny", sha)
    assert gone.value.kind == "model_gone" and gone.value.detail == {"model": "org/tiny", "revision": sha}
    (snapshot / "model.safetensors").write_bytes(b"w")
    assert host_export.base_in_cache("org/tiny", sha) == str(snapshot)
    with pytest.raises(host_export.ExportError, match="not in the cache"):
        host_export.base_in_cache("org/other", None)


def test_a_file_the_config_names_is_uploaded_under_inputs(tmp_path: Path) -> None:
    """plan.uploads_of: the deepspeed JSON (and any path key) goes to inputs/<key>/ in the job folder."""
    from radeonlab.jobs.plan.model import ModelInfo
    from radeonlab.jobs.plan.uploads import uploads_of
    from radeonlab.jobs.spec.load import load

    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z0.json").write_text('{"zero_optimization": {"stage": 0}}\n')
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("model_name_or_path: org/m\ndo_train: true\ndeepspeed: ds/z0.json\n")
    uploads = uploads_of(load(spec_file), ModelInfo("org/m"), {})
    assert [(u.dest, u.local.path) for u in uploads] == [
        ("inputs/deepspeed/z0.json", tmp_path / "ds/z0.json")
    ]


def test_a_second_job_is_not_fetched_over_the_first(tmp_path: Path) -> None:
    """`fetch A --to runs/` then `fetch B --to runs/` silently replaced A's adapter: the second is refused
    (with the folder to use), the same job again is fine, an empty or new folder is fine."""
    from radeonlab.errors import InputError
    from radeonlab.jobs.track.results import refuse_mixing

    runs = tmp_path / "runs"
    refuse_mixing(runs, "demo-1")  # nothing there yet
    runs.mkdir()
    (runs / "base_model.json").write_text(json.dumps({"name": "tiny-llama", "job": "demo-1"}))
    refuse_mixing(runs, "demo-1")  # the same job again: resumes / refreshes
    with pytest.raises(InputError, match=r"holds the results of job demo-1: fetch demo-2 into another"):
        refuse_mixing(runs, "demo-2")
