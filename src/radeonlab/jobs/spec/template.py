"""A spec's Jinja2 (`{{ env.USER }}`, `{{ spec_dir }}`), rendered so that no input can hang or exhaust us.

jinja2's ImmutableSandboxedEnvironment blocks internals (`__class__`...) and the mutation of lists and dicts;
it does not bound work: `{% for i in range(100000) %}{% for j in range(100000) %}` renders for hours,
`'x' * 10**10` or `'a'|center(10**10)` allocates gigabytes in one C call, `2 ** 10 ** 10` computes for ever.
The budgets here:
- steps: every loop iteration, call, filter, attribute lookup and intercepted operator counts one; at most
  MAX_STEPS, and the render stops once it has run DEADLINE_S (checked at every step);
- range: `range()` gives at most MAX_RANGE items (jinja's own cap is 100000 per call);
- size: no value made by an operator, a filter, a call or `~` is longer than MAX_VALUE (characters, or
  items), checked BEFORE the operations that multiply (`*`, `**`, `%` with a width, `+`, replace, join) and
  after the others; the whole output is at most the size limit the caller gives (a spec's own limit);
- refused outright: recursive loops, `namespace()` (its attributes can be reassigned in a loop, doubling a
  string each turn), `lipsum()`, the str methods that pad or repeat (center, ljust, format, ...), and every
  filter not in SAFE_FILTERS (center, indent, wordwrap, batch, slice, format take a size).
A spent budget is a BudgetError (a jinja2 SecurityError): the caller reports it with the template line.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.visitor import NodeTransformer

MAX_STEPS = 100_000
DEADLINE_S = 2.0
MAX_RANGE = 10_000
MAX_VALUE = 64 * 1024
MAX_INT_BITS = 4096  # `**` and `*` on whole numbers: larger results take long to make and to print
# Filters a spec may use: none of them makes a value much larger than its input (join and replace can, and
# are checked before they run: _join, _replace).
SAFE_FILTERS = frozenset((
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "groupby", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
    "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode", "wordcount",
))  # fmt: skip
# str (and bytes) methods that pad, repeat or build a string from arguments: refused as attributes.
_AMPLIFYING_METHODS = frozenset((
    "center", "ljust", "rjust", "zfill", "expandtabs", "format", "format_map", "join", "replace", "translate",
    "maketrans",
))  # fmt: skip
_ITER_FILTER, _SIZE_FILTER = "radeonlab_budget_iter", "radeonlab_budget_size"
_WIDTH = re.compile(r"%[-#0 +]*(\*|\d{5,})|%[-#0 +]*\d*\.(\*|\d{5,})")  # `%99999d`, `%*d`, `%.99999f`


class BudgetError(SecurityError):
    """A template that does too much: one line for the user."""


class _Guard(NodeTransformer):
    """Route every loop's iterable and every `~` through the budget filters; refuse recursive loops."""

    def visit_For(self, node: nodes.For) -> nodes.Node:  # noqa: N802 - jinja's visitor naming
        self.generic_visit(node)
        if node.recursive:
            raise jinja2.TemplateSyntaxError("recursive loops are not allowed in a spec", node.lineno)
        node.iter = nodes.Filter(node.iter, _ITER_FILTER, [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:  # noqa: N802
        self.generic_visit(node)
        return nodes.Filter(node, _SIZE_FILTER, [], [], None, None, lineno=node.lineno)


class SpecEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with budgets; one per render (the budget is spent as it renders)."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self) -> None:
        super().__init__(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
        self.steps = 0
        self.deadline = time.monotonic() + DEADLINE_S
        base = self.filters
        self.filters = {n: self._guarded(f) for n, f in base.items() if n in SAFE_FILTERS}
        for name, check in (("join", functools.partial(_join, self)), ("replace", _replace)):
            guarded = self._guarded(functools.partial(check, base[name]))
            guarded.jinja_pass_arg = base[name].jinja_pass_arg  # type: ignore[attr-defined]  # eval context
            self.filters[name] = guarded
        self.filters[_ITER_FILTER] = self.iterate
        self.filters[_SIZE_FILTER] = self.sized
        self.globals = {"range": self._range, "dict": dict}  # no lipsum, cycler, joiner, namespace

    # -- the budget
    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise BudgetError(f"the template takes more than {MAX_STEPS} steps (loops, calls, filters)")
        if time.monotonic() > self.deadline:
            raise BudgetError(f"the template took longer than {DEADLINE_S:g} s to render")

    def sized(self, value: Any) -> Any:
        """The value, if it is not longer than MAX_VALUE (characters or items)."""
        if isinstance(value, str | bytes | list | tuple | dict | set):
            fits(len(value))
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise BudgetError(f"the template makes a number longer than {MAX_INT_BITS} bits")
        return value

    def iterate(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            self.step()
            yield item

    def _range(self, *args: int) -> range:
        values = range(*args)
        if len(values) > MAX_RANGE:
            raise BudgetError(f"range() of {len(values)} items: a spec template may use at most {MAX_RANGE}")
        return values

    def _guarded(self, func: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self.step()
            return self.sized(func(*args, **kwargs))

        return functools.update_wrapper(guarded, func) if hasattr(func, "__name__") else guarded

    # -- the sandbox's hooks
    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, str | bytes) and attr in _AMPLIFYING_METHODS:
            return False
        return super().is_safe_attribute(obj, attr, value)

    def wrap_str_format(self, value: Any) -> None:
        """No `str.format` at all (jinja would hand out its sandboxed copy, which still pads to any width):
        is_safe_attribute then refuses the attribute."""
        return None

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.step()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self.step()
        for arg in (*args, *kwargs.values()):
            __self.sized(arg)
        return __self.sized(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.step()
        if operator == "*":
            _check_product(left, right)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if max(left.bit_length(), 1) * right > MAX_INT_BITS:
                raise BudgetError(f"the template makes a number longer than {MAX_INT_BITS} bits")
        elif operator == "%" and isinstance(left, str) and _WIDTH.search(left):
            raise BudgetError("a `%` format with a width or precision of 10000 or more, or `*`")
        elif (
            operator == "+" and isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple)
        ):
            fits(len(left) + len(right))
        return self.sized(super().call_binop(context, operator, left, right))

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        guarded = _Guard().visit(tree)
        guarded.set_environment(self)
        assert isinstance(guarded, nodes.Template)
        return guarded


def fits(length: int) -> None:
    """Raise BudgetError when a value of this length (characters or items) would be too long."""
    if length > MAX_VALUE:
        raise BudgetError(f"the template makes a value longer than {MAX_VALUE} characters or items")


def _check_product(left: Any, right: Any) -> None:
    """`*` before it runs: a sequence repeated, or whole numbers multiplied, within the size budget."""
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
            fits(len(seq) * times)
            return
    if (
        isinstance(left, int)
        and isinstance(right, int)
        and left.bit_length() + right.bit_length() > MAX_INT_BITS
    ):
        raise BudgetError(f"the template makes a number longer than {MAX_INT_BITS} bits")


def _join(env: SpecEnvironment, original: Callable[..., str], eval_ctx: Any, value: Any, d: str = "",
          attribute: Any = None) -> str:  # fmt: skip
    """jinja's join, after checking the separator repeated between the items fits the size budget."""
    items = list(env.iterate(value))
    fits(len(str(d)) * max(len(items) - 1, 0))
    return original(eval_ctx, items, d, attribute)


def _replace(original: Callable[..., str], eval_ctx: Any, s: Any, old: str, new: str,
             count: int | None = None) -> str:  # fmt: skip
    """jinja's replace, after checking its result fits the size budget (`''` as `old` matches everywhere)."""
    text = str(s)
    matches = text.count(str(old)) if old else len(text) + 1
    if count is not None and count >= 0:
        matches = min(matches, count)
    fits(len(text) + matches * (len(str(new)) - len(str(old))))
    return original(eval_ctx, s, old, new, count)


def render(text: str, variables: dict[str, Any], max_output: int) -> str:
    """The rendered text. Raises jinja2.TemplateError (BudgetError when a budget is spent)."""
    env = SpecEnvironment()
    template = env.from_string(text)
    out: list[str] = []
    size = 0
    for chunk in template.generate(**variables):
        size += len(chunk)
        if size > max_output:
            raise BudgetError(f"the rendered spec is longer than {max_output} characters")
        out.append(chunk)
    return "".join(out)
