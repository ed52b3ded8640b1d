"""What a provisioned sandbox host looks like, as one flat {key: value} map, and the differences of two.

Used by tests/e2e/test_ansible_anchor.py to check that the Ansible anchor playbook leaves a host as
deploy/setup.py does: the files the roles write (content, owner, mode), the host record minus its volatile
fields, the installed Debian packages, the venv's `pip freeze`, the training user's groups and folders.
Host names are replaced by "<host>": the two hosts of a pair differ in name, and in nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from radeonlab.roles.verify import record as rec
from radeonlab.sandbox.hosts import SandboxHost
from tests.bench.ansible_inventory import rocm_sources, settings

HOST = "<host>"


def _unnamed(text: str, host_name: str) -> str:
    return re.sub(rf"(?<![\w-]){re.escape(host_name)}(?![\w-])", HOST, text)


def role_files(data: Mapping[str, Any]) -> list[str]:
    """The files deploy/setup.py writes outside the venv, for these settings (stream-aware)."""
    rocm = rocm_sources(data)
    return [
        rocm["keyring"],
        rocm["list_path"],
        rocm["pin_path"],
        "/etc/ld.so.conf.d/rocm.conf",
        "/etc/profile.d/radeonlab-rocm.sh",
        str(data["gpu_env_profile_path"]),
    ]


def stable_record(text: str, host_name: str) -> str:
    """The host record without its volatile fields (written_at, vram_used) and its venv's packages (compared
    one by one: host_state's `record package NAME`), host name normalised."""
    record = json.loads(text)
    record = {k: v for k, v in record.items() if k not in rec.VOLATILE_TOP and k != "packages"}
    record["gpus"] = [{k: v for k, v in g.items() if k not in rec.VOLATILE_GPU} for g in record["gpus"]]
    record["host"] = HOST if record.get("host") == host_name else record.get("host")
    return json.dumps(record, indent=1, sort_keys=True)


def _stat(host: SandboxHost, path: str) -> str:
    return host.exec(["stat", "-c", "%a %U:%G", path]).stdout.strip()


def host_state(host: SandboxHost) -> dict[str, str]:
    """One provisioned host: {"file /etc/...": "<mode> <owner>\\n<content>", "package curl:amd64": ...}."""
    data = settings(host.inventory_entry()["data"])
    user = host.user
    home = host.exec(["getent", "passwd", user]).stdout.split(":")[5]
    venv = str(data["python_stack_venv"]).replace("~", home, 1)
    jobs = str(data["python_stack_jobs_dir"]).replace("~", home, 1)
    state: dict[str, str] = {}
    for path in role_files(data):
        raw = (host.root / path.lstrip("/")).read_bytes()
        try:
            body = _unnamed(raw.decode(), host.name)
        except UnicodeDecodeError:
            body = "sha256 " + hashlib.sha256(raw).hexdigest()
        state[f"file {path}"] = f"{_stat(host, path)}\n{body}"
    record_path = str(data["verify_record_path"])
    state[f"file {record_path}"] = (
        _stat(host, record_path)
        + "\n"
        + stable_record((host.root / record_path.lstrip("/")).read_text(), host.name)
    )
    # the record's packages one by one, so that one accepted difference (the installer) hides nothing else
    recorded = json.loads((host.root / record_path.lstrip("/")).read_text()).get("packages", {})
    state.update({f"record package {name.lower()}": str(version) for name, version in recorded.items()})
    for folder in (venv.rsplit("/", 1)[0], jobs, record_path.rsplit("/", 1)[0]):
        state[f"folder {folder}"] = _stat(host, folder)
    state[f"groups {user}"] = " ".join(sorted(host.exec(["id", "-nG", user]).stdout.split()))
    packages = host.exec(
        ["dpkg-query", "-W", "-f", "${Package}:${Architecture} ${Version} ${db:Status-Abbrev}\n"]
    )
    for line in packages.stdout.splitlines():
        name, _, rest = line.partition(" ")
        state[f"package {name}"] = rest.strip()
    # pip list's freeze format: name==version however a distribution was installed (pip freeze prints a
    # locked install from its recorded URL as `name @ URL`, the Ansible anchor's by name as `name==version`)
    freeze = host.exec(f"{venv}/bin/python -m pip list --format=freeze", user=user).stdout
    for line in freeze.splitlines():
        name, _, version = line.partition("==")
        state[f"pip {name.lower()}"] = version or line
    return state


@dataclass(frozen=True)
class Difference:
    key: str
    radeonlab: str | None  # None: absent on the radeonlab host
    ansible: str | None

    def __str__(self) -> str:
        return f"{self.key}: radeonlab {self.radeonlab!r} vs Ansible {self.ansible!r}"


def differences(radeonlab: Mapping[str, str], ansible: Mapping[str, str]) -> list[Difference]:
    return [
        Difference(k, radeonlab.get(k), ansible.get(k))
        for k in sorted(set(radeonlab) | set(ansible))
        if radeonlab.get(k) != ansible.get(k)
    ]


def unexplained(found: list[Difference], accepted: Mapping[str, str]) -> tuple[list[Difference], list[str]]:
    """(differences not in `accepted` (key -> reason), accepted keys that did not occur: a stale list)."""
    keys = {d.key for d in found}
    return [d for d in found if d.key not in accepted], sorted(set(accepted) - keys)
