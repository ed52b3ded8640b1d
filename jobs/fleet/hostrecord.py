"""Reading a workstation's host record (/etc/radeonlab/host.json) over SSH: "is it provisioned, and how".

The record is the contract between provisioning and jobs (CONTRACTS.md): it exists and has the schema this
runner knows -> the host is provisioned. Anything else is one line naming the host and the deploy command.
"""

from __future__ import annotations

import json
from typing import Any

from radeonlab.jobs.ssh.connection import Remote, quote_argv

from radeonlab.errors import NotProvisionedError

RECORD = {
    "path": "/etc/radeonlab/host.json",  # = roles/verify/defaults.py verify_record_path
    "schema": 1,  # = roles/verify/defaults.py RECORD_SCHEMA
    "required": ("host", "user", "venv", "jobs_dir", "gpus"),
    "deploy": "deploy/setup.py",
}


def deploy_command(inventory: str, host: str) -> str:
    """The one command that provisions `host` (what a not-provisioned error tells the user to run)."""
    return quote_argv(["pyinfra", "-y", "--limit", host, inventory, RECORD["deploy"]])


def read_host_record(remote: Remote, inventory: str) -> dict[str, Any]:
    """The host record of the connected host; NotProvisionedError (one line) when absent or not current."""
    name = remote.target.name
    fix = f"provision it first: {deploy_command(inventory, name)}"
    result = remote.run(["cat", "--", RECORD["path"]], check=False)
    if result.exit_code != 0:
        raise NotProvisionedError(f"{name} is not provisioned (no {RECORD['path']}): {fix}")
    try:
        record = json.loads(result.stdout)
    except ValueError:
        raise NotProvisionedError(f"{name}: {RECORD['path']} is not valid JSON: {fix}") from None
    if not isinstance(record, dict) or record.get("schema") != RECORD["schema"]:
        schema = record.get("schema") if isinstance(record, dict) else None
        raise NotProvisionedError(
            f"{name}: host record schema {schema!r}, this radeonlab reads schema {RECORD['schema']}: {fix}"
        )
    missing = [k for k in RECORD["required"] if k not in record]
    if missing:
        raise NotProvisionedError(f"{name}: host record lacks {', '.join(missing)}: {fix}")
    return record


def blobs_dir(record: dict[str, Any]) -> str:
    """<jobs_dir>/../blobs: the host's content store (CONTRACTS.md)."""
    jobs_dir = record["jobs_dir"].rstrip("/")
    return jobs_dir.rsplit("/", 1)[0] + "/blobs"
