"""Reading a dataset file row by row, so that one bad row is reported and the rest are still read.

`read_rows(path, kind)` yields `(line, row)` where row is the parsed value, or a `Malformed` for a row that
could not be read. The aim is one pass that names every bad row (a user fixes them all in one round trip):
- JSON Lines: every line stands alone; a malformed line is reported and reading goes on at the next line.
- A JSON array: elements are parsed as soon as they are complete (a multi-GB file never sits in memory).
  After a broken element, reading resumes at the next line that starts an element at the indentation
  earlier elements started at (json.dump(indent=...) and one-row-per-line arrays); a missing comma between
  two elements is reported and parsing continues as if it were there. When no element started its own line
  (a one-line array), nothing after the first structural error can be told apart from it, and the check
  says so.
- CSV: rows as dicts keyed by the header; a row with more fields than the header is reported (pandas, which
  datasets' csv loader uses, stops with `Expected N fields in line M, saw K`); fewer fields read as empty.
- Every line is decoded on its own, so a byte that is not UTF-8 names its line and the others are still read.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# An element of a JSON array is re-parsed once a line could have completed it, or when this much text is
# waiting (keeps a huge single-line element from being re-parsed line by line: quadratic time).
_REPARSE_BYTES = 1 << 20
_MAY_END_ELEMENT = ("}", "},", "]", "],", '"', '",')
UTF8_BOM = b"\xef\xbb\xbf"
# Python's JSON reader recurses per nesting level and stops near the interpreter's recursion limit (~1000);
# `datasets` 4.0.0 fails on such a row too (RecursionError, measured at 1500 and 5000 levels in the lf_args
# generator venv), so it is an error, with the line.
TOO_DEEP = "malformed JSON: nested too deeply to be read (about 1000 levels)"


@dataclass(frozen=True)
class Malformed:
    """A row that cannot be read: where and why (LLaMA-Factory fails to load the whole dataset for it)."""

    line: int
    message: str


def text_lines(path: Path) -> Iterator[tuple[int, str, Malformed | None]]:
    """(line number, text, decoding problem) per line. Undecodable bytes become U+FFFD in the text.

    UTF-8 never uses byte 0x0A inside a multi-byte sequence, so splitting on b"\\n" first is safe.
    """
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if number == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM) :]  # json_rows/csv_rows decide whether the loader accepts it
            try:
                yield number, raw.decode("utf-8"), None
            except UnicodeDecodeError as err:
                problem = Malformed(
                    number, f"not UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
                )
                yield number, raw.decode("utf-8", errors="replace"), problem


def jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """Rows of a JSON Lines file; a line that does not parse is a Malformed and the next line is read."""
    for number, text, problem in text_lines(path):
        if problem is not None:
            yield number, problem
            continue
        if not text.strip():
            continue
        try:
            yield number, json.loads(text.rstrip("\r\n"))  # a cut-short line errs at its own end
        except json.JSONDecodeError as err:
            yield number, Malformed(number, f"malformed JSON: {err.msg} (column {err.colno})")
        except RecursionError:
            yield number, Malformed(number, TOO_DEEP)


def array_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """Elements of a top-level JSON array with the line each starts on (see the module docstring)."""
    decoder = json.JSONDecoder()
    buf, buf_line, pos = "", 1, 0  # buf[0] is on line buf_line
    buf_at_line_start = True  # whether buf[0] is the first character of its line
    started = expect_comma = finished = eof = False
    last_line = 1  # line of the last complete token, for "ends too early"
    row_indent: str | None = None  # the whitespace before an element that started its own line
    skip_until: int | None = None  # after a broken element: skip lines up to this one, then resync

    def line_at(index: int) -> int:
        return buf_line + buf.count("\n", 0, index)

    def indent_before(index: int) -> str | None:
        start = buf.rfind("\n", 0, index) + 1
        if start == 0 and not buf_at_line_start:
            return None
        prefix = buf[start:index]
        return prefix if not prefix.strip() else None

    lines = text_lines(path)
    while not eof:
        try:
            number, text, problem = next(lines)
            if problem is not None:
                yield number, problem  # the row is still parsed, with U+FFFD where the bad bytes were
            if skip_until is not None:
                # resynchronise: the next line after the broken element that starts a row at row_indent
                if number <= skip_until or row_indent is None or not _starts_row(text, row_indent):
                    continue
                buf, buf_line, pos, buf_at_line_start = text, number, 0, True
                skip_until, expect_comma = None, False
            else:
                buf += text
            if not text.rstrip().endswith(_MAY_END_ELEMENT) and len(buf) - pos < _REPARSE_BYTES:
                continue
        except StopIteration:
            eof = True
        if skip_until is not None:
            continue
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos >= len(buf):
                break
            if finished:
                yield line_at(pos), Malformed(line_at(pos), "malformed JSON: extra data after the closing ]")
                return
            if not started:
                if buf[pos] != "[":
                    yield line_at(pos), Malformed(line_at(pos), "malformed JSON: expected [")
                    return
                started, pos, last_line = True, pos + 1, line_at(pos)
                continue
            if buf[pos] == "]":
                finished, pos = True, pos + 1
                continue
            if expect_comma:
                expect_comma = False
                if buf[pos] == ",":
                    pos += 1
                    continue
                # a missing comma: report it and read on as if it were there
                yield line_at(pos), Malformed(line_at(pos), "malformed JSON: expected , or ] between rows")
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except RecursionError:
                yield line_at(pos), Malformed(line_at(pos), TOO_DEEP + "; the rows after it are not checked")
                return
            except json.JSONDecodeError as err:
                incomplete = err.pos >= len(buf.rstrip()) or (
                    err.msg.startswith("Invalid control character") and err.pos == len(buf) - 1
                )
                if incomplete and not eof:
                    break
                message = f"malformed JSON: {err.msg}"
                at = line_at(min(err.pos, max(len(buf.rstrip()) - 1, 0)))  # not past the last text
                if row_indent is None:
                    row_indent = indent_before(pos)  # the broken element may start its own line
                if row_indent is None:
                    # nothing tells where the next row starts: stop here and say so
                    message += "; the rows after it are not checked (no row starts its own line)"
                    yield at, Malformed(at, message)
                    return
                yield at, Malformed(at, message)
                skip_until = line_at(pos)  # resume after the line the broken element starts on
                break
            if end >= len(buf) and not eof and not isinstance(obj, dict | list | str):
                break  # a bare number may continue on the next read
            indent = indent_before(pos)
            if indent is not None:
                row_indent = indent
            last_line = line_at(end - 1)
            yield line_at(pos), obj
            pos, expect_comma = end, True
        if skip_until is not None:
            buf_line += buf.count("\n")
            buf, pos = "", 0
            continue
        # drop what is consumed, keeping line numbers right and the indentation of a row not yet complete
        cut, line_start = pos, buf.rfind("\n", 0, pos) + 1
        if not buf[line_start:pos].strip() and (line_start > 0 or buf_at_line_start):
            cut = line_start
        buf_at_line_start = buf_at_line_start if cut == 0 else buf[cut - 1] == "\n"
        buf_line += buf.count("\n", 0, cut)
        buf, pos = buf[cut:], pos - cut
    if skip_until is None and not finished:
        yield last_line, Malformed(last_line, "malformed JSON: the file ends before the closing ]")


def _starts_row(text: str, indent: str) -> bool:
    return text.startswith(indent) and text[len(indent) : len(indent) + 1] == "{"


def json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """Rows of a .json/.jsonl file: a JSON array, or JSON Lines (datasets' json loader accepts both).

    A UTF-8 BOM is read the way `datasets` 4.0.0 (the pinned release, with pyarrow 26) reads it, as measured
    in the lf_args generator venv: pyarrow's JSON Lines reader skips it, so JSON Lines with a BOM load; a
    JSON array is not JSON Lines, and the fallback (pandas.read_json on the text opened as utf-8) fails on
    the BOM (`DatasetGenerationError`), so an array with a BOM is an error at line 1 (its rows are still
    checked)."""
    with path.open("rb") as f:
        head = f.read(4096)
    bom = head.startswith(UTF8_BOM)
    if head[len(UTF8_BOM) if bom else 0 :].lstrip(b" \t\r\n").startswith(b"["):
        if bom:
            yield 1, Malformed(1, "a UTF-8 BOM before a JSON array: `datasets` loads JSON Lines with one, "
                                  "not an array (save the file without the BOM)")  # fmt: skip
        yield from array_rows(path)
    else:
        yield from jsonl_rows(path)


def csv_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """Rows of a CSV file as {header: value}; empty fields are None (pandas reads them as NaN)."""
    problems = {n: p for n, _, p in text_lines(path) if p is not None}
    yield from sorted(problems.items())
    # utf-8-sig: a BOM is not part of the first column's name (pandas, behind `datasets`, drops it)
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except (StopIteration, csv.Error):
            return
        row_start = reader.line_num + 1
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                yield row_start, Malformed(row_start, f"malformed CSV: {err}")
                return
            if fields and len(fields) > len(header):
                message = (
                    f"{len(fields)} fields but the header has {len(header)} (the csv loader stops with "
                    f"`Expected {len(header)} fields in line {row_start}, saw {len(fields)}`)"
                )
                yield row_start, Malformed(row_start, message)
            elif fields and row_start not in problems:
                yield row_start, {h: (v if v != "" else None) for h, v in zip(header, fields, strict=False)}
            row_start = reader.line_num + 1


def read_rows(path: Path, kind: str) -> Iterator[tuple[int, Any]]:
    """Rows of a dataset file of a FILE_TYPES kind that has rows ("json" or "csv")."""
    if kind == "csv":
        return csv_rows(path)
    return json_rows(path)


def decode_problems(path: Path) -> list[Malformed]:
    """Lines of a text file that are not UTF-8 (every one, not just the first)."""
    return [p for _, _, p in text_lines(path) if p is not None]
