"""The Ansible anchor's inventory, generated from the data deploy/setup.py runs on (a measurement aid).

The playbook (tests/bench/ansible/site.yml) gets every setting from here: the roles' DEFAULTS overlaid with
the sandbox inventory's host data (the precedence pyinfra applies: host data over deploy defaults), plus
what the roles compute from them with their own pure functions (apt sources per codename, the pin, the sysfs
dump command). What depends on the host's GPUs (training targets, pip steps, the GPU environment, the host
record) the playbook's filters compute on the controller (ansible/filter_plugins/radeonlab.py). Change a
default, the sandbox data or a role's rule and the playbook follows; what it cannot follow,
tests/e2e/test_ansible_anchor.py finds by comparing the hosts.

    inventory = write_inventory(sandbox_state_dir, work_dir, names=["ws4", "ws5"])
    run = run_playbook(inventory, work_dir)          # ansible-playbook, timed, PLAY RECAP parsed
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from radeonlab.roles.access.defaults import DEFAULTS as ACCESS_DEFAULTS
from radeonlab.roles.gpu import sysfs
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu_env.defaults import DEFAULTS as GPU_ENV_DEFAULTS
from radeonlab.roles.python_stack.defaults import DEFAULTS as PYTHON_STACK_DEFAULTS
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.roles.rocm.defaults import SUPPORTED_DISTROS
from radeonlab.roles.verify.defaults import DEFAULTS as VERIFY_DEFAULTS
from tests.bench.phases import ANSIBLE_STEP, Timed, run_timed

PLAYBOOK_DIR = Path(__file__).with_name("ansible")
PLAYBOOK = PLAYBOOK_DIR / "site.yml"
# The roles' own folder (templates, check_stack.py): the playbook renders the very same template files.
ROLES_DIR = Path(str(resources.files("radeonlab.roles")))
# The roles deploy/setup.py runs, in its order. Not covered by the playbook: roles/wheel_cache (the sandbox
# inventory names no cache host), rocm_install_driver, Ubuntu's deadsnakes Python, gpu_cpu_only hosts.
ROLE_DEFAULTS: dict[str, Any] = {
    **GPU_DEFAULTS,
    **ROCM_DEFAULTS,
    **GPU_ENV_DEFAULTS,
    **ACCESS_DEFAULTS,
    **PYTHON_STACK_DEFAULTS,
    **VERIFY_DEFAULTS,
}
RUN_TIMEOUT_S = 3600
RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$")


def settings(host_data: Mapping[str, Any]) -> dict[str, Any]:
    """Every role key's value for one host: its inventory data over the roles' defaults."""
    return {**ROLE_DEFAULTS, **{k: v for k, v in host_data.items() if k in ROLE_DEFAULTS}}


def rocm_sources(data: Mapping[str, Any]) -> dict[str, Any]:
    """What roles/rocm writes for its stream, from the role's own `repos.apt_source`: key, keyring, list and
    pin paths and contents, the sources lines per codename the stream serves (the playbook picks the host's),
    plus the stream's linker paths and version file. ValueError when the stream serves no codename."""
    found: dict[str, repos.AptSource] = {}
    refusals = []
    for codename in SUPPORTED_DISTROS.values():
        try:
            found[codename] = repos.apt_source(data, codename)
        except ValueError as e:  # a codename this stream does not serve: the playbook's assert says so
            refusals.append(str(e))
    if not found:
        raise ValueError(refusals[0])
    first = next(iter(found.values()))
    return {
        "keyring": first.keyring,
        "key_url": first.key_url,
        "origin": first.origin,
        "list_path": first.list_path,
        "pin_path": first.pin_path,
        "sources": {c: list(s.lines) for c, s in found.items()},
        "comment": first.comment,
        "pin": first.pin,
        "ld_paths": repos.ld_paths(data),
        "version_file": repos.version_file(data),
    }


def ssh_args(entry: Mapping[str, Any]) -> str:
    """The sandbox's key and known_hosts, strict host-key checking: as pyinfra connects."""
    return (
        f"-o UserKnownHostsFile={entry['ssh_known_hosts_file']} -o StrictHostKeyChecking=yes "
        "-o IdentitiesOnly=yes -o IdentityAgent=none"
    )


def host_vars(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One sandbox inventory.json host -> its Ansible host variables."""
    data = settings(entry.get("data", {}))
    return {
        "ansible_host": entry["ssh_hostname"],
        "ansible_port": entry["ssh_port"],
        "ansible_user": entry["ssh_user"],
        "ansible_ssh_private_key_file": entry["ssh_key"],
        "ansible_ssh_common_args": ssh_args(entry),
        "radeonlab": data,
        "radeonlab_rocm": rocm_sources(data),
        "radeonlab_gpu_dump_command": sysfs.dump_command(str(data["gpu_sysfs_root"])),
    }


def inventory(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "all": {
            "vars": {"ansible_python_interpreter": "/usr/bin/python3", "radeonlab_roles_dir": str(ROLES_DIR)},
            "hosts": {e["name"]: host_vars(e) for e in entries},
        }
    }


def write_inventory(state_dir: Path, work_dir: Path, names: Iterable[str] | None = None) -> Path:
    """<work_dir>/inventory.yml for the sandbox hosts in state_dir/inventory.json (all, or `names`)."""
    entries = json.loads((Path(state_dir) / "inventory.json").read_text())["hosts"]
    wanted = set(names) if names is not None else None
    chosen = [e for e in entries if wanted is None or e["name"] in wanted]
    missing = (wanted or set()) - {e["name"] for e in chosen}
    if missing:
        raise ValueError(f"not in the sandbox inventory: {sorted(missing)}")
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory(chosen), sort_keys=False, width=1000))
    return path


def ansible_env(work_dir: Path) -> dict[str, str]:
    """The playbook's ansible.cfg; Ansible's own state (SSH control sockets, temp files) under work_dir."""
    home = work_dir / "ansible-home"
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(PLAYBOOK_DIR / "ansible.cfg"),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(home / "cp"),
        "ANSIBLE_NOCOLOR": "1",
    }


@dataclass
class PlaybookRun(Timed):
    recap: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> ok/changed/failed/...

    def changed(self) -> dict[str, int]:
        return {h: r.get("changed", 0) for h, r in self.recap.items()}


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines (`ws1 : ok=30 changed=0 unreachable=0 failed=0 ...`) -> {host: {name: count}}."""
    recap: dict[str, dict[str, int]] = {}
    seen = False
    for line in output.splitlines():
        if line.startswith("PLAY RECAP"):
            seen = True
        elif seen and (m := RECAP.match(line.strip())):
            recap[m.group(1)] = {k: int(v) for k, v in (p.split("=") for p in m.group(2).split())}
    return recap


def ansible_playbook() -> str:
    """ansible-playbook of the `bench` extra, installed beside this Python (pyproject.toml)."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.exists():
        raise FileNotFoundError(f"{exe} missing: install the bench extra (pip install -e '.[bench]')")
    return str(exe)


def run_playbook(
    inventory_file: Path, work_dir: Path, limit: Iterable[str] | None = None, check: bool = True
) -> PlaybookRun:
    """ansible-playbook site.yml against the inventory (optionally --limit), timed from start to exit."""
    argv = [ansible_playbook(), "-i", str(inventory_file), str(PLAYBOOK)]
    if limit:
        argv += ["--limit", ",".join(limit)]
    timed = run_timed(argv, PLAYBOOK_DIR, ansible_env(work_dir), ANSIBLE_STEP, RUN_TIMEOUT_S)
    run = PlaybookRun(**vars(timed), recap=parse_recap(timed.output))
    if check and run.returncode != 0:
        raise RuntimeError(f"ansible-playbook failed (exit {run.returncode}):\n{run.output[-4000:]}")
    return run
