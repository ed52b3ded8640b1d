"""The host's content store receiver (jobs/host/receive.py) run as a module: asking which blobs a host has
(what `submit --dry-run` and a refused `--strict` submit do) writes nothing; a stored blob is verified."""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

from radeonlab.jobs.host import receive


def run(blobs: Path, lines: list[bytes], monkeypatch) -> list[dict]:  # noqa: ANN001
    out = io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(b"".join(lines)))
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    receive.main([str(blobs)])
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_asking_what_the_host_has_creates_no_folder(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    blobs = tmp_path / "blobs"
    digest = "ab" * 32
    answers = run(
        blobs, [json.dumps({"files": [{"sha256": digest, "size": 3}]}).encode() + b"\n"], monkeypatch
    )
    assert answers[0] == {"have": [], "partial": {}} and answers[1] == {"stored": [], "failed": {}}
    assert not blobs.exists()  # a refused submit leaves the host as it was


def test_a_sent_blob_is_stored_read_only_under_its_digest(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    data = b"hello\n"
    digest = hashlib.sha256(data).hexdigest()
    head = {"sha256": digest, "size": len(data)}
    lines = [json.dumps({"files": [head]}).encode() + b"\n", json.dumps(head).encode() + b"\n" + data]
    answers = run(tmp_path / "blobs", lines, monkeypatch)
    assert answers[-1] == {"stored": [digest], "failed": {}}
    stored = tmp_path / "blobs" / "sha256" / digest
    assert stored.read_bytes() == data and stored.stat().st_mode & 0o777 == receive.BLOB_MODE
