"""The code a job's host-side supervisor needs, shipped into <job>/host with one round trip.

The supervisor (jobs/host/supervisor.py) runs on the host's SYSTEM python3, which has neither this package
nor its dependencies. It imports a few pure modules (stdlib only, plus the two small settings dicts health
reads from the roles); they are copied with their package layout, and every package __init__ is written
EMPTY so that importing `radeonlab.roles.access.defaults` does not import pyinfra (roles/access/__init__.py
does).
"""

from __future__ import annotations

import base64
import importlib.util
import json
from importlib import resources
from pathlib import Path

from radeonlab.jobs.apply.launch import LAUNCH_DEFAULTS

from radeonlab.contract.records import JobPaths

# Shipped modules by import name; each lands at its package path inside <job>/host.
MODULES: tuple[str, ...] = (
    "radeonlab.jobs.host.supervisor",
    "radeonlab.jobs.host.health",
    "radeonlab.jobs.host.remedies",
    "radeonlab.jobs.host.metrics",
    "radeonlab.contract.records",
    "radeonlab.contract.state",
    "radeonlab.jobs.spec.lf_args",
    "radeonlab.roles.access.defaults",
    "radeonlab.roles.gpu_env.defaults",
)
DATA: tuple[tuple[str, str], ...] = (("radeonlab.jobs.spec", "lf_args.json"),)
EMPTY_INIT = '"""Shipped by radeonlab for the host-side supervisor (see jobs/apply/bundle.py)."""\n'

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
    """relative path -> content of everything shipped (every package __init__ EMPTY)."""
    out: dict[str, bytes] = {}
    for name in MODULES:
        parts = name.split(".")
        for i in range(1, len(parts)):
            out["/".join(parts[:i]) + "/__init__.py"] = EMPTY_INIT.encode()
        origin = importlib.util.find_spec(name).origin  # type: ignore[union-attr]
        out["/".join(parts) + ".py"] = Path(str(origin)).read_bytes()
    for package, resource in DATA:
        out[package.replace(".", "/") + "/" + resource] = (
            resources.files(package).joinpath(resource).read_bytes()
        )
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
