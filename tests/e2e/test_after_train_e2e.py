"""After training, end to end through the `radeonlab` CLI on provisioned SIMULATED workstations
(radeonlab/sandbox; CPU torch stands in for ROCm torch, so nothing here says anything about a card).

On the session's shared trainer (lab1): `chat --prompt` and `--compare-base`; `export --merge` (a killed
export first, then the real one, fetched and loaded with transformers, answering like the adapter); an
interactive `chat` driven through tmux; files a config points at (a deepspeed JSON is refused on a host
without deepspeed, a missing one with file:line; an adapter folder is uploaded and trained on);
`report_to: wandb` refused before upload, then `python_stack_extras: [tensorboard]`, re-provisioning, and
`report_to: tensorboard` with its event files fetched. A second provisioned host (sw2) takes a two-value
sweep beside lab1.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from radeonlab.cli import main
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, provision_host, shared_trainer
from tests.support.faultlab import wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST, SECOND = SHARED_TRAINER, "sw2"
SWEEP_GROUP = "sweep_pair"  # an inventory group of HOST and SECOND alone (the sandbox's sandbox_groups)
JOBS_DIR = "/home/lab/radeonlab/jobs"
BLOBS_DIR = "/home/lab/radeonlab/blobs"
# the tiny model learns the task (docs/notes/llamafactory-cpu.md: 300 steps, apple -> APPLE)
TRAINED_STEPS = 300
PROMPT = f"{demodata.INSTRUCTION}\\ngarden"  # alpaca: instruction, newline, input (typed as in a shell)
NEW_TOKENS = "16"
TYPED = f"{demodata.INSTRUCTION} garden"  # what the tmux test types: one line
EXE = str(Path(sys.executable).with_name("radeonlab"))


@dataclass
class Lab:
    sandbox: Sandbox
    host: SandboxHost
    work: Path
    env: dict[str, str]
    jobs: dict[str, str] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)

    def spec(self, name: str, values: dict[str, object], extra: str = "") -> Path:
        path = write_spec(self.work, values, name=name)
        if extra:
            path.write_text(path.read_text() + extra)
        return path


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    provisioned = shared_trainer(sandbox)
    work = tmp_path_factory.mktemp("after")
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    yield Lab(sandbox, provisioned.host, work, env)


def cli(lab: Lab, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "-i", INVENTORY], env=lab.env, catch_exceptions=False)


def run_json(lab: Lab, *args: str) -> dict:
    result = cli(lab, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def submitted(result: Result) -> list[str]:
    assert result.exit_code == 0, result.output
    return re.findall(r"submitted (\S+) to", result.stdout)


def listing(host: SandboxHost, path: str) -> list[str]:
    return host.exec(f"find {path} -mindepth 1 2>/dev/null | sort", check=False).stdout.split()


def job_json(host: SandboxHost, job_id: str) -> dict:
    return json.loads(host.exec(["cat", f"{JOBS_DIR}/{job_id}/job.json"]).stdout)


@pytest.fixture(scope="module")
def trained(lab: Lab) -> str:
    """The demo job, trained long enough to answer, succeeded on lab1."""
    spec = lab.spec("trained.yaml", {"max_steps": TRAINED_STEPS, "save_steps": 1000})
    (job_id,) = submitted(cli(lab, "submit", str(spec), "--host", HOST))
    watched = cli(lab, "watch", job_id)
    assert watched.exit_code == 0, watched.output[-2000:]
    lab.jobs["trained"] = job_id
    return job_id


def test_chat_prompt_answers_and_compares_with_the_base_model(lab: Lab, trained: str) -> None:
    both = run_json(
        lab, "chat", trained, "--prompt", PROMPT, "--max-new-tokens", NEW_TOKENS, "--compare-base"
    )
    print(f"\nadapter: {both['answer']!r}; base model alone: {both['base_answer']!r}")
    assert both["answer"].strip() and both["answer"] != both["base_answer"]  # the adapter changed something
    assert "GARDEN" in both["answer"].replace(" ", "")  # and it learned the task
    lab.answers["adapter"] = both["answer"]
    shown = cli(lab, "chat", trained, "--prompt", PROMPT, "--max-new-tokens", NEW_TOKENS, "--compare-base")
    assert shown.exit_code == 0, shown.output
    rows = shown.stdout.splitlines()
    assert rows[0].startswith(f"with {trained}'s adapter | {both['answer']}".rstrip()), rows
    assert rows[-1].startswith("base model alone"), rows


def test_export_refusals_are_one_line(lab: Lab, trained: str) -> None:
    """Before the job has an export (one already made is fetched without asking for the base model)."""
    gptq = cli(lab, "export", trained, "--quantize", "4")
    assert gptq.exit_code == 2, gptq.output
    assert (
        "lacks what export --quantize 4 needs: `export_quantization_bit` needs optimum>=1.24.0" in gptq.stderr
    )
    model = f"{JOBS_DIR}/{trained}/model"
    lab.host.exec(["mv", model, f"{model}.away"])
    try:
        gone = cli(lab, "export", trained, "--merge", "--no-fetch")
    finally:
        lab.host.exec(["mv", f"{model}.away", model])
    assert gone.exit_code == 1, gone.output
    line = gone.stderr.strip().splitlines()[-1]  # after the progress line
    assert (
        line
        == f"radeonlab: error: {trained} on {HOST}: the job's base model folder {model} is gone from the host"
    )


def test_a_killed_export_leaves_no_model_that_fetch_would_take(lab: Lab, trained: str) -> None:
    export_dir = f"{JOBS_DIR}/{trained}/export"
    argv = [EXE, "export", trained, "--merge", "-i", INVENTORY]
    proc = subprocess.Popen(argv, env={**os.environ, **lab.env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        ps = "ps -eo pid=,args="

        def exporting() -> list[str]:
            return [p for p in lab.host.exec(ps).stdout.splitlines() if "llamafactory-cli export" in p]

        wait_for(exporting, 240, "llamafactory-cli export on the host", every=0.2)
        tool = [p.split()[0] for p in lab.host.exec(ps).stdout.splitlines() if "jobs.host.export" in p]
        lab.host.exec(["kill", "-9", *tool])  # the export dies on the host, as a reboot or OOM kill would
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    wait_for(lambda: not exporting(), 30, "llamafactory-cli to die with the export tool")
    left = lab.host.exec(["ls", "-a", export_dir]).stdout.split()
    assert "merged" not in left and any(n.startswith(".tmp-merged-") for n in left), left
    assert not job_json(lab.host, trained).get("exports")  # the killed export recorded nothing
    everything = run_json(lab, "fetch", trained, "--all", "--to", str(lab.work / "all"))
    assert not [f["name"] for f in everything["files"] if "export" in f["name"]]
    assert not (lab.work / "all" / trained / "export").exists()
    begun = {n.removesuffix(".yaml") for n in left if n.startswith(".tmp-merged-")}  # its folder, its config
    lab.answers["killed"] = ",".join(sorted(begun))


def test_export_merge_fetches_a_model_that_answers_like_the_adapter(lab: Lab, trained: str) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    results = lab.work / "results"
    local = results / trained  # export --to DIR, like fetch --to DIR: the job's files in DIR/JOB
    done = run_json(lab, "export", trained, "--merge", "--to", str(results))
    record = done["export"]
    assert record["name"] == "merged" and record["dir"] == "export/merged" and not record.get("already")
    if lab.answers.get("killed"):  # the killed export's leftovers were cleared first
        assert sorted(record["cleared"]) == sorted(lab.answers["killed"].split(","))
    assert [e["name"] for e in job_json(lab.host, trained)["exports"]] == ["merged"]
    assert [e["dir"] for e in run_json(lab, "status", trained)["exports"]] == ["export/merged"]
    merged = local / "export" / "merged"
    for f in done["files"]:  # each verified against the sha256 the host computed while sending
        on_host = lab.host.exec(["sha256sum", f"{JOBS_DIR}/{trained}/{f['name']}"]).stdout.split()[0]
        assert f["sha256"] == on_host == hashlib.sha256((local / f["name"]).read_bytes()).hexdigest()
    assert (merged / "config.json").is_file() and list(merged.glob("*.safetensors"))
    assert json.loads((merged / "radeonlab-export.json").read_text())["job"] == trained

    model = AutoModelForCausalLM.from_pretrained(merged).eval()
    tokenizer = AutoTokenizer.from_pretrained(merged)
    assert tokenizer.chat_template, "LLaMA-Factory's export writes the template's chat template"
    prompt = PROMPT.replace("\\n", "\n")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=int(NEW_TOKENS), do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    print(f"\nmerged model: {answer!r}; adapter on the host: {lab.answers.get('adapter')!r}")
    assert answer.strip() == lab.answers["adapter"].strip()
    # and the merged weights compute what base + adapter compute
    fetched = run_json(lab, "fetch", trained, "--to", str(results))
    assert fetched["files"] and fetched["local_dir"] == str(local)
    base = AutoModelForCausalLM.from_pretrained(lab.work / "tiny-llama")
    with torch.no_grad():
        expected = PeftModel.from_pretrained(base, local / "output").eval()(ids).logits
        assert torch.allclose(model(ids).logits, expected, atol=1e-4)

    again = cli(lab, "export", trained, "--merge", "--to", str(results))
    assert again.exit_code == 0, again.output
    assert "merged: already on the host" in again.stdout and "received 0 B" in again.stdout


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def test_interactive_chat_through_tmux_answers_two_turns_and_ends_on_ctrl_d(lab: Lab, trained: str) -> None:
    session = f"after13-chat-{os.getpid()}"
    env = [arg for k, v in lab.env.items() for arg in ("-e", f"{k}={v}")]
    chat = shlex.join([EXE, "chat", trained, "-i", INVENTORY, "--max-new-tokens", "8", "--temperature", "0"])
    command = f'{chat}; echo "chat exited $?"'  # the status on screen (tmux's own record of it can lag)
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", *env, command)
    try:
        tmux("set-option", "-t", session, "remain-on-exit", "on")

        def screen() -> str:
            return tmux("capture-pane", "-p", "-S", "-200", "-t", session)

        def prompts(n: int) -> bool:
            return screen().count("User:") >= n

        wait_for(lambda: prompts(1), 300, "the chat's first prompt", every=0.5)
        assert "Ctrl-D or `exit` ends it" in screen()
        tmux("send-keys", "-t", session, TYPED, "Enter")
        wait_for(lambda: prompts(2), 120, "the first answer", every=0.5)
        tmux("send-keys", "-t", session, "C-c")  # at the prompt: a fresh prompt, the chat goes on
        wait_for(lambda: prompts(3), 30, "a new prompt after Ctrl-C", every=0.2)
        tmux("send-keys", "-t", session, "pepper", "Enter")
        wait_for(lambda: prompts(4), 120, "the second answer", every=0.5)
        tmux("send-keys", "-t", session, "C-d")

        try:
            wait_for(lambda: "chat exited" in screen(), 60, "the chat to end on Ctrl-D", every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{screen()}") from None
        text = screen()
        print("\n" + text.strip())
        assert "chat exited 0" in text  # ended by itself, exit status 0
        answers = re.findall(r"Assistant:(.*)", text)
        assert len(answers) == 2, text  # two turns
        # Greedy (--temperature 0), the first turn is what `chat --prompt` answers: the same adapter, template
        # and decoding through the terminal (the second turn has the first in its context).
        once = run_json(lab, "chat", trained, "--prompt", TYPED, "--max-new-tokens", "8")
        print(f"interactive: {answers[0].strip()!r}; --prompt: {once['answer']!r}")
        assert answers[0].strip() == once["answer"].strip(), text
        assert "^C" in text and "Traceback" not in text and "[INFO" not in text
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_files_a_config_points_at(lab: Lab, trained: str) -> None:
    """deepspeed needs the deepspeed package, which the sandbox does not have (it needs a GPU build): the
    host is refused before upload. A missing file is refused with file:line. The same upload path then
    runs for real with a key this host can train with: a local adapter folder to continue training."""
    blobs, jobs = listing(lab.host, BLOBS_DIR), listing(lab.host, JOBS_DIR)
    (lab.work / "ds_z0.json").write_text(json.dumps({"zero_optimization": {"stage": 0}}) + "\n")
    with_ds = lab.spec("ds.yaml", {"max_steps": 2}, "deepspeed: ds_z0.json\n")
    refused = cli(lab, "submit", str(with_ds), "--host", HOST)
    assert refused.exit_code == 2, refused.output
    assert "lacks what ds.yaml needs: `deepspeed` needs deepspeed>=0.9.3" in refused.stderr
    assert "python_stack_extras: [deepspeed]" in refused.stderr and "nothing uploaded" in refused.stderr
    # On a host that has deepspeed (its record says so: the sandbox cannot install a GPU build), the plan
    # uploads the file content-addressed and points the rendered config at the host's copy.
    record_file = lab.host.root / "etc/radeonlab/host.json"
    kept = record_file.read_text()
    record = json.loads(kept)
    record["packages"] = {**record["packages"], "deepspeed": "0.19.8"}
    try:
        record_file.write_text(json.dumps(record))
        planned = run_json(lab, "submit", str(with_ds), "--host", HOST, "--dry-run")
    finally:
        record_file.write_text(kept)
    (node,) = planned["nodes"]
    (upload,) = [u for u in node["uploads"] if u["local"].endswith("ds_z0.json")]
    assert upload["dest"].endswith("inputs/deepspeed/ds_z0.json"), upload
    rendered = node["changes"]["deepspeed"]["rendered"]
    assert rendered.startswith(node["job_dir"]) and rendered.endswith("inputs/deepspeed/ds_z0.json"), rendered
    missing = lab.spec("ds-missing.yaml", {"max_steps": 2}, "deepspeed: ds_z3.json\n")
    refused = cli(lab, "submit", str(missing), "--host", HOST)
    assert refused.exit_code == 2
    line = len(missing.read_text().splitlines())
    assert f"{missing}:{line}: error: `deepspeed: ds_z3.json`: not found" in refused.stderr, refused.stderr
    assert listing(lab.host, BLOBS_DIR) == blobs and listing(lab.host, JOBS_DIR) == jobs

    adapter = lab.work / "start-adapter"
    run_json(lab, "fetch", trained, "--to", str(lab.work / "for-adapter"))
    adapter.mkdir(exist_ok=True)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        shutil.copy(lab.work / "for-adapter" / trained / "output" / name, adapter / name)
    go_on = lab.spec("go-on.yaml", {"max_steps": 5}, "adapter_name_or_path: start-adapter\n")
    (job_id,) = submitted(cli(lab, "submit", str(go_on), "--host", HOST))
    assert cli(lab, "watch", job_id).exit_code == 0
    uploaded = f"{JOBS_DIR}/{job_id}/inputs/adapter_name_or_path/start-adapter"
    on_host = lab.host.exec(["sha256sum", f"{uploaded}/adapter_model.safetensors"]).stdout.split()[0]
    assert on_host == hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()
    config = lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/config.yaml"]).stdout
    assert f"adapter_name_or_path: {uploaded}" in config


@pytest.fixture(scope="module")
def second(lab: Lab) -> SandboxHost:
    return provision_host(lab.sandbox, SECOND).host


def test_a_two_value_sweep_makes_two_jobs_across_the_fleet_and_both_finish(
    lab: Lab, second: SandboxHost
) -> None:
    # placement among these two hosts only: the worker's sandbox may hold other modules' hosts (the session's
    # provisioned ones)
    for h in (lab.host, second):
        h.set_data(sandbox_groups=[SWEEP_GROUP])
    try:
        sweep_across_the_fleet(lab, second)
    finally:
        for h in (lab.host, second):
            h.drop_data("sandbox_groups")


def sweep_across_the_fleet(lab: Lab, second: SandboxHost) -> None:
    spec = lab.spec(
        "sweep.yaml", {"max_steps": 10}, f"radeonlab:\n  placement: {{host_group: {SWEEP_GROUP}}}\n"
    )
    sweep = ("--sweep", "learning_rate=5e-3,1e-3")
    shown = cli(lab, "submit", str(spec), *sweep, "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count("plan for ") == 2 and "= learning_rate=5e-3" in shown.stdout, shown.stdout
    assert (
        f"host {HOST} (sweep placement" in shown.stdout and f"host {SECOND} (sweep placement" in shown.stdout
    )
    ids = submitted(cli(lab, "submit", str(spec), *sweep))
    assert len(ids) == 2
    hosts = {HOST: lab.host, SECOND: second}
    records = {}
    for job_id in ids:
        status = run_json(lab, "status", job_id)
        records[job_id] = job_json(hosts[status["host"]], job_id)
    assert sorted(r["overrides"]["learning_rate"] for r in records.values()) == ["1e-3", "5e-3"]  # as typed
    assert {r["host"] for r in records.values()} == {HOST, SECOND}  # placed across the fleet
    for job_id in ids:
        watched = cli(lab, "watch", job_id)
        assert watched.exit_code == 0, watched.output[-2000:]
        assert f"{job_id}: succeeded" in watched.stdout
    # both fetched with the same --to (README's `--to runs`): each in runs/JOB, each adapter its host's
    runs = lab.work / "sweep-runs"
    for job_id in ids:
        assert run_json(lab, "fetch", job_id, "--to", str(runs))["local_dir"] == str(runs / job_id)
    assert sorted(p.name for p in runs.iterdir()) == sorted(ids)
    for job_id in ids:
        adapter = f"{JOBS_DIR}/{job_id}/output/adapter_model.safetensors"
        on_host = hosts[records[job_id]["host"]].exec(["sha256sum", adapter]).stdout.split()[0]
        local = runs / job_id / "output/adapter_model.safetensors"
        assert hashlib.sha256(local.read_bytes()).hexdigest() == on_host, job_id
    assert len({(runs / i / "output/adapter_model.safetensors").read_bytes() for i in ids}) == 2  # two lrs


def test_report_to_wandb_is_refused_then_tensorboard_runs_with_the_extra(lab: Lab) -> None:
    blobs, jobs = listing(lab.host, BLOBS_DIR), listing(lab.host, JOBS_DIR)
    wandb = lab.spec("wandb.yaml", {"max_steps": 5, "report_to": "wandb"})
    refused = cli(lab, "submit", str(wandb), "--host", HOST)
    assert refused.exit_code == 2, refused.output
    last = refused.stderr.strip().splitlines()[-1]
    assert "`report_to` needs wandb, which the host's venv lacks" in last, last
    assert "fix: python_stack_extras: [wandb] in the inventory" in last and "nothing uploaded" in last
    assert listing(lab.host, BLOBS_DIR) == blobs and listing(lab.host, JOBS_DIR) == jobs

    tb = lab.spec("tb.yaml", {"max_steps": 8, "report_to": "tensorboard"})
    before = cli(lab, "submit", str(tb), "--host", HOST, "--dry-run")
    assert before.exit_code == 2 and "python_stack_extras: [tensorboard]" in before.stderr
    lab.host.set_data(python_stack_extras=["tensorboard"])
    t0 = time.monotonic()
    provision_host(lab.sandbox, HOST)  # the inventory now asks for the extra: deploy/setup.py again
    print(f"\nre-provisioned {HOST} with tensorboard in {time.monotonic() - t0:.1f}s")
    venv = "/home/lab/radeonlab/venv"
    # name==version however installed (a locked install by URL shows as `name @ URL` in pip freeze)
    pins = lab.host.exec([f"{venv}/bin/python", "-m", "pip", "list", "--format=freeze"]).stdout
    assert "tensorboard==2.21.0" in pins and "transformers==4.57.6" in pins  # the stack's pins held
    (job_id,) = submitted(cli(lab, "submit", str(tb), "--host", HOST))
    assert cli(lab, "watch", job_id).exit_code == 0
    local = lab.work / "runs"
    shown = run_json(lab, "tensorboard", job_id, "--to", str(local))
    (item,) = shown["jobs"]
    assert item["files"] and all("/runs/" in f and "events.out.tfevents." in f for f in item["files"])
    for name in item["files"]:
        data = (local / job_id / name).read_bytes()
        on_host = lab.host.exec(["sha256sum", f"{JOBS_DIR}/{job_id}/{name}"]).stdout.split()[0]
        assert hashlib.sha256(data).hexdigest() == on_host
        assert b"train/loss" in data  # the scalar transformers' TensorBoardCallback logs
    assert shown["command"] == ["tensorboard", "--logdir", str(local / job_id), "--port", "6006"]
    text = cli(lab, "tensorboard", job_id, "--to", str(local))
    assert f"view them: tensorboard --logdir {local / job_id} --port 6006" in text.stdout, text.output
