"""Loading job specs: plain LLaMA-Factory YAML, the radeonlab block, templating, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from radeonlab.jobs.spec.load import Placement, Remedy, SpecError, load

FIXTURES = Path(__file__).parents[1] / "fixtures" / "llamafactory-v0.9.5"


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_llamafactory_yaml_loads_with_lines() -> None:
    spec = load(FIXTURES / "examples/train_lora/qwen3_lora_sft.yaml")
    assert spec.train["model_name_or_path"] == "Qwen/Qwen3-4B-Instruct-2507"
    assert spec.train["learning_rate"] == 1.0e-4
    assert spec.line_of("model_name_or_path") == 2
    assert spec.line_of("stage") == 6
    assert spec.radeonlab.nodes == 1 and spec.radeonlab.remedies["nan"].enabled


def test_floats_like_omegaconf(tmp_path: Path) -> None:
    # PyYAML alone reads 3e-6 as a string; LLaMA-Factory (OmegaConf) reads it as a float
    spec = load(write(tmp_path, "learning_rate: 3e-6\nrun_name: 2024-01-01\n"))
    assert spec.train["learning_rate"] == 3e-6
    assert spec.train["run_name"] == "2024-01-01"


def test_radeonlab_block_parsed_and_removed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
model_name_or_path: m
radeonlab:
  datasets:
    - data/a.jsonl
    - {file: data/chat.json, name: chat, formatting: sharegpt, columns: {messages: messages}}
  files: [ds.json]
  host: ws1
  placement: {host_group: lab, gfx_family: gfx11, min_vram_gb: 24}
  remedies: {nan: off, oom: [halve_batch, halve_cutoff]}
  nodes: 2
  env: {HF_HUB_OFFLINE: 1, DEBUG: on}
""",
    )
    spec = load(path)
    assert "radeonlab" not in spec.train
    block = spec.radeonlab
    assert [d.name for d in block.datasets] == ["a", "chat"]
    assert block.datasets[1].info_entry() == {
        "file_name": "chat.json",
        "formatting": "sharegpt",
        "columns": {"messages": "messages"},
    }
    assert block.files == ["ds.json"] and block.host == "ws1" and block.nodes == 2
    assert block.placement == Placement("lab", "gfx11", 24)
    assert block.remedies["nan"] == Remedy(enabled=False)
    assert block.remedies["oom"] == Remedy(True, ["halve_batch", "halve_cutoff"])
    assert block.env == {"HF_HUB_OFFLINE": "1", "DEBUG": "1"}
    assert spec.line_of("radeonlab.placement.min_vram_gb") == 8
    assert spec.block_problems == []


def test_bad_radeonlab_block_reports_lines(tmp_path: Path) -> None:
    spec = load(
        write(
            tmp_path,
            "model_name_or_path: m\nradeonlab:\n  nodes: 0\n  colour: red\n"
            "  placement: {min_vram_gb: -1}\n  remedies: {nan: maybe}\n",
        )
    )
    lines = sorted(line for line, _ in spec.block_problems)
    assert lines == [3, 4, 5, 6]


def test_dataset_dir_relative_to_spec(tmp_path: Path) -> None:
    spec = load(write(tmp_path, "dataset_dir: mydata\n"))
    assert spec.dataset_dir() == (tmp_path / "mydata").resolve()
    assert (
        load(write(tmp_path, "model_name_or_path: m\n", "b.yaml")).dataset_dir()
        == (tmp_path / "data").resolve()
    )
    assert load(write(tmp_path, "dataset_dir: REMOTE:org/repo\n", "c.yaml")).dataset_dir() is None


def test_jinja_renders_env_and_refuses_undefined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_MODEL", "meta-llama/Llama-3-8B")
    spec = load(write(tmp_path, "model_name_or_path: {{ env.RL_MODEL }}\noutput_dir: {{ spec_dir }}/out\n"))
    assert spec.train["model_name_or_path"] == "meta-llama/Llama-3-8B"
    assert spec.train["output_dir"] == f"{tmp_path.resolve()}/out"
    with pytest.raises(SpecError) as err:
        load(write(tmp_path, "a: 1\nb: {{ nope }}\n", "u.yaml"))
    assert err.value.line == 2 and "nope" in str(err.value)


def test_the_budgeted_sandbox_still_renders_what_specs_use(tmp_path: Path) -> None:
    """Loops, macros, filters (map, join, replace, tojson), `%` formats and str methods within the budgets."""
    text = (
        "{% for i in range(2) %}k{{ loop.index }}: {{ i * 2 }}\n{% endfor %}"
        "{% macro plus(n) %}{{ n + 1 }}{% endmacro %}m: {{ plus(1) }}\n"
        "j: {{ [1, 2]|map('string')|join(',') }}\nr: {{ ('x' ~ 'y')|replace('x', 'z') }}\n"
        "t: '{{ {'a': 1}|tojson }}'\nf: '{{ '%05.1f' % 3.14159 }}'\ns: {{ 'a,b'.split(',')|first|upper }}\n"
    )
    train = load(write(tmp_path, text)).train
    assert train == {"k1": 0, "k2": 2, "m": 2, "j": "1,2", "r": "zy", "t": '{"a": 1}', "f": "003.1", "s": "A"}


def test_jinja_sandbox_blocks_attribute_escapes(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="template error"):
        load(write(tmp_path, "a: {{ ''.__class__.__mro__[1].__subclasses__() }}\n"))


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("a: 1\nb: [1, 2\n", 3, "not valid YAML"),
        ("- a\n- b\n", 1, "not a list"),
        ("a: 1\nb: 2\na: 3\n", 3, "duplicate key 'a' (first on line 1)"),
        ("x:\n  y: 1\n  y: 2\n", 3, "duplicate key 'y'"),
        ("", 1, "empty spec"),
        ("just text\n", 1, "not a str"),
    ],
)
def test_unloadable_specs_are_one_line_errors(tmp_path: Path, text: str, line: int, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load(path)
    assert err.value.line == line
    assert words in str(err.value)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert "\n" not in str(err.value)


def test_non_utf8_spec(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(SpecError, match=r":2: not UTF-8"):
        load(path)


@pytest.mark.parametrize(
    "name", ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HF_HUB_CACHE", "HF_HOME", "PATH", "MASTER_ADDR"]
)
def test_a_spec_cannot_set_what_radeonlab_owns(tmp_path: Path, name: str) -> None:
    """radeonlab.env and forward_env were applied over the launcher's own variables: a spec could escape the
    per-GPU lock (HIP_/ROCR_VISIBLE_DEVICES), the caches, PATH. Refused by check with the reason."""
    from click.testing import CliRunner

    from radeonlab.cli import main
    from tests.support.laptop_doubles import demo_job

    for block in (f"  env: {{{name}: '1'}}\n", f"  forward_env: [{name}]\n"):
        spec = demo_job(tmp_path, extra="radeonlab:\n" + block)
        result = CliRunner().invoke(main, ["check", str(spec), "--no-hub"])
        assert result.exit_code == 1, result.output
        assert f"{name} cannot be set by a spec" in result.output


def test_a_typo_in_a_command_line_override_is_blamed_on_the_override(tmp_path: Path) -> None:
    """`submit demo.yaml learnin_rate=1e-4` was reported at `demo.yaml:1` (a line that has nothing to do with
    it); it now names the override as typed."""
    from radeonlab.jobs.spec.checks import check_spec
    from radeonlab.jobs.spec.load import load, with_overrides
    from tests.support.laptop_doubles import demo_job

    spec = with_overrides(load(demo_job(tmp_path)), ["num_train_epochs=2", "learnin_rate=1e-4"])
    found = [p for p in check_spec(spec) if "learnin_rate" in p.message]
    assert [(p.line, p.override) for p in found] == [(0, "learnin_rate")]  # the second of two overrides
    expected = "override `learnin_rate=...`: error: unknown key `learnin_rate`"  # its value is never echoed
    assert str(found[0]).startswith(expected) and "did you mean `learning_rate`" in str(found[0]), found


def test_submit_names_the_override_with_the_typo_and_sends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI: `submit demo.yaml learnin_rate=1e-4` is refused before any host is reached (the
    inventory's host listens nowhere), the finding naming the override, no line of demo.yaml."""
    from click.testing import CliRunner

    from radeonlab.cli import main
    from tests.support.laptop_doubles import demo_job

    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    inv = tmp_path / "inv.py"
    inv.write_text('hosts = [("a", {"ssh_hostname": "127.0.77.250", "ssh_port": 1, "ssh_user": "lab"})]\n')
    spec = demo_job(tmp_path)
    result = CliRunner().invoke(main, ["submit", str(spec), "learnin_rate=1e-4", "-i", str(inv)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("override `learnin_rate=...`: error: unknown key `learnin_rate`")
    assert f"{spec}:" not in result.output.splitlines()[0] and "nothing uploaded" in result.output


def test_every_ladder_of_the_runner_can_be_switched_off(tmp_path: Path) -> None:
    from radeonlab.jobs.host.remedies import LADDERS

    body = "".join(f"    {name}: off\n" for name in LADDERS)
    spec = load(write(tmp_path, f"model_name_or_path: m\nradeonlab:\n  remedies:\n{body}"))
    assert spec.block_problems == [] and set(LADDERS) == {"nan", "oom", "gpu_reset"}
    assert all(not spec.radeonlab.remedies[name].enabled for name in LADDERS)


def test_a_yaml_list_of_names_is_read_as_llamafactorys_comma_separated_text(tmp_path: Path) -> None:
    """split_arg takes both forms: every reader of the spec sees the one text; the rest stays for check."""
    from radeonlab.jobs.spec.load import parse_text

    spec = parse_text(
        "dataset: [alpaca_en_demo, identity]\nlora_target: [q_proj]\neval_dataset: [1, 2]\n"
        "additional_target: ['a,b', c]\n",
        tmp_path / "spec.yaml",
    )
    assert spec.train["dataset"] == "alpaca_en_demo,identity" and spec.train["lora_target"] == "q_proj"
    assert spec.train["eval_dataset"] == [1, 2] and spec.train["additional_target"] == ["a,b", "c"]
