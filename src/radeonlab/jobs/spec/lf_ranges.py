"""The ranges LLaMA-Factory's numbers must lie in, as data: jobs/spec/lf_ranges.json, beside lf_args.json.

Two parts, one file:
- "stated": GENERATED from the pinned release, where the packages state a range themselves: an
  `if self.<key> < a or self.<key> > b: raise ...` in a `__post_init__` of the argument dataclasses
  `llamafactory-cli train` parses (transformers' TrainingArguments among them), or a field's help text
  ("an integer or a float in range `[0,1)`", "between 0 and 0.5"). Regenerate after a pin bump:

      python -m radeonlab.jobs.spec.lf_ranges --regenerate    # runs in lf_args' generator venv

- "hand": written by hand where nothing states the range but a value outside it fails or silently trains
  nothing; each rule carries the package file, line and code that shows it (tests/unit/test_lf_ranges.py
  checks every cited line against the installed transformers, peft and torch, and LLaMA-Factory's in the
  generator venv when it exists), and the rules peft and torch state as a raise are also run against them
  there.

A rule: {"key", bounds ("ge", "gt", "le", "lt"; "whole_above": n for a number above n that must be whole),
"severity" (error, or warning for absurd-but-legal values), "when" (other keys' conditions, e.g.
{"finetuning_type": {"in": ["lora"]}}), "above_key" (a warning when the value exceeds that key's positive
value), "why", "fix", "source": {"package", "file", "line", "code"}}.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("lf_ranges.json")
# a violation test `self.x < 0` means the allowed range is `x >= 0`: comparison -> the bound it implies
_IMPLIED = {ast.Lt: "ge", ast.LtE: "gt", ast.Gt: "le", ast.GtE: "lt"}
_STATED_BY = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}  # `not (x > 0)`: allowed x > 0
_HELP_COUNT_OR_RATIO = re.compile(r"an integer or a float in range `\[0,\s*1\)`")
_HELP_BETWEEN = re.compile(r"between (\d+(?:\.\d+)?) and (\d+(?:\.\d+)?)")


@cache
def load() -> dict[str, Any]:
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


def rules() -> list[dict[str, Any]]:
    """Every rule, stated ones first (a key's first violated rule is the one reported)."""
    data = load()
    return [{**r, "severity": r.get("severity", "error")} for r in data["stated"]] + data["hand"]


# ---------------------------------------------------------------- generator (standard library + the classes)


def _self_field(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _number(node: ast.AST) -> float | int | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    return None


def _is_type_test(node: ast.AST) -> bool:
    """`isinstance(self.x, int)` or `not isinstance(...)`: a type check, which lf_args already covers."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"


def _bounds_of(test: ast.AST) -> tuple[str, dict[str, float]] | None:
    """(field, allowed bounds) when `test` (the condition of a raise) only compares one field with numbers:
    `self.x < 0 or self.x > 1`, `not isinstance(self.x, int) or self.x < 0`, `not (... and self.x > 0)`."""
    allowed = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if allowed:
        test = test.operand  # type: ignore[attr-defined]
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    else:
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    field, bounds = None, {}
    for part in parts:
        if _is_type_test(part):
            continue
        if not (isinstance(part, ast.Compare) and len(part.ops) == 1 and type(part.ops[0]) in _IMPLIED):
            return None
        name, value = _self_field(part.left), _number(part.comparators[0])
        if name is None or value is None or field not in (None, name):
            return None
        field = name
        bounds[(_STATED_BY if allowed else _IMPLIED)[type(part.ops[0])]] = value
    return (field, bounds) if field and bounds else None


def _site_relative(path: str) -> str:
    """`transformers/training_args.py` from a full path into site-packages (no machine path in the data)."""
    parts = Path(path).parts
    return str(Path(*parts[parts.index("site-packages") + 1 :])) if "site-packages" in parts else path


def stated_in_post_init(cls: type, keys: set[str] | None = None) -> list[dict[str, Any]]:
    """The ranges the `__post_init__` of `cls` and of its bases raise on, for fields in `keys` (all: None)."""
    import inspect
    import textwrap

    found: list[dict[str, Any]] = []
    for klass in cls.__mro__:
        method = klass.__dict__.get("__post_init__")
        if method is None:
            continue
        lines, start = inspect.getsourcelines(method)
        file = inspect.getsourcefile(method) or ""
        for node in ast.walk(ast.parse(textwrap.dedent("".join(lines)))):
            if not (isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body)):
                continue
            result = _bounds_of(node.test)
            if result and (keys is None or result[0] in keys):
                line = start + node.lineno - 1
                found.append(
                    {
                        "key": result[0],
                        **result[1],
                        "how": f"{klass.__name__}.__post_init__ raises",
                        "source": _source(klass.__module__, file, line, lines[node.lineno - 1].strip()),
                    }
                )
    return found


def stated_in_help(cls: type, keys: set[str] | None = None) -> list[dict[str, Any]]:
    """The ranges the field help texts of `cls` state (the text is the argument's --help)."""
    import dataclasses
    import inspect

    found: list[dict[str, Any]] = []
    for f in dataclasses.fields(cls):
        text = str(f.metadata.get("help", ""))
        if keys is not None and f.name not in keys:
            continue
        if _HELP_COUNT_OR_RATIO.search(text):
            bounds: dict[str, float] = {"ge": 0, "whole_above": 1}
        elif match := _HELP_BETWEEN.search(text):
            bounds = {"ge": float(match[1]), "le": float(match[2])}
        else:
            continue
        owner = next(k for k in cls.__mro__ if f.name in k.__dict__.get("__annotations__", {}))
        lines, start = inspect.getsourcelines(owner)
        at = next(i for i, t in enumerate(lines) if t.strip().startswith(f"{f.name}:"))
        file = inspect.getsourcefile(owner) or ""
        source = _source(owner.__module__, file, start + at, lines[at].strip())
        found.append({"key": f.name, **bounds, "how": f"the help of {owner.__name__}.{f.name}: {text}",
                      "source": source})  # fmt: skip
    return found


def _source(module: str, file: str, line: int, code: str) -> dict[str, Any]:
    return {"package": module.split(".")[0], "file": _site_relative(file), "line": line, "code": code}


def _dump() -> None:
    """Print the stated ranges of the installed LLaMA-Factory's train arguments (generator venv only)."""
    from llamafactory.hparams.parser import _TRAIN_ARGS

    stated: list[dict[str, Any]] = []
    for cls in _TRAIN_ARGS:
        stated += stated_in_post_init(cls) + stated_in_help(cls)
    unique = {json.dumps(r, sort_keys=True): r for r in stated}
    print(json.dumps(sorted(unique.values(), key=lambda r: (r["key"], r["source"]["line"]))))


def regenerate() -> list[dict[str, Any]]:
    """Run `_dump` inside lf_args' generator venv (the pinned LLaMA-Factory and transformers)."""
    from radeonlab.jobs.spec import lf_args

    python = lf_args.generator_venv() / "bin" / "python"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLCONFIGDIR": "/tmp/lfargs-mpl"}
    # -I: this file's folder (jobs/spec/, which has a datasets.py) must not shadow the `datasets` package
    proc = subprocess.run([str(python), "-I", __file__, "--dump"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"generator failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    stated: list[dict[str, Any]] = json.loads(proc.stdout)
    return stated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radeonlab.jobs.spec.lf_ranges")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--regenerate", action="store_true", help="rewrite the stated part of lf_ranges.json")
    group.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)  # inside the generator venv
    if parser.parse_args(argv).dump:
        _dump()
        return 0
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    data["stated"] = regenerate()
    DATA_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {DATA_FILE}: {len(data['stated'])} stated ranges, {len(data['hand'])} by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
