"""Range checks of a spec's numbers: the rules of jobs/spec/lf_ranges.json applied to the LLaMA-Factory keys.

A value outside a rule's range is an error with the rule's reason, its source and the fix; a rule of severity
"warning" marks a value that is legal but absurd (a learning rate above 1, more warmup steps than steps).
Beyond the rules: NaN is an error for every number key (it passes every range check, since each comparison
with it is false, and turns the arithmetic it reaches into NaN), infinity for every key that has a rule.
Only values of the right type are judged here (checks.py reports the wrong types); one finding per key.
"""

from __future__ import annotations

import math
from typing import Any

from radeonlab.jobs.spec import lf_args, lf_ranges
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import ERROR, Problem

_OPS = {
    "ge": (lambda v, b: v >= b, ">= {}"),
    "gt": (lambda v, b: v > b, "> {}"),
    "le": (lambda v, b: v <= b, "<= {}"),
    "lt": (lambda v, b: v < b, "< {}"),
    "ne": (lambda v, b: v != b, "other than {}"),
}


def range_problems(spec: Spec) -> list[Problem]:
    """One problem per LLaMA-Factory number key whose value breaks a rule (errors before warnings)."""
    file, known = str(spec.path), lf_args.keys()
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in sorted(lf_ranges.rules(), key=lambda r: r["severity"] != ERROR):
        rules.setdefault(rule["key"], []).append(rule)
    out: list[Problem] = []
    for key, value in spec.train.items():
        if key not in known or not _is_number(value) or not _typed(value, known[key]["types"]):
            continue
        line = spec.line_of(key)
        if isinstance(value, float) and math.isnan(value):
            out.append(Problem(file, line, f"`{key}: nan` is not a number: {_NAN}", ERROR, "a number"))
        elif isinstance(value, float) and math.isinf(value) and key in rules:
            why = "infinity is no count, rate or size here"
            out.append(
                Problem(file, line, f"`{key}: {value}` must be finite: {why}", ERROR, _fix(rules[key][0]))
            )
        else:
            broken = next(
                (r for r in rules.get(key, []) if _applies(r, spec) and _breaks(r, value, spec)), None
            )
            if broken is not None:
                out.append(_problem(file, line, key, value, broken))
    return out


_NAN = "NaN passes every range check (each comparison with it is false) and makes the arithmetic NaN"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _typed(value: float, types: list[str]) -> bool:
    """Whether the value has the key's type (an int key with 1.5 or NaN is checks.py's type error)."""
    if "float" in types or "any" in types:
        return True
    return "int" in types and (isinstance(value, int) or value.is_integer())


def _applies(rule: dict[str, Any], spec: Spec) -> bool:
    """Whether the rule's `when` holds: each named key (its LLaMA-Factory default when absent) matches."""
    for other, condition in rule.get("when", {}).items():
        value = spec.train.get(other, lf_args.default(other))
        for op, bound in condition.items():
            if op == "in":
                if value not in bound:
                    return False
            elif not (_is_number(value) and _OPS[op][0](value, bound)):
                return False
    return True


def _breaks(rule: dict[str, Any], value: float, spec: Spec) -> bool:
    if any(op in rule and not test(value, rule[op]) for op, (test, _) in _OPS.items()):
        return True
    if "whole_above" in rule and value > rule["whole_above"] and not float(value).is_integer():
        return True
    if "above_key" in rule:
        limit = spec.train.get(rule["above_key"], lf_args.default(rule["above_key"]))
        return _is_number(limit) and limit > 0 and value > limit
    return False


def describe(rule: dict[str, Any]) -> str:
    """The range in words: "between 0 and 1", ">= 1", ">= 0, and a whole number above 1"."""
    if "ge" in rule and "le" in rule:
        text = f"between {_num(rule['ge'])} and {_num(rule['le'])}"
    elif "ge" in rule and "lt" in rule:
        text = f">= {_num(rule['ge'])} and < {_num(rule['lt'])}"
    else:
        text = " and ".join(words.format(_num(rule[op])) for op, (_, words) in _OPS.items() if op in rule)
    if "whole_above" in rule:
        text += f", and a whole number above {_num(rule['whole_above'])} (below it: a fraction of the run)"
    if "above_key" in rule:
        text = f"at most {rule['above_key']}"
    return text


def _problem(file: str, line: int, key: str, value: float, rule: dict[str, Any]) -> Problem:
    source = rule["source"]
    where = f"{source['file']}:{source['line']}"
    if "why" in rule:
        why = f"{rule['why']} ({where})"
    elif rule.get("how", "").startswith("the help of"):
        why = f"{source['package']} states it in the key's help ({where}): {rule['how'].split(': ', 1)[1]}"
    else:
        why = f"{source['package']} refuses it ({rule.get('how', 'a check')}, {where})"
    message = f"`{key}: {_num(value)}` must be {describe(rule)}: {why}"
    return Problem(file, line, message, rule["severity"], _fix(rule))


def _fix(rule: dict[str, Any]) -> str:
    return str(rule.get("fix") or f"a value {describe(rule)}")


def _num(value: float) -> str:
    return (
        str(int(value))
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15
        else str(value)
    )
