"""Dataset file checks: the rows LLaMA-Factory 0.9.5 would refuse, crash on, or silently drop.

The rules mirror llamafactory 0.9.5 (read in the generator venv, site-packages/llamafactory/):
- data/parser.py `DatasetAttr.join`: a `columns`/`tags` mapping REPLACES the defaults (unlisted -> None).
- data/converter.py `AlpacaDatasetConverter` / `SharegptDatasetConverter`: how a row becomes prompt/response,
  and which sharegpt rows are "abnormal" (wrong role order, wrong turn count) and emptied.
- data/processor/{supervised,pairwise,feedback,unsupervised}.py: "Dropped invalid example" when the prompt has
  an even number of turns or the response count is wrong for the stage. Those rows vanish with a warning in
  the log and exit code 0, so radeonlab reports them as errors before upload.
- extras/constants.py FILEEXT2TYPE: the file types LLaMA-Factory loads.

Files are streamed row by row (jobs/spec/rows.py), so a multi-GB file never sits in memory, line numbers come
from the file itself, and a malformed row is reported without stopping the rest of the file: every bad row is
named in one pass (at most MAX_ROW_PROBLEMS_PER_FILE listed per file, then a count).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.jobs.spec import inputs
from radeonlab.jobs.spec.problems import ERROR, INFO, WARNING, Problem
from radeonlab.jobs.spec.rows import Malformed, decode_problems, read_rows

# extras/constants.py FILEEXT2TYPE
FILE_TYPES = {
    "arrow": "arrow",
    "csv": "csv",
    "json": "json",
    "jsonl": "json",
    "parquet": "parquet",
    "txt": "text",
}
# After this many row problems in one file, the rest are counted, not listed.
MAX_ROW_PROBLEMS_PER_FILE = 20
# `stage` key -> the stage the workflow passes to get_dataset (train/dpo and train/rm pass "rm").
DATA_STAGE = {"pt": "pt", "sft": "sft", "rm": "rm", "dpo": "rm", "ppo": "ppo", "kto": "kto"}
_CITE_DROP = "LLaMA-Factory drops it with a log warning and still exits 0"
_CITE_LOAD = " (LLaMA-Factory fails to load the dataset)"


@dataclass
class DatasetAttr:
    """The parts of llamafactory's DatasetAttr (data/parser.py) that decide how rows are read."""

    formatting: str = "alpaca"
    ranking: bool = False
    system: str | None = None
    tools: str | None = None
    chosen: str | None = None
    rejected: str | None = None
    kto_tag: str | None = None
    prompt: str | None = "instruction"
    query: str | None = "input"
    response: str | None = "output"
    history: str | None = None
    messages: str | None = "conversations"
    role_tag: str | None = "from"
    content_tag: str | None = "value"
    user_tag: str | None = "human"
    assistant_tag: str | None = "gpt"
    observation_tag: str | None = "observation"
    function_tag: str | None = "function_call"
    system_tag: str | None = "system"

    @classmethod
    def from_info(cls, entry: dict[str, Any]) -> DatasetAttr:
        """Mirror DatasetAttr.join: listed columns/tags replace ALL defaults of their group."""
        attr = cls(formatting=entry.get("formatting", "alpaca"), ranking=bool(entry.get("ranking", False)))
        if isinstance(entry.get("columns"), dict):
            for name in ("prompt", "query", "response", "history", "messages", "system", "tools", "chosen"):
                setattr(attr, name, entry["columns"].get(name))
            for name in ("rejected", "kto_tag"):
                setattr(attr, name, entry["columns"].get(name))
        if isinstance(entry.get("tags"), dict):
            for name in ("role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag"):
                setattr(attr, name, entry["tags"].get(name))
            for name in ("function_tag", "system_tag"):
                setattr(attr, name, entry["tags"].get(name))
        return attr


class _Reporter:
    """Collects problems for one file, capping row-level ones."""

    def __init__(self, path: Path) -> None:
        self.file = str(path)
        self.problems: list[Problem] = []
        self.row_problems = 0

    def add(self, line: int, message: str, severity: str = ERROR, fix: str | None = None) -> None:
        self.problems.append(Problem(self.file, line, message, severity, fix))

    def row(self, line: int, message: str, severity: str = ERROR, fix: str | None = None) -> None:
        self.row_problems += 1
        if self.row_problems <= MAX_ROW_PROBLEMS_PER_FILE:
            self.add(line, message, severity, fix)

    def finish(self) -> list[Problem]:
        extra = self.row_problems - MAX_ROW_PROBLEMS_PER_FILE
        if extra > 0:
            self.add(1, f"{extra} more row problems in this file not listed", ERROR)
        return self.problems


# ------------------------------------------------------------------------------------------------ rows


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _jtype(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "list", dict: "object"}
    return names.get(type(value), "null")


def _check_alpaca(row: dict[str, Any], line: int, attr: DatasetAttr, stage: str, rep: _Reporter) -> None:
    """Mirror AlpacaDatasetConverter.__call__ and the stage's processor drop rule."""
    prompt_turns = 0
    if attr.history and isinstance(row.get(attr.history), list):
        for item in row[attr.history]:
            if not (isinstance(item, list) and len(item) == 2):
                rep.row(
                    line, f"`{attr.history}` entries must be [question, answer] pairs (LLaMA-Factory crashes)"
                )
                return
        prompt_turns += 2 * len(row[attr.history])
    prompt_turns += 1  # the converter always appends the user turn, even when empty
    query = [row.get(c) for c in (attr.prompt, attr.query) if c and row.get(c)]
    if stage == "pt":
        if not query or not all(_is_str(q) for q in query):
            rep.row(line, f"empty or non-text `{attr.prompt}`: the pre-training text is empty", WARNING)
        return
    if not query:
        rep.row(line, f"empty prompt: `{attr.prompt}` and `{attr.query}` are both empty or missing", WARNING)

    is_kto = bool(attr.kto_tag) and isinstance(row.get(attr.kto_tag or ""), bool)
    is_pair = attr.ranking and _is_str(row.get(attr.chosen or "")) and _is_str(row.get(attr.rejected or ""))
    if is_kto or is_pair:
        responses = 2
    elif attr.response and _is_str(row.get(attr.response)):
        responses = 1
    else:
        responses = 0

    if stage == "sft" and responses != 1:
        missing = attr.response or "output"
        if stage == "sft" and attr.kto_tag and isinstance(row.get(attr.kto_tag), bool):
            why = f"a KTO row (`{attr.kto_tag}` set) in an sft run"
        else:
            why = f"`{missing}` is missing or not a string"
        rep.row(
            line, f"row dropped: {why}; {_CITE_DROP}", fix=f"give every row a non-empty `{missing}` string"
        )
    elif stage == "sft" and attr.response and row.get(attr.response) == "":
        rep.row(
            line,
            f"empty `{attr.response}`: LLaMA-Factory keeps the row and trains an empty answer",
            fix=f"fill in `{attr.response}` or remove the row",
        )
    elif stage in ("rm", "kto") and responses < 2:
        need = (
            f"`{attr.chosen}` and `{attr.rejected}` strings"
            if stage == "rm"
            else f"a boolean `{attr.kto_tag}`"
        )
        rep.row(line, f"row dropped: it needs {need}; {_CITE_DROP}")


def _check_sharegpt(row: dict[str, Any], line: int, attr: DatasetAttr, stage: str, rep: _Reporter) -> None:
    """Mirror SharegptDatasetConverter.__call__ (turn order and count) and the processors' drop rules."""
    messages = row.get(attr.messages or "")
    if not isinstance(messages, list):
        rep.row(line, f"`{attr.messages}` is missing or not a list: LLaMA-Factory stops with a TypeError")
        return
    role, content = attr.role_tag or "", attr.content_tag or ""
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or role not in msg or content not in msg:
            rep.row(
                line,
                f"message {i + 1} needs `{role}` and `{content}` keys: LLaMA-Factory stops with KeyError",
            )
            return
        if not _is_str(msg[content]):
            rep.row(line, f"message {i + 1}: `{content}` is {_jtype(msg[content])}, not text")
            return
    if attr.system_tag and messages and messages[0][role] == attr.system_tag:
        messages = messages[1:]
    odd_tags = (attr.user_tag, attr.observation_tag)
    even_tags = (attr.assistant_tag, attr.function_tag)
    for i, msg in enumerate(messages):
        allowed = (odd_tags, even_tags)[i % 2]
        if msg[role] not in allowed:
            names = " or ".join(repr(t) for t in allowed if t)
            rep.row(
                line,
                f"row dropped: message {i + 1} has {role}={msg[role]!r} where {names} must come; "
                f"{_CITE_DROP}",
                fix="turns must alternate user, assistant, user, ... (one system first)",
            )
            return
    count = len(messages)
    if (not attr.ranking and count % 2 != 0) or (attr.ranking and count % 2 == 0):
        want = "an odd number of turns (ending with the user)" if attr.ranking else "user/assistant pairs"
        rep.row(line, f"row dropped: {count} turns, LLaMA-Factory needs {want}; {_CITE_DROP}")
        return
    if stage == "pt":
        return
    if attr.kto_tag and isinstance(row.get(attr.kto_tag), bool):
        responses = 2
    elif attr.ranking:
        chosen, rejected = row.get(attr.chosen or ""), row.get(attr.rejected or "")
        if not (isinstance(chosen, dict) and isinstance(rejected, dict)):
            rep.row(
                line, f"row dropped: `{attr.chosen}` and `{attr.rejected}` must be messages; {_CITE_DROP}"
            )
            return
        for name, msg in ((attr.chosen, chosen), (attr.rejected, rejected)):
            if msg.get(role) not in even_tags:
                rep.row(
                    line, f"`{name}` has {role}={msg.get(role)!r}, expected {attr.assistant_tag!r}", WARNING
                )
        responses = 2
    else:
        responses = 1 if count else 0
    if count == 0 and not attr.ranking:
        rep.row(line, f"row dropped: no messages; {_CITE_DROP}")
    elif stage in ("rm", "kto") and responses < 2:
        need = "chosen/rejected messages" if stage == "rm" else f"a boolean `{attr.kto_tag}`"
        rep.row(line, f"row dropped: it needs {need}; {_CITE_DROP}")
    elif stage == "sft" and responses != 1:
        rep.row(line, f"row dropped: a KTO row (`{attr.kto_tag}` set) in an sft run; {_CITE_DROP}")
    elif stage == "sft" and messages[-1][content] == "":
        rep.row(
            line,
            "the last assistant message is empty: LLaMA-Factory trains an empty answer",
            fix="fill it in or remove the row",
        )


def _check_openai(row: dict[str, Any], line: int, attr: DatasetAttr, stage: str, rep: _Reporter) -> None:
    """The openai formatting: structure only (its tool-call merging is not mirrored)."""
    messages = row.get(attr.messages or "")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        rep.row(line, f"`{attr.messages}` is missing or not a list of messages")


_ROW_CHECKS = {"alpaca": _check_alpaca, "sharegpt": _check_sharegpt, "openai": _check_openai}


def _required_columns(attr: DatasetAttr) -> list[str]:
    """Columns the converter indexes unconditionally: absent from every row -> KeyError (whole run fails)."""
    if attr.formatting == "alpaca":
        return [c for c in (attr.prompt, attr.query, attr.response) if c]
    return [c for c in (attr.messages,) if c]


def check_file(path: Path, attr: DatasetAttr, stage: str) -> list[Problem]:
    """All problems of one local dataset file (or every file of a dataset folder)."""
    rep = _Reporter(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        rep.add(1, "dataset file not found", fix="fix `file_name` in dataset_info.json or the path")
        return rep.finish()
    except OSError as err:
        rep.add(1, f"cannot read the dataset: {err.strerror or err}")
        return rep.finish()
    special = inputs.special_kind(info.st_mode)
    if special:  # a FIFO would block the reader (here and LLaMA-Factory's on the host), a device never ends
        rep.add(1, f"the dataset is {special}, not a regular file: not read", fix="name a regular file")
        return rep.finish()
    if stat.S_ISDIR(info.st_mode):
        try:
            files = sorted(p for p in path.iterdir() if not p.is_dir())  # FIFOs too: each is refused
        except OSError as err:
            rep.add(1, f"cannot list the dataset folder: {err.strerror or err}")
            return rep.finish()
        if not files:
            rep.add(1, "dataset folder is empty")
        types = {FILE_TYPES.get(p.suffix[1:]) for p in files}
        if len(types) > 1:
            rep.add(
                1, "LLaMA-Factory needs one file type per dataset folder (`File types should be identical`)"
            )
        return rep.finish() + [p for f in files for p in check_file(f, attr, stage)]
    kind = FILE_TYPES.get(path.suffix[1:])
    if kind is None:
        rep.add(
            1,
            f"LLaMA-Factory cannot load {path.suffix or 'extension-less'} files",
            fix=f"use one of: {', '.join('.' + e for e in FILE_TYPES)}",
        )
        return rep.finish()
    if info.st_size == 0:
        rep.add(1, "empty file (0 bytes)")
        return rep.finish()
    if kind in ("parquet", "arrow"):
        rep.add(1, f"{kind} file not validated (binary format)", INFO)
        return rep.finish()
    try:
        return _check_rows(path, kind, attr, stage, rep)
    except OSError as err:  # unreadable (permissions), or an I/O error part way
        rep.add(1, f"cannot read the dataset: {err.strerror or err}")
        return rep.finish()


def _check_rows(path: Path, kind: str, attr: DatasetAttr, stage: str, rep: _Reporter) -> list[Problem]:
    if kind == "text":
        for bad in decode_problems(path):
            rep.row(bad.line, bad.message + _CITE_LOAD)
        return rep.finish()

    check_row = _ROW_CHECKS.get(attr.formatting)
    if check_row is None:
        rep.add(1, f"unknown formatting {attr.formatting!r} (LLaMA-Factory: alpaca, sharegpt, openai)")
        return rep.finish()
    seen_types: dict[str, tuple[str, int]] = {}
    present: set[str] = set()
    rows = malformed = 0
    for line, row in read_rows(path, kind):
        if isinstance(row, Malformed):
            malformed += 1
            rep.row(row.line, row.message + _CITE_LOAD)
            continue
        rows += 1
        if not isinstance(row, dict):
            rep.row(line, f"a row must be a JSON object, got {_jtype(row)}")
            continue
        for column, value in row.items():
            present.add(column)
            kind_here = _jtype(value)
            if kind_here == "null":
                continue
            first = seen_types.setdefault(column, (kind_here, line))
            if first[0] != kind_here:
                rep.row(
                    line,
                    f"`{column}` is a {kind_here} here but a {first[0]} on line {first[1]}: "
                    "the loader (pyarrow) refuses mixed column types and the run fails",
                )
        check_row(row, line, attr, stage, rep)
    if malformed:
        return rep.finish()
    if rows == 0:
        rep.add(1, "no rows")
    for column in _required_columns(attr):
        if rows and column not in present:
            rep.add(
                1,
                f"column `{column}` appears in no row: LLaMA-Factory stops with KeyError",
                fix="map the right column in dataset_info.json `columns`",
            )
    return rep.finish()
