"""check_spec / check_file: no false alarms on LLaMA-Factory's own examples, every real mistake named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.spec.checks import DID_YOU_MEAN_MAX, check_path
from radeonlab.jobs.spec.datasets import DatasetAttr, check_file
from radeonlab.jobs.spec.problems import ERROR, INFO
from radeonlab.jobs.spec.rows import json_rows

HERE = Path(__file__).parents[1]
LF = HERE / "fixtures" / "llamafactory-v0.9.5"
LF_EXTRA = HERE / "fixtures" / "llamafactory-v0.9.5-data-extra"
SEED = HERE.parent / "src/radeonlab/jobs/examples/seed.yaml"
# The two ASFT examples name datasets (`med`, `math`) that 0.9.5's dataset_info.json does not define:
# LLaMA-Factory itself stops with `Undefined dataset`, so the check is right to call them errors.
UNDEFINED_IN_RELEASE = {
    "extras/asft/llama2_full_asft.yaml": "med",
    "extras/asft/qwen2_full_asft.yaml": "math",
}


@pytest.fixture(scope="module")
def lf_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LLaMA-Factory 0.9.5's data folder: the shared fixture copy plus the demo files it lacked."""
    folder = tmp_path_factory.mktemp("lf-data")
    for src in [*(LF / "data").iterdir(), *LF_EXTRA.iterdir()]:
        (folder / src.name).symlink_to(src.resolve())
    return folder


EXAMPLES = sorted(str(p.relative_to(LF / "examples")) for p in (LF / "examples").rglob("*.yaml"))


def test_all_examples_are_present() -> None:
    assert len(EXAMPLES) == 82


# Paths in LLaMA-Factory's examples are relative to its checkout, not to the example file: radeonlab (which
# resolves them from the spec's folder) refuses those as missing files. tests/unit/test_examples_table.py has
# every example's verdict.
PATH_ERROR = ": not found ("


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_configs_have_no_false_alarms(example: str, lf_data: Path) -> None:
    problems = check_path(LF / "examples" / example, dataset_dir=lf_data)
    errors = [str(p) for p in problems if p.severity == ERROR and PATH_ERROR not in p.message]
    if example in UNDEFINED_IN_RELEASE:
        assert len(errors) == 1 and f"`Undefined dataset {UNDEFINED_IN_RELEASE[example]}`" in errors[0]
    else:
        assert errors == []


def test_examples_really_check_their_datasets(lf_data: Path, tmp_path: Path) -> None:
    """The clean result above comes from reading the files: a broken copy of the data folder is caught."""
    broken = tmp_path / "data"
    broken.mkdir()
    for src in lf_data.iterdir():
        (broken / src.name).symlink_to(src.resolve())
    rows = json.loads((lf_data / "identity.json").read_text())
    del rows[3]["output"]  # indent=2: "[" + 5 lines per row, so row 3 starts on line 17
    (broken / "identity.json").unlink()
    (broken / "identity.json").write_text(json.dumps(rows, indent=2))
    problems = check_path(LF / "examples/train_lora/qwen3_lora_sft.yaml", dataset_dir=broken)
    assert [(Path(p.file).name, p.line) for p in problems if p.severity == ERROR] == [("identity.json", 17)]


def _stage_for(entry: dict) -> str:
    if entry.get("ranking"):
        return "rm"
    if "kto_tag" in entry.get("columns", {}):
        return "kto"
    if entry.get("columns", {}).get("prompt") == "text":
        return "pt"
    return "sft"


def test_every_demo_dataset_passes(lf_data: Path) -> None:
    info = json.loads((lf_data / "dataset_info.json").read_text())
    local = {name: e for name, e in info.items() if "file_name" in e and (lf_data / e["file_name"]).exists()}
    assert len(local) == 8  # identity, alpaca en/zh, glaive, mllm_demo, dpo, kto, c4
    for name, entry in local.items():
        problems = check_file(lf_data / entry["file_name"], DatasetAttr.from_info(entry), _stage_for(entry))
        assert problems == [], name


@pytest.mark.parametrize("name", ["v1_sft_demo.jsonl", "reason_tool_use_demo_50.jsonl"])
def test_v1_demo_files_parse(name: str) -> None:
    # LLaMA-Factory v1 data (not in dataset_info.json): well-formed JSON Lines, one object per line
    rows = list(json_rows(LF / "data" / name))
    assert rows and all(isinstance(r, dict) for _, r in rows)


# ------------------------------------------------------------------------------------------- the seed


def test_seed_config_names_each_invalid_key_with_its_fix() -> None:
    result = CliRunner().invoke(main, ["check", str(SEED)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    text = SEED.read_text().splitlines()

    def reported(key: str, fix: str) -> None:
        line = next(i for i, t in enumerate(text, 1) if t.startswith(f"{key}:"))
        hits = [x for x in lines if x.startswith(f"{SEED}:{line}: error:") and key in x]
        assert len(hits) == 1 and f"(fix: {fix}" in hits[0], lines

    reported("compute_type", "bf16: true")
    reported("disable_flash_attn", "flash_attn: disabled")
    reported("ddp_backend", "remove ddp_backend")
    assert sum(": error:" in x for x in lines) == 3


def test_seed_dataset_with_one_bad_line(tmp_path: Path) -> None:
    spec = tmp_path / "seed.yaml"
    spec.write_text(SEED.read_text())
    (tmp_path / "seed-data").mkdir()
    (tmp_path / "seed-data/dataset_info.json").write_text(
        json.dumps({"seed_demo": {"file_name": "seed_demo.jsonl"}})
    )
    good = '{"instruction": "Uppercase the word.", "input": "apple", "output": "APPLE"}\n'
    (tmp_path / "seed-data/seed_demo.jsonl").write_text(
        good * 4 + '{"instruction": "x", "input": "y", "output": \n' + good
    )
    result = CliRunner().invoke(main, ["check", str(spec), "--json"])
    assert result.exit_code == 1
    problems = json.loads(result.output)
    data = [p for p in problems if p["file"].endswith("seed_demo.jsonl")]
    assert len(data) == 1 and data[0]["line"] == 5 and "malformed JSON" in data[0]["message"]
    assert {"file", "line", "message", "severity", "fix"} <= set(data[0])


# ------------------------------------------------------------------------------------------- keys


def spec_file(tmp_path: Path, body: str, rows: list | None = None, info: dict | None = None) -> Path:
    if rows is not None:
        (tmp_path / "data").mkdir(exist_ok=True)
        (tmp_path / "data/d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / "data/dataset_info.json").write_text(json.dumps(info or {"d": {"file_name": "d.jsonl"}}))
    path = tmp_path / "job.yaml"
    # two header lines; without a dataset the job does not train, so "no dataset" is not an error here (nor is
    # do_predict's need of predict_with_generate and an eval dataset: jobs/spec/lf_rules.py)
    trains = rows is not None or "dataset:" in body
    path.write_text(
        "model_name_or_path: m\n" + ("do_train: true\n" if trains else "do_train: false\n") + body
    )
    return path


def messages(tmp_path: Path, body: str, **kw: object) -> list[str]:
    return [
        f"{p.line}: {p.severity}: {p.message} | {p.fix}" for p in check_path(spec_file(tmp_path, body, **kw))
    ]


def test_unknown_key_did_you_mean(tmp_path: Path) -> None:
    out = messages(tmp_path, "learnig_rate: 1.0e-4\nfoo_bar_baz: 1\n")
    assert (
        out[0].startswith("3: error: unknown key `learnig_rate`")
        and "did you mean `learning_rate`?" in out[0]
    )
    assert out[1].startswith("4: error: unknown key `foo_bar_baz`") and out[1].endswith("| remove it")


def test_did_you_mean_is_searched_for_the_first_unknown_keys_only(tmp_path: Path) -> None:
    """Thousands of unknown keys took minutes of did-you-mean searches (tests/bench/checker.py)."""
    padding = "".join(f"zz_unknown_{i}: 1\n" for i in range(DID_YOU_MEAN_MAX))
    out = messages(tmp_path, "learnig_rate: 1.0e-4\n" + padding + "lerning_rate: 1.0e-4\n")
    unknown = [m for m in out if "unknown key" in m]
    assert len(unknown) == DID_YOU_MEAN_MAX + 2, out
    assert "did you mean `learning_rate`?" in unknown[0] and unknown[-1].endswith("| remove it"), unknown


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("flash_attn: eager\n", "`flash_attn: eager` is not a valid value"),
        ("optim: adamw_bogus\n", "`optim: adamw_bogus` is not a valid value"),
        ("lr_scheduler_type: cosin\n", "did you mean `cosine`?"),
        ("stage: grpo\n", "`stage: grpo` is not a valid value"),
        ("template: no_such_template\n", "`template: no_such_template` is not a valid value"),
        ("finetuning_type: qlora\n", "`finetuning_type: qlora` is not a valid value"),
        ("bf16: 'yes'\n", "`bf16` needs true or false"),
        ("num_train_epochs: '3'\n", "needs a float, got the text '3'"),
        ("learning_rate: '1e-4'\n", "needs a float, got the text '1e-4'"),
        ("per_device_train_batch_size: 1.5\n", "needs an int, got float 1.5"),
        ("bf16: true\nfp16: true\n", "bf16 and fp16 are both true"),
    ],
)
def test_value_errors(tmp_path: Path, body: str, expected: str) -> None:
    errors = [m for m in messages(tmp_path, body) if ": error:" in m]
    assert len(errors) == 1 and expected in errors[0], errors


def test_valid_values_pass(tmp_path: Path) -> None:
    body = (
        "flash_attn: disabled\noptim: adamw_torch\nlr_scheduler_type: cosine\nstage: sft\ntemplate: llama3\n"
        "num_train_epochs: 3\nlearning_rate: 1e-4\nbf16: true\nreport_to: none\nddp_backend: nccl\n"
        "resume_from_checkpoint: null\n"
    )
    assert [m for m in messages(tmp_path, body) if ": error:" in m] == []


def test_compute_type_fp16_fix(tmp_path: Path) -> None:
    out = messages(tmp_path, "compute_type: fp16\n")
    assert out[0].endswith("| fp16: true")


def test_missing_model_and_dataset(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("stage: sft\ndo_train: true\n")
    out = [str(p) for p in check_path(path)]
    assert any("`model_name_or_path` is missing" in m for m in out)
    assert any(":2: error: do_train is true but no `dataset`" in m for m in out)


# ------------------------------------------------------------------------------------------- datasets

ROW = {"instruction": "Uppercase the word.", "input": "apple", "output": "APPLE"}


def test_alpaca_rows_llamafactory_would_drop(tmp_path: Path) -> None:
    rows = [ROW, {"instruction": "i", "input": ""}, {**ROW, "output": ""}, ROW]
    out = messages(tmp_path, "dataset: d\n", rows=rows)
    assert out[0].startswith("2: error: row dropped: `output` is missing")
    assert out[1].startswith("3: error: empty `output`")
    assert len(out) == 2


def test_mixed_column_types(tmp_path: Path) -> None:
    out = messages(tmp_path, "dataset: d\n", rows=[ROW, {**ROW, "output": ["A", "B"]}])
    assert any(m.startswith("2: error: `output` is a list here but a string on line 1") for m in out)


def test_column_in_no_row(tmp_path: Path) -> None:
    rows = [{"instruction": "a", "output": "b"}]
    out = messages(tmp_path, "dataset: d\n", rows=rows)
    assert any("column `input` appears in no row" in m for m in out)


SHARE = {"d": {"file_name": "d.jsonl", "formatting": "sharegpt"}}


def conv(*roles: str) -> dict:
    return {"conversations": [{"from": r, "value": f"text {i}"} for i, r in enumerate(roles)]}


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (conv("gpt", "human"), "message 1 has from='gpt' where 'human' or 'observation' must come"),
        (conv("human", "gpt", "human"), "row dropped: 3 turns"),
        (conv("human", "human"), "message 2 has from='human'"),
        ({"conversations": []}, "row dropped: no messages"),
        ({"conversations": [{"from": "human"}]}, "message 1 needs `from` and `value` keys"),
        ({"other": 1}, "`conversations` is missing or not a list"),
    ],
)
def test_sharegpt_rows(tmp_path: Path, row: dict, expected: str) -> None:
    out = messages(tmp_path, "dataset: d\n", rows=[conv("human", "gpt"), row], info=SHARE)
    assert any(m.startswith("2: error:") and expected in m for m in out), out


def test_sharegpt_system_first_and_custom_tags(tmp_path: Path) -> None:
    info = {
        "d": {
            "file_name": "d.jsonl",
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
                "system_tag": "system",
            },
        }
    }
    good = {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
        ]
    }
    assert messages(tmp_path, "dataset: d\n", rows=[good], info=info) == []


def test_ranking_and_kto_rows(tmp_path: Path) -> None:
    info = {
        "d": {
            "file_name": "d.jsonl",
            "ranking": True,
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"},
        }
    }
    good = {
        **conv("human"),
        "chosen": {"from": "gpt", "value": "y"},
        "rejected": {"from": "gpt", "value": "n"},
    }
    bad = {**conv("human"), "chosen": {"from": "gpt", "value": "y"}}
    out = messages(tmp_path, "stage: dpo\ndataset: d\n", rows=[good, bad], info=info)
    assert len(out) == 1 and out[0].startswith(
        "2: error: row dropped: `chosen` and `rejected` must be messages"
    )
    # a ranking dataset in an sft run is refused by LLaMA-Factory as a whole
    out = messages(tmp_path, "stage: sft\ndataset: d\n", rows=[good], info=info)
    assert any("not applicable in the current training stage" in m for m in out)
    kto = {
        "d": {
            "file_name": "d.jsonl",
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "kto_tag": "label"},
        }
    }
    out = messages(
        tmp_path,
        "stage: kto\ndataset: d\n",
        rows=[{**conv("human", "gpt"), "label": True}, conv("human", "gpt")],
        info=kto,
    )
    assert len(out) == 1 and out[0].startswith("2: error: row dropped: it needs a boolean `label`")


def test_undefined_and_hub_datasets(tmp_path: Path) -> None:
    info = {"alpaca_demo": {"file_name": "d.jsonl"}, "hub": {"hf_hub_url": "org/set"}}
    out = messages(tmp_path, "dataset: alpaca_demo,hub, alpaca_dmeo\n", rows=[ROW], info=info)
    assert any(m.startswith("3: info: dataset 'hub' (org/set) is fetched from the hub") for m in out)
    assert any(
        m.startswith("3: error: dataset 'alpaca_dmeo' is not defined") and "did you mean `alpaca_demo`?" in m
        for m in out
    )
    assert len(out) == 2


def test_did_you_mean_is_searched_for_the_first_undefined_datasets_only(tmp_path: Path) -> None:
    info = {"alpaca_demo": {"file_name": "d.jsonl"}}
    names = ["alpaca_dmeo", *(f"zz{i}" for i in range(DID_YOU_MEAN_MAX)), "alpaca_dmoe"]
    out = messages(tmp_path, f"dataset: {','.join(names)}\n", rows=[ROW], info=info)
    undefined = [m for m in out if "is not defined" in m]
    assert len(undefined) == DID_YOU_MEAN_MAX + 2, out
    assert "did you mean `alpaca_demo`?" in undefined[0] and "did you mean" not in undefined[-1], undefined


def test_radeonlab_block_dataset_gets_an_entry(tmp_path: Path) -> None:
    (tmp_path / "mine.jsonl").write_text(json.dumps(ROW) + "\n" + json.dumps({"instruction": "x"}) + "\n")
    path = spec_file(tmp_path, "dataset: mine\nradeonlab:\n  datasets: [mine.jsonl]\n")
    problems = check_path(path)
    assert [(Path(p.file).name, p.line) for p in problems] == [("mine.jsonl", 2)]


@pytest.mark.parametrize(
    ("name", "content", "line", "expected"),
    [
        ("d.jsonl", b"", 1, "empty file (0 bytes)"),
        (
            "d.jsonl",
            b'{"instruction": "a", "input": "", "output": "b"}\n{"instruction": "caf\xe9"}\n',
            2,
            "not UTF-8",
        ),
        (
            "d.json",
            b'[\n {"instruction": "a", "input": "", "output": "b"},\n {"instruction": "a" "x"}\n]\n',
            3,
            "malformed JSON",
        ),
        ("d.json", b'[\n {"instruction": "a", "input": "", "output": "b"}\n', 2, "ends before the closing ]"),
        ("d.json", b"[\n 1\n]\n", 2, "a row must be a JSON object"),
        ("d.tsv", b"a\tb\n", 1, "cannot load .tsv files"),
    ],
)
def test_file_level_problems(tmp_path: Path, name: str, content: bytes, line: int, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    problems = check_file(path, DatasetAttr(), "sft")
    assert any(p.line == line and expected in p.message and p.file == str(path) for p in problems), problems


def test_large_array_streams_with_exact_line(tmp_path: Path) -> None:
    rows = [dict(ROW, input=f"w{i}") for i in range(20000)]
    rows[15000] = {"instruction": "i", "input": "x"}  # no output
    path = tmp_path / "big.json"
    path.write_text(json.dumps(rows, indent=2))
    problems = check_file(path, DatasetAttr(), "sft")
    text = path.read_text().splitlines()
    assert len(problems) == 1
    assert text[problems[0].line - 1].strip() == "{" and text[problems[0].line + 1].strip() == '"input": "x"'


def test_row_problems_are_capped(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        (json.dumps({"instruction": "a", "input": "", "output": None}) + "\n") * 50 + json.dumps(ROW) + "\n"
    )
    problems = check_file(path, DatasetAttr(), "sft")
    assert len(problems) == 21 and "30 more row problems" in problems[-1].message


def test_cli_json_and_exit_zero(tmp_path: Path) -> None:
    path = spec_file(tmp_path, "dataset: d\n", rows=[ROW], info={"d": {"file_name": "d.jsonl"}})
    result = CliRunner().invoke(main, ["check", str(path), "--json", "--no-hub"])
    assert result.exit_code == 0
    assert json.loads(result.output) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n")
    result = CliRunner().invoke(main, ["check", str(bad)])
    assert result.exit_code == 1 and result.output.startswith(f"{bad}:1: error: a spec is a mapping")


def test_info_severity_does_not_fail(tmp_path: Path) -> None:
    path = spec_file(tmp_path, "dataset: x\ndataset_dir: REMOTE:org/data\n")
    problems = check_path(path)
    assert [p.severity for p in problems] == [INFO]
    assert CliRunner().invoke(main, ["check", str(path)]).exit_code == 0


def test_the_blocks_files_are_regular_files_inside_the_specs_folder_each_once(tmp_path: Path) -> None:
    """radeonlab.files: `/etc/shadow`, `../x`, a link out of the folder, a FIFO (only stat'ed: check must not
    block on it), a folder and a name listed twice are refused, each on its own line; a file below the spec's
    folder is fine."""
    import os

    from tests.support.laptop_doubles import demo_job

    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "outside.txt").write_text("not the spec's\n")
    (work / "sub").mkdir()
    (work / "sub" / "ok.txt").write_text("fine\n")
    (work / "link.txt").symlink_to(tmp_path / "outside.txt")
    os.mkfifo(work / "pipe")
    names = ["/etc/shadow", "../outside.txt", "link.txt", "pipe", "sub", "sub/ok.txt", "./sub/ok.txt"]
    spec = demo_job(work, extra="radeonlab:\n  files: [" + ", ".join(names) + "]\n")
    lines = [f"{p.line}: {p.message}" for p in check_path(spec) if "file to upload" in p.message]
    text = "\n".join(lines)
    for name in ("/etc/shadow", "../outside.txt", "link.txt"):
        assert f"file to upload {name} is outside the spec's folder" in text, text
    assert "file to upload pipe is not a regular file" in text
    assert "file to upload sub is not a regular file" in text
    assert "file to upload ./sub/ok.txt is listed twice" in text  # the first `sub/ok.txt` is fine
    assert len(lines) == 6, text


def test_a_local_model_folder_must_be_a_model_and_its_dotfiles_are_never_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`model_name_or_path: "{{ env.HOME }}"` passed check and shipped .netrc, .git-credentials and
    .bash_history: a folder without config.json and weights is refused by check (exit 1, nothing to send);
    a real model folder's dotfiles are left out, and check says what would be uploaded and that the folder
    is outside the spec's folder."""
    from radeonlab.jobs.plan import model as model_module
    from radeonlab.jobs.spec.load import load
    from tests.support.laptop_doubles import demo_job

    home = tmp_path / "home"
    home.mkdir()
    for name in (".netrc", ".git-credentials", ".bash_history", "notes.txt"):
        (home / name).write_text("machine x login me password SECRET\n")
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    spec = demo_job(work)
    text = spec.read_text()
    assert "model_name_or_path: tiny-llama" in text
    spec.write_text(text.replace("model_name_or_path: tiny-llama", 'model_name_or_path: "{{ env.HOME }}"'))
    result = CliRunner().invoke(main, ["check", str(spec)])
    assert result.exit_code == 1, result.output
    assert f"{home} is not a model folder: no config.json and no weights" in result.output
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", ".netrc"):
        (model / name).write_text("{}")
    spec.write_text(spec.read_text().replace('"{{ env.HOME }}"', str(model)))
    info = model_module.resolve(load(spec))
    assert [p.name for p in info.files] == ["config.json", "model.safetensors"]
    result = CliRunner().invoke(main, ["check", str(spec)])
    said = f"local model folder {model} (outside the spec's folder): 2 file(s)"
    assert said in result.output, result.output


@pytest.mark.parametrize(
    ("key", "variable"),
    [("hf_hub_token", "HF_TOKEN"), ("hub_token", "HF_TOKEN"), ("push_to_hub_token", "HF_TOKEN"),
     ("ms_hub_token", None), ("om_hub_token", None), ("swanlab_api_key", "SWANLAB_API_KEY"),
     ("swanlab_lark_secret", None)],
)  # fmt: skip
def test_a_token_key_is_refused_with_the_secret_that_carries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, variable: str | None
) -> None:
    """Token keys were rendered into config.yaml in plain text, `{{ env.HF_TOKEN }}` included."""
    from tests.support.laptop_doubles import demo_job

    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    spec = demo_job(tmp_path, extra=f'{key}: "{{{{ env.HF_TOKEN }}}}"\n')
    result = CliRunner().invoke(main, ["check", str(spec), "--no-hub"])
    assert result.exit_code == 1
    line = next(x for x in result.output.splitlines() if f"`{key}` carries a credential" in x)
    assert (f"set {variable} in your environment" in line) if variable else "pass it as a secret" in line
    assert "hf_xxxx" not in result.output  # the value itself is never printed


def test_an_override_shaped_like_a_token_is_refused_and_a_plain_one_is_not(tmp_path: Path) -> None:
    from radeonlab.jobs.spec.checks import check_spec
    from radeonlab.jobs.spec.load import load, with_overrides
    from tests.support.laptop_doubles import demo_job

    spec = load(demo_job(tmp_path))
    token = with_overrides(spec, ["run_name=hf_" + "y" * 34, "learning_rate=1e-4"])
    said = [p.message for p in check_spec(token) if p.severity == ERROR]
    assert said == ["override `run_name=...` holds a Hugging Face token: overrides are kept in job.json"]
    keyed = with_overrides(spec, ["hf_hub_token=abc"])
    assert any("`hf_hub_token` carries a credential" in p.message for p in check_spec(keyed))


def test_check_refuses_an_unknown_remedy_step_naming_the_close_one(tmp_path: Path) -> None:
    """A misspelt step would only surface when the job failed on the host: `check` refuses it now."""
    path = spec_file(tmp_path, "dataset: d\nradeonlab:\n  remedies: {oom: [halve_bath]}\n", rows=[ROW])
    result = CliRunner().invoke(main, ["check", str(path), "--no-hub"])
    assert result.exit_code == 1
    assert f"{path}:5: error: unknown remedy step 'halve_bath': did you mean `halve_batch`?" in result.output
    for ladder in ("nan: off", "oom: [halve_batch, halve_cutoff]", "gpu_reset: off"):
        path.write_text(path.read_text().rsplit("  remedies:", 1)[0] + f"  remedies: {{{ladder}}}\n")
        assert CliRunner().invoke(main, ["check", str(path), "--no-hub"]).exit_code == 0, ladder
