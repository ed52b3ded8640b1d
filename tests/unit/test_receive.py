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


def test_the_store_is_private_to_the_training_users_group_and_old_modes_are_repaired(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
) -> None:
    """`sudo -u nobody cat` read an uploaded .netrc out of a 0755 store with 0444 blobs: now 0440 in 0750,
    and a store an older radeonlab made is repaired by the next upload."""
    blobs = tmp_path / "blobs"
    (blobs / "sha256").mkdir(parents=True)
    old = blobs / "sha256" / ("cd" * 32)
    old.write_bytes(b"old")
    old.chmod(0o444)
    for folder in (blobs, blobs / "sha256"):
        folder.chmod(0o755)
    data = b"secret dataset\n"
    head = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    lines = [json.dumps({"files": [head]}).encode() + b"\n", json.dumps(head).encode() + b"\n" + data]
    assert run(blobs, lines, monkeypatch)[-1]["stored"] == [head["sha256"]]
    paths = (blobs, blobs / "sha256", old, blobs / "sha256" / head["sha256"])
    modes = {p.name: p.stat().st_mode & 0o777 for p in paths}
    assert modes == {"blobs": 0o750, "sha256": 0o750, old.name: 0o440, head["sha256"]: 0o440}
