"""radeonlab.jobs.apply.sync against a sandbox host (SIMULATED workstation, real sshd): content-addressed
uploads, fetches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from radeonlab.jobs.apply.sync import SyncError, fetch_files, upload_files
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh.connection import connect, sha256_file

from tests.conftest import inventory_target, module_host

BLOBS = "/home/lab/radeonlab/blobs"
JOBS = "/home/lab/radeonlab/jobs"

pytestmark = pytest.mark.sandbox


host = module_host("xsync")


@pytest.fixture
def target(host, sandbox, monkeypatch: pytest.MonkeyPatch) -> HostTarget:  # noqa: ANN001
    return inventory_target(sandbox, host, monkeypatch)


@pytest.fixture
def dataset(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "dataset"
    folder.mkdir()
    files = {"train 'set' $(id).jsonl": os.urandom(3_000_000), "dataset_info.json": b'{"x": 1}\n'}
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return sorted(folder.iterdir())


def test_upload_twice_sends_nothing_the_second_time(target: HostTarget, dataset: list[Path]) -> None:
    progress: list[tuple[int, int]] = []
    with connect(target) as remote:
        first = upload_files(remote, dataset, BLOBS, f"{JOBS}/j1/data", lambda d, t: progress.append((d, t)))
        total = sum(p.stat().st_size for p in dataset)
        assert first.bytes_sent == total and first.bytes_skipped == 0
        assert progress[-1] == (total, total)
        second = upload_files(remote, dataset, BLOBS, f"{JOBS}/j2/data")
        assert second.bytes_sent == 0 and second.bytes_skipped == total
        assert "sent 0 B; 2 already on the host" in second.summary()
        for path in dataset:
            blob = f"{BLOBS}/sha256/{sha256_file(path)}"
            inodes = remote.run(
                ["stat", "-c", "%i %h", blob, f"{JOBS}/j1/data/{path.name}", f"{JOBS}/j2/data/{path.name}"]
            ).stdout.split("\n")
            assert inodes[0] == inodes[1] == inodes[2]  # the same file: hard links, not copies
            assert int(inodes[0].split()[1]) >= 3


def test_a_damaged_blob_is_detected_and_sent_again(target: HostTarget, host, dataset: list[Path]) -> None:  # noqa: ANN001
    with connect(target) as remote:
        upload_files(remote, dataset, BLOBS, f"{JOBS}/j3/data")
        big = max(dataset, key=lambda p: p.stat().st_size)
        blob = f"{BLOBS}/sha256/{sha256_file(big)}"
        # a job that edited its data/ in place (through the hard link) changed the blob: size+mtime differ
        host.exec(f"chmod u+w '{blob}' && printf x >> '{blob}'")
        again = upload_files(remote, dataset, BLOBS, f"{JOBS}/j4/data")
        assert again.bytes_sent == big.stat().st_size
        assert remote.run(["sha256sum", blob]).stdout.split()[0] == sha256_file(big)


def test_unsafe_or_duplicate_names_are_refused(target: HostTarget, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "same.json").write_text(d)
    with connect(target) as remote:
        with pytest.raises(SyncError, match="two files share a name"):
            upload_files(
                remote, [tmp_path / "a/same.json", tmp_path / "b/same.json"], BLOBS, f"{JOBS}/j5/data"
            )
        with pytest.raises(SyncError, match="unsafe file name '../x'"):
            fetch_files(remote, f"{JOBS}/j1", ["../x"], tmp_path / "out")


def test_fetch_verifies_skips_and_resumes(target: HostTarget, dataset: list[Path], tmp_path: Path) -> None:
    local = tmp_path / "fetched"
    with connect(target) as remote:
        upload_files(remote, dataset, BLOBS, f"{JOBS}/j6/data")
        remote.run(["mkdir", "-p", f"{JOBS}/j6/output/checkpoint-10"])
        remote.write_text_atomic(f"{JOBS}/j6/output/checkpoint-10/adapter_config.json", '{"r": 8}\n')
        report = fetch_files(remote, f"{JOBS}/j6", None, local)
        names = sorted(f.name for f in report.files)
        assert names == sorted(
            [f"data/{p.name}" for p in dataset] + ["output/checkpoint-10/adapter_config.json"]
        )
        for path in dataset:
            assert sha256_file(local / "data" / path.name) == sha256_file(path)
        assert report.bytes_received == sum(f.size for f in report.files)

        again = fetch_files(remote, f"{JOBS}/j6", None, local)
        assert again.bytes_received == 0 and all(f.skipped for f in again.files)

        # a partial earlier download of a changed file: resumed, verified, and only then renamed
        big = max(dataset, key=lambda p: p.stat().st_size)
        target_file = local / "data" / big.name
        target_file.unlink()
        (local / "data" / (big.name + ".part")).write_bytes(big.read_bytes()[:1_000_000])
        resumed = fetch_files(remote, f"{JOBS}/j6/data", [big.name], local / "data")
        assert resumed.bytes_received == big.stat().st_size - 1_000_000
        assert sha256_file(target_file) == sha256_file(big)

        with pytest.raises(SyncError, match="not found in .*: nothing-here.txt"):
            fetch_files(remote, f"{JOBS}/j6", ["nothing-here.txt"], local)


def test_fetch_never_replaces_a_good_file_with_a_bad_transfer(target: HostTarget, tmp_path: Path) -> None:
    local = tmp_path / "keep"
    local.mkdir()
    (local / "result.json").write_text("complete old result\n")
    (local / "result.json.part").write_bytes(b"garbage that is not a prefix of the host's file")
    with connect(target) as remote:
        remote.run(["mkdir", "-p", f"{JOBS}/j7"])
        remote.write_text_atomic(f"{JOBS}/j7/result.json", "new result from the host\n" * 10)
        report = fetch_files(remote, f"{JOBS}/j7", ["result.json"], local)
    # the kept .part was not a prefix: the fetch restarted from zero instead of keeping damaged data
    assert (local / "result.json").read_text() == "new result from the host\n" * 10
    assert report.files[0].transferred >= 250
    assert not (local / "result.json.part").exists()
