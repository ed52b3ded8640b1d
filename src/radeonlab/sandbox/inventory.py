"""pyinfra inventory of the sandbox workstations (SIMULATED hosts made by radeonlab.sandbox, see its README).

Reads <sandbox state dir>/inventory.json: the dir is $RADEONLAB_SANDBOX_DIR, else the sandbox's default.
Every top-level list in a pyinfra inventory is a group, so helpers here start with `_`.
Provision with `radeonlab sandbox provision` (radeonlab.sandbox.provision): it serves the SIMULATED AMD apt
repository and wheel index that the hosts' data points at for its run, then runs
    pyinfra inventories/sandbox.py deploy/setup.py
"""

from __future__ import annotations

import json as _json

from radeonlab.sandbox import config as _config

_state_dir = _config.STATE_DIR  # $RADEONLAB_SANDBOX_DIR, else the sandbox's default


def _hosts() -> list[tuple[str, dict]]:
    try:
        entries = _json.loads((_state_dir / "inventory.json").read_text())["hosts"]
    except FileNotFoundError:
        raise SystemExit(f"no sandbox at {_state_dir}: run `radeonlab sandbox up` first") from None
    hosts = []
    for e in entries:
        data = {
            "ssh_hostname": e["ssh_hostname"],
            "ssh_port": e["ssh_port"],
            "ssh_user": e["ssh_user"],
            "ssh_key": e["ssh_key"],
            # the sandbox writes each host's real key here: strict checking from the first connect
            "ssh_known_hosts_file": e["ssh_known_hosts_file"],
            "ssh_strict_host_key_checking": "yes",
            "ssh_allow_agent": False,
            "ssh_look_for_keys": False,
            # the login user has passwordless sudo; set here because pyinfra drops _sudo from group_data files
            "_sudo": True,
            "sandbox_card": e["card"],
            **e.get("data", {}),  # filled by the test bed: apt repo URL, wheel index URL, cpu-only flag...
        }
        hosts.append((e["name"], data))
    return hosts


workstations = _hosts()


def _extra_groups() -> dict[str, list[str]]:
    """More groups, named in the hosts' data: `sandbox_groups: ["slurm_controller"]` (set by the test bed; a
    real inventory lists its groups itself)."""
    groups: dict[str, list[str]] = {}
    for name, data in workstations:
        for group in data.get("sandbox_groups", ()):
            if str(group) == "workstations":
                continue
            groups.setdefault(str(group), []).append(name)
    return groups


globals().update(_extra_groups())  # each becomes a top-level list: a pyinfra group
