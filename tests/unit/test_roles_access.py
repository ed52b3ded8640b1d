"""roles/access: device modes and groups in -> problems (with the fix) out."""

from __future__ import annotations

from radeonlab.roles.access.check import access_problems
from radeonlab.roles.access.facts import DeviceNodes

PATTERNS = ["/dev/kfd", "/dev/dri/renderD*"]
UBUNTU = {  # as udev creates them on Ubuntu
    "/dev/kfd": {"mode": 0o660, "user": "root", "group": "render"},
    "/dev/dri/renderD128": {"mode": 0o660, "user": "root", "group": "render"},
}


def test_member_of_render_can_open_everything() -> None:
    assert access_problems(UBUNTU, "lab", ["lab", "sudo", "video", "render"], PATTERNS) == []


def test_missing_group_is_reported_with_its_fix() -> None:
    problems = access_problems(UBUNTU, "lab", ["lab", "video"], PATTERNS)
    assert len(problems) == 2
    assert problems[0].startswith("lab cannot read+write /dev/dri/renderD128")
    assert "usermod -aG render lab" in problems[0]


def test_world_writable_node_needs_no_group_and_missing_node_is_reported() -> None:
    nodes = {"/dev/kfd": {"mode": 0o666, "user": "root", "group": "root"}}
    problems = access_problems(nodes, "lab", ["lab"], PATTERNS)
    assert problems == [
        "/dev/dri/renderD* does not exist: is the amdgpu kernel driver loaded? (modprobe amdgpu)"
    ]


def test_device_nodes_fact_parses_stat_output() -> None:
    got = DeviceNodes().process(["/dev/kfd 660 root render", "/dev/dri/renderD128 660 root render"])
    assert got["/dev/kfd"] == {"mode": 0o660, "user": "root", "group": "render"}
    assert DeviceNodes().process([]) == {}


def test_linger_only_where_systemd_runs_and_it_is_not_on_yet() -> None:
    from radeonlab.roles.access.check import linger_command

    assert linger_command("lab", systemd_runs=True, lingering=False, wanted=True) == [
        "loginctl", "enable-linger", "lab"
    ]  # fmt: skip
    assert linger_command("lab", systemd_runs=True, lingering=True, wanted=True) is None  # idempotent
    assert linger_command("lab", systemd_runs=False, lingering=False, wanted=True) is None  # the sandbox
    assert linger_command("lab", systemd_runs=True, lingering=False, wanted=False) is None
