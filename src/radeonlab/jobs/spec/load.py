"""A job spec: a plain LLaMA-Factory training YAML plus an optional `radeonlab:` block.

    model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
    stage: sft
    ...                                  # any LLaMA-Factory `train` key, passed through unchanged
    dataset_dir: data                    # a LOCAL folder, relative to this file (uploaded with the job)
    radeonlab:                           # optional; removed before the YAML reaches LLaMA-Factory
      datasets:                          # local dataset files to upload; each gets a dataset_info entry
        - data/extra.jsonl               # name = file stem, formatting alpaca
        - {file: data/chat.json, name: chat, formatting: sharegpt, columns: {messages: conversations}}
      files: [ds_config.json]            # other local files the job needs, uploaded beside the spec
      host: ws1                          # a host name of the inventory (empty: pick by placement)
      placement: {host_group: lab, gfx_family: gfx11, min_vram_gb: 24}
      remedies: {nan: on, oom: [halve_batch, halve_cutoff]}   # on | off | a list of steps to try in order
      nodes: 1
      env: {HF_HUB_OFFLINE: "1"}         # extra environment for the training process; names that look
                                         # secret (*TOKEN*, *KEY*...: jobs/apply/secrets.py) reach it through
                                         # env.secret only, never job.json
      forward_env: [WANDB_API_KEY]       # variables of the laptop's environment to pass on as secrets
                                         # (HF_TOKEN always is, when set)
      limits: {memory_gb: 48}            # a cgroup memory limit (systemd-run MemoryMax=) on GPU hosts;
                                         # address_space_gb: RLIMIT_AS (ulimit -v), CPU hosts only
                                         # (HIP reserves large address ranges at start-up). A runaway job
                                         # fails with an allocation error (and the OOM remedy) instead of
                                         # driving the host into swap or the kernel OOM killer
      notify: ["ntfys://{{ env.NTFY_TOPIC }}"]   # Apprise URLs the workstation tells when the job starts,
                                         # logs its first step, takes a remedy, ends (notify_messenger.py);
                                         # secrets: env.secret only. Absent: the inventory's radeonlab_notify

Values may use Jinja2 (`{{ env.USER }}`, `{{ spec_dir }}`), rendered in a sandbox with StrictUndefined and
budgets (jobs/spec/template.py) before the YAML is parsed. YAML is read the way LLaMA-Factory reads it
(OmegaConf's loader: `1e-4` is a float, no timestamps, duplicate keys refused), and every key keeps its line
number for messages.

No spec can hang or exhaust the checker: only a regular file is read (a FIFO, device or socket is refused by
its type before any open: jobs/spec/inputs.py), at most MAX_SPEC_BYTES of it; YAML nesting deeper than
MAX_DEPTH is refused where it starts, aliases may expand the document to at most MAX_NODES values (an
"alias bomb" of nine nested lists of nine is 9**9), and an alias inside the node it names is refused. Every
failure is one SpecError line with file:line.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from radeonlab.errors import InputError, SpecError
from radeonlab.jobs.spec import inputs, template
from radeonlab.jobs.spec.block import (  # the block's types, re-exported: a spec carries them
    BLOCK_KEY,
    LIMIT_NAMES,
    REMEDY_NAMES,
    DatasetFile,
    Placement,
    RadeonlabBlock,
    Remedy,
    parse_block,
)
from radeonlab.jobs.spec.paths import local_path

__all__ = [
    "BLOCK_KEY",
    "LIMIT_NAMES",
    "REMEDY_NAMES",
    "DatasetFile",
    "Placement",
    "RadeonlabBlock",
    "Remedy",
    "Spec",
    "load",
    "parse_text",
    "with_overrides",
]
# LLaMA-Factory's default for `dataset_dir` (DataArguments); radeonlab resolves it relative to the spec file.
DEFAULT_DATASET_DIR = "data"
# `dataset_dir` values that tell LLaMA-Factory to read dataset_info.json from the hub (data/parser.py).
REMOTE_DATASET_DIR_PREFIX = "REMOTE:"
ONLINE_DATASET_DIR = "ONLINE"
# LLaMA-Factory's own example configs are 1-5 KB; the pure-Python YAML reader takes ~0.5 s per 256 KiB here.
MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 64  # nested mappings/lists; a LLaMA-Factory config nests 1 deep, the radeonlab block 3
MAX_NODES = 100_000  # values of the document once aliases are expanded


@dataclass
class Spec:
    """A loaded spec: the LLaMA-Factory keys (block removed), the block, and line numbers of every key."""

    path: Path
    train: dict[str, Any]
    radeonlab: RadeonlabBlock
    lines: dict[str, int]  # top-level key -> line; "radeonlab.placement.min_vram_gb" for nested block keys
    block_problems: list[tuple[int, str]] = field(default_factory=list)  # (line, message) of a bad block
    overrides: dict[str, str] = field(default_factory=dict)  # `submit SPEC key=value`, as typed

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def line_of(self, key: str) -> int:
        """Line of a key (dotted for the block); 1 when unknown (e.g. a required key that is absent); -n for
        a key set by the n-th command-line override (problems.name_overrides turns it into the override's
        own text: a typo there is not line 1 of the file)."""
        if key in self.overrides:
            return -1 - list(self.overrides).index(key)
        return self.lines.get(key, 1)

    def dataset_dir(self) -> Path | None:
        """The local dataset folder (relative to the spec file); None when it is read from the hub."""
        value = self.train.get("dataset_dir", DEFAULT_DATASET_DIR)
        if (
            not isinstance(value, str)
            or value == ONLINE_DATASET_DIR
            or value.startswith(REMOTE_DATASET_DIR_PREFIX)
        ):
            return None
        return local_path(self.base_dir, value)  # `~` as for every path key


# ------------------------------------------------------------------------------------------------ loading


class _Loader(yaml.SafeLoader):
    """SafeLoader resolving scalars like OmegaConf's loader (what `llamafactory-cli train x.yaml` uses), that
    refuses nesting deeper than MAX_DEPTH where it starts (PyYAML composes nodes recursively)."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
        self.depth += 1
        try:
            node: yaml.Node | None = super().compose_node(parent, index)
            return node
        finally:
            self.depth -= 1


# Same float pattern as omegaconf/_yaml.py get_yaml_loader(): YAML 1.1 needs a dot, OmegaConf accepts 1e-4.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:
         [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)
# OmegaConf drops the timestamp resolver: dates stay strings.
_Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in _Loader.yaml_implicit_resolvers.items()
}


def _render(text: str, path: Path) -> str:
    """Render Jinja2 in the budgeted sandbox; undefined variables are errors. Plain YAML passes unchanged."""
    if "{{" not in text and "{%" not in text and "{#" not in text:
        return text
    variables = {"env": dict(os.environ), "spec_dir": str(path.parent.resolve())}
    try:
        return template.render(text, variables, MAX_SPEC_BYTES)
    except jinja2.TemplateSyntaxError as err:
        raise SpecError(str(path), err.lineno or 1, f"template error: {err.message}") from None
    except jinja2.TemplateError as err:
        raise SpecError(str(path), _template_line(err), f"template error: {err}") from None
    except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError, MemoryError) as err:
        # an expression that fails in Python (1/0, int('x'), a macro calling itself): its words, not its type
        raise SpecError(str(path), _template_line(err), f"template error: {err or 'failed'}") from None


def _template_line(err: BaseException) -> int:
    """The template line of a render error (Jinja rewrites tracebacks to point at `<template>` lines)."""
    line, tb = 1, err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _check_duplicates(node: yaml.Node, file: str, seen: set[int] | None = None) -> None:
    """Refuse duplicate keys anywhere (OmegaConf refuses them too; PyYAML would keep the last silently).
    A node an alias repeats is looked at once."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                line = key_node.start_mark.line + 1
                if key_node.value in keys:
                    raise SpecError(
                        file, line, f"duplicate key {key_node.value!r} (first on line {keys[key_node.value]})"
                    )
                keys[key_node.value] = line
            _check_duplicates(value_node, file, seen)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, file, seen)


def _check_expansion(root: yaml.Node, file: str) -> None:
    """Refuse a document whose aliases expand it beyond MAX_NODES values, or that contains itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        line = node.start_mark.line + 1
        if key in open_nodes:
            raise SpecError(file, line, "an alias names the node it is inside (a structure without end)")
        open_nodes.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        open_nodes.discard(key)
        if total > MAX_NODES:
            raise SpecError(
                file, line, f"aliases expand the spec to more than {MAX_NODES} values (an alias bomb?)"
            )
        sizes[key] = total
        return total

    size(root)


def _lines(node: yaml.MappingNode, prefix: str = "") -> dict[str, int]:
    """Key path -> line (1-based) for a mapping node, recursing into the radeonlab block only."""
    out: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        name = prefix + str(key_node.value)
        out[name] = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.MappingNode) and (prefix or name == BLOCK_KEY):
            out.update(_lines(value_node, name + "."))
        elif isinstance(value_node, yaml.SequenceNode) and prefix:
            for i, item in enumerate(value_node.value):
                out[f"{name}.{i}"] = item.start_mark.line + 1
    return out


# The keys LLaMA-Factory reads through split_arg, which takes a comma-separated text or a YAML list alike
# (llamafactory 0.9.5 hparams/data_args.py:148-154, finetuning_args.py:561-573): a list of names is read here
# as the one text every reader of the spec (uploads, estimate, render) takes; the host's config gets the text.
COMMA_KEYS = ("dataset", "eval_dataset", "lora_target", "additional_target", "freeze_trainable_modules",
              "freeze_extra_modules", "oft_target", "galore_target", "apollo_target")  # fmt: skip


def _comma_joined(train: dict[str, Any]) -> dict[str, Any]:
    """train with each COMMA_KEYS list of names joined by commas (other values untouched: check judges)."""
    joined = dict(train)
    for key in COMMA_KEYS:
        value = joined.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) and "," not in v for v in value):
            joined[key] = ",".join(v.strip() for v in value)
    return joined


def parse_text(text: str, path: Path) -> Spec:
    """Load a spec from its text (path: where it lives, for messages and relative paths)."""
    file = str(path)
    text = _render(text, path)
    try:
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
            if root is not None:
                _check_expansion(root, file)
                _check_duplicates(root, file)
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else 1
        raise SpecError(file, line, f"not valid YAML: {err.problem or err}") from None
    except yaml.YAMLError as err:
        raise SpecError(file, 1, f"not valid YAML: {err}") from None
    except RecursionError:  # MAX_DEPTH stops nesting first; this is the last guard
        raise SpecError(file, 1, "not valid YAML: nested too deeply to be read") from None
    if root is None or data is None:
        raise SpecError(file, 1, "empty spec: expected a mapping of LLaMA-Factory keys")
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise SpecError(
            file, root.start_mark.line + 1, f"a spec is a mapping of LLaMA-Factory keys, not {kind}"
        )
    lines = _lines(root)  # type: ignore[arg-type]
    block_raw = data.pop(BLOCK_KEY, None)
    problems: list[tuple[int, str]] = []
    block = parse_block(block_raw, lines, problems)
    return Spec(path=path, train=_comma_joined(data), radeonlab=block, lines=lines, block_problems=problems)


def _value(raw: str) -> Any:
    """One YAML value read like a spec (nesting and alias expansion bounded)."""
    loader = _Loader(raw)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expansion(node, "override")
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def with_overrides(spec: Spec, pairs: list[str]) -> Spec:
    """The spec with `key=value` pairs applied on top, the way `llamafactory-cli train x.yaml key=value`
    reads them (each value parsed as YAML by the spec's loader: `1e-4` is a float, `true` a bool).

    Only top-level LLaMA-Factory keys (a sweep's values); the checks then judge the result."""
    if not pairs:
        return spec
    train = dict(spec.train)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", key) or key == BLOCK_KEY:
            raise InputError(f"override {pair!r}: expected key=value with a LLaMA-Factory key")
        try:
            train[key] = _value(raw) if raw.strip() else ""
        except yaml.YAMLError as err:
            raise InputError(f"override {pair!r}: the value is not valid YAML ({err})") from None
        except SpecError as err:  # an alias bomb or a self-containing value typed on the command line
            raise InputError(f"override {pair!r}: {err.message}") from None
    typed = {p.partition("=")[0].strip(): p.partition("=")[2] for p in pairs}
    return dataclasses.replace(spec, train=_comma_joined(train), overrides={**spec.overrides, **typed})


def load(path: str | os.PathLike[str]) -> Spec:
    """Load a spec file. Raises SpecError (one line, with file:line) when it cannot be read as a spec."""
    p = Path(path)
    try:
        raw = inputs.read_limited(p, MAX_SPEC_BYTES)
    except inputs.Refused as err:
        raise SpecError(str(p), 1, f"spec {err}") from None
    except OSError as err:
        raise SpecError(str(p), 1, f"cannot read spec: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise SpecError(str(p), line, f"not UTF-8 text (byte 0x{raw[err.start]:02x})") from None
    return parse_text(text, p)
