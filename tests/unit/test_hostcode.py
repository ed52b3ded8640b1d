"""What a workstation receives of radeonlab (jobs/ssh/hostcode.py), and the launcher's check of it."""

from __future__ import annotations

import ast
import hashlib
import io
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from radeonlab.contract.jobdir import FILES
from radeonlab.jobs.host import codecheck
from radeonlab.jobs.host.codecheck import code_problem
from radeonlab.jobs.ssh import hostcode
from tests.support.hostjob import unpack_code

CHECKOUT = Path(__file__).resolve().parents[2]
PACKAGE = CHECKOUT / "src"
EMPTY_INITS = {"radeonlab/__init__.py", "radeonlab/jobs/__init__.py"}


@pytest.fixture
def fresh_caches() -> Iterator[None]:
    """hostcode caches files() and digest(): start and end each test with them empty."""
    hostcode.files.cache_clear()
    hostcode.digest.cache_clear()
    yield
    hostcode.files.cache_clear()
    hostcode.digest.cache_clear()


def test_shipped_files_are_the_contract_the_host_package_and_two_empty_inits() -> None:
    contract = {f"radeonlab/contract/{p.name}" for p in (PACKAGE / "radeonlab/contract").glob("*.py")}
    host = {f"radeonlab/jobs/host/{p.name}" for p in (PACKAGE / "radeonlab/jobs/host").glob("*.py")}
    files = hostcode.files()
    assert set(files) == contract | host | EMPTY_INITS
    assert list(files) == sorted(files)  # a stable order
    for rel in EMPTY_INITS:  # not the checkout's radeonlab/__init__.py: nothing else gets imported
        assert files[rel] == hostcode.EMPTY_INIT and b"import" not in files[rel]
    for rel in ("radeonlab/jobs/host/launcher.py", "radeonlab/contract/jobdir.py"):
        assert files[rel] == (PACKAGE / rel).read_bytes()


def test_digests_are_stable() -> None:
    assert hostcode.file_digests() == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in hostcode.files().items()
    }
    here = hostcode.digest()
    assert len(here) == 24 and int(here, 16) >= 0
    # another interpreter (as on the next `radeonlab submit`) names the same code the same way
    again = subprocess.run(
        [sys.executable, "-c", "from radeonlab.jobs.ssh import hostcode; print(hostcode.digest())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert again == here
    assert hostcode.tar() == hostcode.tar()  # fixed times, owners and modes: the same bytes every time


def test_the_tar_unpacks_to_the_same_files(tmp_path: Path) -> None:
    code = unpack_code(tmp_path / "code")
    unpacked = {str(p.relative_to(code)): p.read_bytes() for p in code.rglob("*") if p.is_file()}
    assert unpacked == hostcode.files()
    with tarfile.open(fileobj=io.BytesIO(hostcode.tar())) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == list(hostcode.files())
    assert {(m.mode, m.mtime, m.uid, m.isfile()) for m in members} == {(0o644, 0, 0, True)}


def test_a_changed_file_changes_the_digest(fresh_caches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    before, before_files = hostcode.digest(), hostcode.file_digests()
    changed = dict(hostcode.files())
    changed["radeonlab/jobs/host/stage.py"] += b"\n# one more line\n"
    hostcode.digest.cache_clear()
    monkeypatch.setattr(hostcode, "files", lambda: changed)
    after = hostcode.file_digests()
    assert hostcode.digest() != before
    assert [rel for rel in after if after[rel] != before_files[rel]] == ["radeonlab/jobs/host/stage.py"]


def test_code_problem_names_an_altered_a_missing_and_an_extra_file(tmp_path: Path) -> None:
    job = tmp_path / "job"
    unpack_code(job / "host")
    code = {"digest": hostcode.digest(), "files": hostcode.file_digests()}
    assert code_problem(str(job), code) is None
    # compiled files are the interpreter's, not radeonlab's: they do not count
    pycache = job / "host/radeonlab/jobs/host/__pycache__"
    pycache.mkdir()
    (pycache / "launcher.cpython-311.pyc").write_bytes(b"compiled")
    assert code_problem(str(job), code) is None

    altered = job / "host/radeonlab/jobs/host/gpu_queue.py"
    original = altered.read_bytes()
    altered.write_bytes(original.replace(b"POLL_S = 1.0", b"POLL_S = 0.0"))
    problem = code_problem(str(job), code)
    assert problem is not None and problem.startswith("host/radeonlab/jobs/host/gpu_queue.py differs")
    assert hashlib.sha256(altered.read_bytes()).hexdigest()[:16] in problem
    altered.write_bytes(original)

    missing = job / "host/radeonlab/contract/state.py"
    kept = missing.read_bytes()
    missing.unlink()
    assert code_problem(str(job), code) == "host/radeonlab/contract/state.py is missing"
    missing.write_bytes(kept)

    (job / "host/radeonlab/jobs/host/sitecustomize.py").write_text("print('not radeonlab')\n")
    assert (
        code_problem(str(job), code)
        == "host/radeonlab/jobs/host/sitecustomize.py was not shipped by radeonlab"
    )
    assert code_problem(str(job), {}) == "job.json lists no host code digests"


def test_the_early_check_imports_nothing_shipped_and_names_the_files_as_the_contract_does() -> None:
    # codecheck spells the names out so that nothing shipped is imported before the check
    names = (codecheck.JOB_FILE, codecheck.CODE_DIR, codecheck.SECRET_FILE, codecheck.LAUNCHER_LOG)
    assert names == (FILES["job"], FILES["code"], FILES["env_secret"], FILES["launcher_log"])
    tree = ast.parse(hostcode.files()["radeonlab/jobs/host/codecheck.py"])
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    modules = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    modules += [n.module for n in top if isinstance(n, ast.ImportFrom)]
    assert modules and not [m for m in modules if m and m.startswith("radeonlab")], modules
