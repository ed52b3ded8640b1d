"""The project stands alone: nothing in it cites a file outside the repository (the steering workplace's notes
and fixtures live in docs/notes/ and tests/fixtures/ now), names a path of the machine it was built on, or
names a package registry's host (the project says "PyPI", "Debian's archive" and uses the machine's
configured pip and apt sources)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "a citation of the workplace's shared folder": re.compile(
        r"\.\./shared|shared/(fixtures|notes|reference)"
    ),
    "a path of the build machine": re.compile(r"/work/(main|shared)|/opt/wheels|/root/\.|/opt/pypi"),
    "a package registry's host": re.compile(
        r"pypi\.org|pythonhosted\.org|deb\.debian\.org|security\.debian\.org|npmjs\.(org|com)"
    ),
}


def tracked_texts() -> list[tuple[str, str]]:
    """(path, text) of every tracked text file but this one: inputs nobody here wrote included (a dataset
    row that named a registry was edited, tests/fixtures/llamafactory-v0.9.5/SOURCE.md says so)."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    out = []
    for name in names.splitlines():
        path = REPO / name
        if not path.is_file() or path == Path(__file__).resolve():
            continue
        try:
            out.append((name, path.read_text()))
        except UnicodeDecodeError:
            continue  # binary
    return out


def test_nothing_cites_outside_the_repository_names_a_machine_path_or_a_registry_host() -> None:
    found = [
        f"{name}:{number}: {what}: {line.strip()[:100]}"
        for name, text in tracked_texts()
        for number, line in enumerate(text.splitlines(), 1)
        for what, pattern in FORBIDDEN.items()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)
