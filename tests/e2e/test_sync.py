"""Job data to and from a sandbox host (SIMULATED workstation, real sshd), as submit and fetch move it:
content-addressed uploads into the host's store (jobs/ssh/transfer.py + jobs/host/receive.py), hard links
into the job folder (jobs/host/stage.py), verified and resumable fetches (jobs/host/send.py)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from radeonlab.errors import RemoteCommandError, TransportError
from radeonlab.jobs.apply.submit import upload
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.plan.uploads import Upload
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.jobs.ssh.transfer import LocalFile, blobs_present, fetch, sha256_file, upload_blobs
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
    files = {"train 'set' $(id).jsonl": os.urandom(3_000_000), "small.json": b'{"x": 1}\n'}
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return sorted(folder.iterdir())


def stage(remote: Remote, job_dir: str, links: dict[str, str]) -> None:
    """Hard-link blobs into a job folder with the stage tool, as submit does: {dest: sha256}."""
    request = {
        "job_dir": job_dir,
        "blobs": BLOBS,
        "links": [{"sha256": h, "dest": d} for d, h in links.items()],
    }
    remote.tool("stage", stdin_text=json.dumps(request))


def data_links(files: list[Path]) -> dict[str, str]:
    return {f"data/{p.name}": sha256_file(p) for p in files}


def upload_as_submit(
    remote: Remote, target: HostTarget, files: list[Path], progress: list, present: set[str] | None = None
) -> object:
    """jobs/apply/submit.py's upload for a node that needs `files` in data/ (the fields upload() reads);
    `present`: what the plan found on the host (None: not asked). A bar drawn is recorded as ("bar", 0)."""

    @contextlib.contextmanager
    def bar(_label: str):  # noqa: ANN202
        progress.append(("bar", 0))
        yield lambda done, total: progress.append((done, total))

    node = SimpleNamespace(
        host=target.name,
        present=present,
        record=SimpleNamespace(blobs_dir=BLOBS),
        uploads=[Upload(LocalFile.of(p), f"data/{p.name}") for p in files],
    )
    return upload(node, remote, bar, lambda _line: None)  # type: ignore[arg-type]


def test_upload_twice_sends_nothing_the_second_time(target: HostTarget, dataset: list[Path]) -> None:
    progress: list[tuple[int, int]] = []
    digests = set(data_links(dataset).values())
    total = sum(p.stat().st_size for p in dataset)
    with connect(target) as remote:
        assert (
            blobs_present(remote, [LocalFile.of(p) for p in dataset], BLOBS) == set()
        )  # what --dry-run asks
        first = upload_as_submit(remote, target, dataset, progress)
        assert first.bytes_sent == total and first.bytes_skipped == 0
        assert progress[-1] == (total, total)
        stage(remote, f"{JOBS}/j1", data_links(dataset))
        assert blobs_present(remote, [LocalFile.of(p) for p in dataset], BLOBS) == digests
        drawn: list[tuple[str, int]] = []
        second = upload_as_submit(remote, target, dataset, drawn, present=digests)
        assert second.bytes_sent == 0 and second.bytes_skipped == total
        assert drawn == []  # the plan knew the host holds it all: no empty progress bar
        assert "sent 0 B; 2 already on the host" in second.summary()
        stage(remote, f"{JOBS}/j2", data_links(dataset))
        for path in dataset:
            blob = f"{BLOBS}/sha256/{sha256_file(path)}"
            inodes = remote.run(
                ["stat", "-c", "%i %h", blob, f"{JOBS}/j1/data/{path.name}", f"{JOBS}/j2/data/{path.name}"]
            ).stdout.split("\n")
            assert inodes[0] == inodes[1] == inodes[2]  # the same file: hard links, not copies
            assert int(inodes[0].split()[1]) >= 3


def test_a_damaged_blob_is_detected_and_sent_again(target: HostTarget, host, dataset: list[Path]) -> None:  # noqa: ANN001
    files = [LocalFile.of(p) for p in dataset]
    with connect(target) as remote:
        upload_blobs(remote, files, BLOBS)
        stage(remote, f"{JOBS}/j3", data_links(dataset))
        big = max(files, key=lambda f: f.size)
        blob = f"{BLOBS}/sha256/{big.sha256}"
        # a job that edited its data/ in place (through the hard link) changed the blob: size+mtime differ
        host.exec(f"chmod u+w '{blob}' && printf x >> '{blob}'")
        have, sent = upload_blobs(remote, files, BLOBS)
        assert sent == big.size and big.sha256 not in have
        assert remote.run(["sha256sum", blob]).stdout.split()[0] == big.sha256


def test_unsafe_names_are_refused_on_both_sides(
    target: HostTarget, dataset: list[Path], tmp_path: Path
) -> None:
    sha = sha256_file(dataset[0])
    with connect(target) as remote:
        upload_blobs(remote, [LocalFile.of(dataset[0])], BLOBS)
        with pytest.raises(
            RemoteCommandError, match="refusing link destination: '../x' is not a plain relative path"
        ):
            stage(remote, f"{JOBS}/j5", {"../x": sha})
        assert not remote.run(["test", "-e", f"{JOBS}/x"], check=False).ok
        with pytest.raises(TransportError, match="refusing unsafe file name '../x'"):
            fetch(remote, f"{JOBS}/j5", tmp_path / "out", ["../x"])
        # the host's send refuses a name or folder outside the job folder too, whatever the laptop asked
        for request in ({"names": ["../x"], "under": None}, {"names": None, "under": ["../.."]}):
            refused = remote.tool("send", [f"{JOBS}/j5"], stdin_text=json.dumps(request) + "\n", check=False)
            assert not refused.ok and refused.stdout == "" and "outside the job folder" in refused.stderr
        with pytest.raises(TransportError, match="outside the job folder"):
            fetch(remote, f"{JOBS}/j5", tmp_path / "out", under=["../.."])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*"))


def test_fetch_verifies_skips_and_resumes(target: HostTarget, dataset: list[Path], tmp_path: Path) -> None:
    local = tmp_path / "fetched"
    with connect(target) as remote:
        upload_blobs(remote, [LocalFile.of(p) for p in dataset], BLOBS)
        stage(remote, f"{JOBS}/j6", data_links(dataset))
        remote.run(
            [
                "sh",
                "-c",
                'mkdir -p "$1" && cat > "$1/adapter_config.json"',
                "sh",
                f"{JOBS}/j6/output/checkpoint-10",
            ],
            stdin_text='{"r": 8}\n',
        )
        report = fetch(remote, f"{JOBS}/j6", local)
        names = sorted(f.name for f in report.files)
        assert names == sorted(
            [f"data/{p.name}" for p in dataset] + ["output/checkpoint-10/adapter_config.json"]
        )
        for path in dataset:
            assert sha256_file(local / "data" / path.name) == sha256_file(path)
        assert report.bytes_received == sum(f.size for f in report.files)

        again = fetch(remote, f"{JOBS}/j6", local)
        assert again.bytes_received == 0 and all(f.skipped for f in again.files)
        assert "received 0 B" in again.summary()

        # a partial earlier download of a changed file: resumed, verified, and only then renamed
        big = max(dataset, key=lambda p: p.stat().st_size)
        target_file = local / "data" / big.name
        target_file.unlink()
        (local / "data" / (big.name + ".part")).write_bytes(big.read_bytes()[:1_000_000])
        resumed = fetch(remote, f"{JOBS}/j6/data", local / "data", [big.name])
        assert resumed.bytes_received == big.stat().st_size - 1_000_000
        assert sha256_file(target_file) == sha256_file(big)

        with pytest.raises(TransportError, match="not found in .*: nothing-here.txt"):
            fetch(remote, f"{JOBS}/j6", local, ["nothing-here.txt"])


def test_fetch_never_replaces_a_good_file_with_a_bad_transfer(target: HostTarget, tmp_path: Path) -> None:
    local = tmp_path / "keep"
    local.mkdir()
    (local / "result.json").write_text("complete old result\n")
    (local / "result.json.part").write_bytes(b"garbage that is not a prefix of the host's file")
    with connect(target) as remote:
        remote.run(
            ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", f"{JOBS}/j7/result.json"],
            stdin_text="new result from the host\n" * 10,
        )
        report = fetch(remote, f"{JOBS}/j7", local, ["result.json"])
    # the kept .part was not a prefix: the fetch restarted from zero instead of keeping damaged data
    assert (local / "result.json").read_text() == "new result from the host\n" * 10
    assert [f.transferred for f in report.files] == [250]
    assert not (local / "result.json.part").exists()
