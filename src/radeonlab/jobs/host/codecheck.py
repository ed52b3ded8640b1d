"""The check of a job's shipped host code, made before any other shipped module is imported.

The laptop records a sha256 per shipped file in job.json `code`; the launcher (jobs/host/launcher.py) calls
`refuse_changed_code` first thing when it runs as a program, so an edited or half-copied module never runs,
not even its top-level code or a syntax error of it. This module imports nothing of radeonlab for the same
reason: it is the one shipped file that runs unchecked besides the launcher itself and the package markers.
The file names below are the job folder's (contract.jobdir FILES), spelled out so that nothing shipped is
imported before the check; tests/unit/test_hostcode.py holds them equal.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

JOB_FILE, CODE_DIR, SECRET_FILE, LAUNCHER_LOG = "job.json", "host", "env.secret", "launcher.log"
# What writes the refusal into state.json; when one of these is what changed, the refusal goes to
# launcher.log only (the laptop then reads the job as failed because its launcher is gone).
STATE_WRITERS = ("radeonlab/jobs/host/process.py", "radeonlab/contract/")


def changed_files(job_dir: str, code: dict) -> list[tuple[str, str]]:
    """(file, what is wrong) for each file of <job>/host that differs from job.json `code`, in name order."""
    expected: dict[str, str] = dict(code.get("files") or {})
    root = os.path.join(job_dir, CODE_DIR)
    if not expected:
        return [("", "job.json lists no host code digests")]
    found: set[str] = set()
    for folder, _, names in os.walk(root):
        found.update(os.path.relpath(os.path.join(folder, n), root) for n in names if not n.endswith(".pyc"))
    out = [(rel, f"host/{rel} was not shipped by radeonlab") for rel in sorted(found - set(expected))]
    for rel, want in sorted(expected.items()):
        try:
            with open(os.path.join(root, rel), "rb") as f:
                got = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            out.append((rel, f"host/{rel} is missing"))
            continue
        if got != want:
            why = f"differs from what radeonlab shipped (sha256 {got[:16]}, expected {want[:16]})"
            out.append((rel, f"host/{rel} {why}"))
    return out


def code_problem(job_dir: str, code: dict) -> str | None:
    """The first changed file's message, or None when every shipped file matches.

    Guards against a job running code other than what the laptop shipped (an edited or half-copied file);
    docs/design/what-radeonlab-trusts.md says what it does not guard against."""
    changed = changed_files(job_dir, code)
    return changed[0][1] if changed else None


def refuse_changed_code(argv: list[str]) -> None:
    """For `launcher run JOB_DIR ...`: return when the shipped code is as recorded; otherwise delete the
    job's secrets, record the refusal and exit, without importing a changed module."""
    if len(argv) < 2 or argv[0] != "run":
        return
    job_dir = os.path.abspath(argv[1])
    try:
        with open(os.path.join(job_dir, JOB_FILE)) as f:
            changed = changed_files(job_dir, json.load(f).get("code") or {})
    except (OSError, ValueError, AttributeError) as exc:
        changed = [("", f"job.json unreadable: {exc}")]
    if not changed:
        return
    problem = changed[0][1]
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(job_dir, SECRET_FILE))  # a refused job leaves no secret on disk
    with open(os.path.join(job_dir, LAUNCHER_LOG), "a") as log:
        log.write(f"radeonlab launcher: refused to start: {problem}\n")
    if any(rel.startswith(STATE_WRITERS) for rel, _ in changed):
        sys.exit(1)
    from radeonlab.contract.state import EndReason  # checked above: as shipped
    from radeonlab.jobs.host.process import StateFile

    sys.exit(StateFile(job_dir).finish(EndReason.CODE_CHANGED, f"refused to start: {problem}"))
