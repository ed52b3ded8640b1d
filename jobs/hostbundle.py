"""The code a job's host-side supervisor needs, shipped into <job>/host with one round trip.

The supervisor (jobs/remote/supervisor.py) runs on the host's SYSTEM python3, which has neither this package
nor its dependencies. It imports a few pure modules (stdlib only, plus the two small settings dicts health
reads from the roles); they are copied with their package layout, and every package __init__ is written
EMPTY so that importing `roles.access.defaults` does not import pyinfra (roles/access/__init__.py does).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from jobs.launch import LAUNCH_DEFAULTS
from jobs.record import JobPaths

REPO_ROOT = Path(__file__).resolve().parent.parent
# Shipped files, relative to the repository root (the same path inside <job>/host).
MODULES: tuple[str, ...] = (
    "jobs/remote/supervisor.py",
    "jobs/health.py",
    "jobs/remedies.py",
    "jobs/metrics.py",
    "jobs/record.py",
    "jobs/state.py",
    "jobs/lf_args.py",
    "jobs/lf_args.json",
    "roles/access/defaults.py",
    "roles/gpu_env/defaults.py",
)
PACKAGES: tuple[str, ...] = ("jobs", "jobs/remote", "roles", "roles/access", "roles/gpu_env")
EMPTY_INIT = '"""Shipped by radeonlab for the host-side supervisor (see jobs/hostbundle.py)."""\n'

# stdin {"dir": DEST, "files": {relpath: base64}} -> writes each file (tmp + rename), prints the count
_INSTALL = r"""
import base64, json, os, sys
req = json.load(sys.stdin)
for rel, data in req["files"].items():
    path = os.path.join(req["dir"], rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(base64.b64decode(data))
    os.replace(tmp, path)
print(len(req["files"]))
"""


def files() -> dict[str, bytes]:
    """relative path -> content of everything shipped."""
    out = {f"{pkg}/__init__.py": EMPTY_INIT.encode() for pkg in PACKAGES}
    for rel in MODULES:
        out[rel] = (REPO_ROOT / rel).read_bytes()
    return out


def install_request(paths: JobPaths) -> tuple[list[str], str]:
    """(argv, stdin text) that writes the bundle into <job>/host: Remote.run(argv, stdin_text=...)."""
    payload = {
        "dir": str(paths.host_code),
        "files": {rel: base64.b64encode(data).decode() for rel, data in files().items()},
    }
    return [str(LAUNCH_DEFAULTS["host_python"]), "-c", _INSTALL], json.dumps(payload)


def install_local(dest: Path) -> None:
    """Write the bundle into a local folder (the launcher tests run the supervisor without SSH)."""
    for rel, data in files().items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
