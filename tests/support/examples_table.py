"""The verdict of `radeonlab check` on every LLaMA-Factory 0.9.5 example config, as a table
in docs/reference/needs.md.

    .venv/bin/python -m tests.support.examples_table          # print the table
    .venv/bin/python -m tests.support.examples_table --write  # rewrite it between the markers in
    #                                                   docs/reference/needs.md

tests/unit/test_examples_table.py recomputes every row and compares it with docs/reference/needs.md, so the
table is data produced by the checks, never typed by hand. Each example is checked as `radeonlab check EXAMPLE
--dataset-dir <its data folder>` would (the fixture's data/ plus the demo files it lacked), with no host:
errors are refusals; what the config needs installed beyond the pinned stack is listed (submit refuses a
host without it). The last column says whether the sandbox (CPU torch, the tiny local model, the pinned
stack, local demo data) has everything the example needs; tests/e2e/test_lf_examples_e2e.py runs each of those
on a SIMULATED workstation with the model swapped.
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from radeonlab.jobs.spec import kinds
from radeonlab.jobs.spec.checks import check_path
from radeonlab.jobs.spec.load import load
from radeonlab.jobs.spec.needs import base_stack, missing, needs
from radeonlab.jobs.spec.problems import ERROR, INFO, WARNING

HERE = Path(__file__).parents[1]
LF = HERE / "fixtures" / "llamafactory-v0.9.5"
LF_EXTRA = HERE / "fixtures" / "llamafactory-v0.9.5-data-extra"
README = HERE.parent / "docs" / "reference" / "needs.md"  # the docs page the tables live in
_ABSOLUTE = re.compile(r"(?<![\w./-])/[^\s;:,()`'\"]+")  # an absolute path of this machine
# Templates of vision/audio models: the sandbox's tiny model is a text-only Llama.
NOT_TRAINING = "not a LLaMA-Factory training spec"
MULTIMODAL_TEMPLATE = re.compile(r"vl|mllm|llava|qwen2_audio|omni", re.I)


@dataclass(frozen=True)
class Row:
    example: str
    verdict: str  # "passes" | "refused: ..." (| "export config: ..." | "inference config: ...")
    needs: str  # distributions beyond the pinned stack, or "-"
    sandbox: str  # "yes" | "no: why"

    def markdown(self) -> str:
        cells = [f"`{self.example}`", self.verdict, self.needs, self.sandbox]
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def examples() -> list[str]:
    return sorted(str(p.relative_to(LF / "examples")) for p in (LF / "examples").rglob("*.yaml"))


def data_dir(into: Path) -> Path:
    """LLaMA-Factory 0.9.5's data folder: the fixture copy plus the demo files it lacked (symlinks)."""
    into.mkdir(parents=True, exist_ok=True)
    for src in [*(LF / "data").iterdir(), *LF_EXTRA.iterdir()]:
        link = into / src.name
        if not link.exists():
            link.symlink_to(src.resolve())
    return into


def _short(message: str) -> str:
    """A reason for the table: the message up to its explanation, absolute paths cut to their last part."""
    head = message.split(" (")[0].split("; ")[0]
    return _ABSOLUTE.sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1], head)


def _warned(warnings: list[str]) -> str:
    """Warnings for the verdict: the first two distinct ones, then how many more."""
    unique = list(dict.fromkeys(warnings))
    if not unique:
        return ""
    more = f"; {len(unique) - 2} more" if len(unique) > 2 else ""
    return " (warning: " + "; ".join(unique[:2]) + more + ")"


def row(example: str, data: Path) -> Row:
    path = LF / "examples" / example
    problems = check_path(path, dataset_dir=data)
    spec = load(path)
    beyond = missing(needs(spec), base_stack())
    dists = sorted({m.message.split(" needs ")[1].split(",")[0] for m in beyond})
    errors = [_short(p.message) for p in problems if p.severity == ERROR]
    warnings = [_short(p.message) for p in problems if p.severity == WARNING]
    kind = kinds.kind(spec)
    other = [w for w in warnings if w.startswith(NOT_TRAINING)]
    if other:
        kind, verdict = "other", "not a training config (" + other[0].removeprefix(NOT_TRAINING + ": ") + ")"
    elif errors:
        verdict = "refused: " + "; ".join(dict.fromkeys(errors))
    else:
        verdict = "passes" + _warned(warnings if kind == kinds.TRAIN else [])
    if kind in (kinds.EXPORT, kinds.INFERENCE):
        verb = "`llamafactory-cli export`: use `radeonlab export`" if kind == kinds.EXPORT else "chat"
        verdict = f"{kind} config ({verb}); " + verdict
    return Row(
        example, verdict, ", ".join(dists) or "-", _sandbox(spec, kind, errors, warnings, dists, problems)
    )


def _sandbox(spec, kind: str, errors: list, warnings: list, dists: list, problems: list) -> str:  # noqa: ANN001
    train = spec.train
    hub = [p for p in problems if p.severity == INFO and "fetched from the hub" in p.message]
    reasons = [
        (bool(errors), "refused"),
        (kind != kinds.TRAIN, "not a training config"),
        (bool(dists), "needs " + ", ".join(dists)),
        (bool(warnings), "warning above"),
        (MULTIMODAL_TEMPLATE.search(str(train.get("template", ""))) is not None, "multimodal model"),
        (train.get("stage") == "ppo", "PPO needs a reward model"),
        (bool(hub), "dataset from the hub"),
        ("fsdp" in str(train.get("fsdp", "")) or bool(train.get("fsdp_config")), "FSDP"),
    ]
    why = [text for hit, text in reasons if hit]
    return "yes" if not why else "no: " + why[0]


def table() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        data = data_dir(Path(tmp) / "data")
        rows = [row(e, data) for e in examples()]
    header = [
        "| example | `radeonlab check` (no host) | needs beyond the pinned stack | the sandbox has it all |",
        "|---|---|---|---|",
    ]
    passed = sum(r.verdict.startswith("passes") for r in rows)
    sandbox = sum(r.sandbox == "yes" for r in rows)
    summary = f"{len(rows)} examples: {passed} pass `check` with no error, {len(rows) - passed} are refused "
    summary += f"or are not training configs; the sandbox has what {sandbox} of them need."
    return "\n".join([summary, "", *header, *(r.markdown() for r in rows)])


def needs_table() -> str:
    """Every key that needs a package (jobs/spec/needs.py RULES and PREQUANTIZED), as a table in
    docs/reference/needs.md."""
    from radeonlab.jobs.spec.needs import ANY, ENV_PREFIX, PREQUANTIZED, RULES
    from radeonlab.roles.python_stack.defaults import DEFAULTS

    pinned: dict[str, str] = dict(DEFAULTS["python_stack_extras_versions"])  # type: ignore[arg-type]
    lines = [
        "| key | when | needs | `python_stack_extras` installs | where it is needed (or the fix) |",
        "|---|---|---|---|---|",
    ]
    for rule in RULES:
        key = f"radeonlab.env.{rule.key[len(ENV_PREFIX) :]}" if rule.key.startswith(ENV_PREFIX) else rule.key
        when = {True: "true", ANY: "set"}.get(rule.when) if not isinstance(rule.when, tuple) else None
        when = when or ", ".join(
            str(w) for w in (rule.when if isinstance(rule.when, tuple) else (rule.when,))
        )
        if rule.also:
            when += " with " + ", ".join(f"{k}: {v}" for k, v in rule.also)
        need = rule.dist + (f">={rule.min_version}" if rule.min_version else "")
        extra = pinned.get(rule.dist, "-")
        where = (rule.source + (f" (fix: {rule.fix})" if rule.fix else "")).replace("|", "\\|")
        lines.append(f"| `{key}` | {when} | {need} | {extra} | {where} |")
    for method, reqs in PREQUANTIZED.items():
        need = ", ".join(d + (f">={m}" if m else "") for d, m in reqs)
        lines.append(
            f"| `model_name_or_path` | a {method.upper()} checkpoint (name ends -{method.upper()}) "
            f"| {need} | - "
            "| llamafactory model/model_utils/quantization.py (fix: quantization_bit: 4 on the unquantized "
            "model) |"
        )
    return "\n".join(lines)


SECTIONS = {"examples-table": table, "needs-table": needs_table}


def readme_table(text: str, name: str = "examples-table") -> str:
    """The generated text between a section's markers in docs/reference/needs.md's text."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def main(argv: list[str]) -> int:
    if "--write" not in argv:
        print(table())
        return 0
    text = README.read_text()
    for name, make in SECTIONS.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        start, stop = text.index(begin) + len(begin), text.index(end)
        text = text[:start] + "\n" + make() + "\n" + text[stop:]
    README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
