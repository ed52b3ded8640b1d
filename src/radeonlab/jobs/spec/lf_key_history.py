"""Keys LLaMA-Factory dropped between 0.8.0 and the pinned release, and what replaced them.

Two parts in jobs/spec/lf_key_history.json (committed, so `radeonlab check` needs no network):

- "removed": generated. Each LLaMA-Factory release from 0.8.0 to the pin is downloaded from PyPI (the
  wheel, no dependencies) into a throwaway folder and its hparams/*.py dataclass fields are read with `ast`
  (importing would need torch and transformers); a key present in one release and absent from the next, and
  absent from the pinned key list (lf_args.json), is "removed" with the release that dropped it:

      python -m radeonlab.jobs.spec.lf_key_history --regenerate

- "moved": written by hand, kept by --regenerate. A removed key whose meaning went to another key: its
  replacement, how the value maps, and the source (the release's code lines that show it).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("lf_key_history.json")
FIRST = "0.8.0"
# Every release on PyPI from FIRST up to the pin (PyPI's release list for llamafactory).
RELEASES = ("0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4", "0.9.5")


def wheel_fields(wheel: Path) -> set[str]:
    """The annotated class fields of llamafactory/hparams/*.py in a wheel: the keys its parser accepts."""
    fields: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if re.fullmatch(r"llamafactory/hparams/[^/]+\.py", name):
                for node in ast.walk(ast.parse(archive.read(name))):
                    if isinstance(node, ast.ClassDef):
                        fields |= {
                            s.target.id
                            for s in node.body
                            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                        }
    return fields


def removed_keys(fields: dict[str, set[str]], current: set[str]) -> dict[str, dict[str, str]]:
    """Diff consecutive releases (in `fields`' order): key -> {last_in, removed_in}, current keys left out."""
    removed: dict[str, dict[str, str]] = {}
    versions = list(fields)
    for older, newer in zip(versions, versions[1:], strict=False):
        for key in sorted(fields[older] - fields[newer]):
            if key not in current:
                removed[key] = {"last_in": older, "removed_in": newer}
    return removed


def regenerate(releases: tuple[str, ...] = RELEASES) -> dict[str, dict[str, str]]:
    """Download each release's wheel into a throwaway folder and diff their fields."""
    from radeonlab.jobs.spec import lf_args

    fields: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for version in releases:
            pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            subprocess.run([*pip, "-d", f"{tmp}/{version}", f"llamafactory=={version}"], check=True)
            fields[version] = wheel_fields(next(Path(tmp, version).glob("*.whl")))
    return removed_keys(fields, set(lf_args.keys()))


@cache
def load() -> dict[str, Any]:
    """{"releases", "removed": {key: {last_in, removed_in}}, "moved": {key: {replacement, values, source}}}"""
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


def history_fix(key: str, value: Any) -> tuple[str, str] | None:
    """(why, fix) for a key LLaMA-Factory dropped since 0.8.0, or None when the key has no history."""
    data = load()
    gone = data["removed"].get(key)
    if gone is None:
        return None
    why = (
        f"LLaMA-Factory {gone['removed_in']} removed this key (last in {gone['last_in']}); the pinned "
        f"{data['releases'][-1]} stops with `Some keys are not used by the HfArgumentParser`"
    )
    moved = data["moved"].get(key)
    if moved is None:
        return why, "remove it (no key took its place)"
    values: dict[str, str] = moved["values"]
    shown = json.dumps(value) if isinstance(value, bool) or value is None else str(value)
    mapped = values.get(shown, values.get("*", "{value}"))
    return why, f"{moved['replacement']}: {mapped.replace('{value}', shown)}" + (
        f" ({moved['note']})" if moved.get("note") else ""
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radeonlab.jobs.spec.lf_key_history")
    parser.add_argument("--regenerate", action="store_true", required=True, help="rewrite the removed part")
    parser.parse_args(argv)
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    data["releases"], data["removed"] = list(RELEASES), regenerate()
    DATA_FILE.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {DATA_FILE}: {len(data['removed'])} removed keys, {len(data['moved'])} moved by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
