"""Who the deploy runs as and who trains: the privilege arguments every role uses, the training-user rule,
the relogin note after new groups, and the stream switch's removal commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from radeonlab.roles import privilege
from radeonlab.roles.access.check import relogin_note
from radeonlab.roles.access.facts import UserProcessCount
from radeonlab.roles.python_stack import plan
from radeonlab.roles.rocm import repos

ROLES = Path(privilege.__file__).parent


def test_root_runs_without_sudo_any_other_user_with_it() -> None:
    # explicit False: it wins over an inventory's `_sudo: True` where there is no sudo to run
    assert privilege.root_args_for("root") == {"_sudo": False}
    assert privilege.root_args_for("lab") == {"_sudo": True}
    assert privilege.root_args_for("") == {"_sudo": True}  # unknown: as before, sudo


def test_the_training_user_is_reached_with_su_from_root_and_sudo_otherwise() -> None:
    assert privilege.user_args_for("root", "lab") == {"_sudo": False, "_su_user": "lab"}
    assert privilege.user_args_for("admin", "lab") == {"_sudo": True, "_sudo_user": "lab"}


def test_login_user_fact_is_id_not_the_environment() -> None:
    fact = privilege.LoginUser()
    assert fact.command().startswith("id -un")  # $USER is empty in a container's root shell
    assert fact.process(["root"]) == "root" and fact.process(["", " "]) is None


def test_no_role_forces_sudo_by_hand() -> None:
    """Every privilege comes from roles/privilege.py: a `_sudo=True` or `"_sudo": True` elsewhere would run
    sudo where the deploy is root and sudo is absent."""
    forced = [
        f"{path.relative_to(ROLES)}:{n}"
        for path in ROLES.rglob("*.py")
        if path.name != "privilege.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"_sudo[\"']?\s*[=:]\s*True|_sudo_user", line)
    ]
    assert forced == []


def test_the_training_user_is_the_setting_else_the_login_user() -> None:
    assert plan.training_user("", "lab") == "lab"
    assert plan.training_user("trainer", "root") == "trainer"  # root deploys, trainer trains


@pytest.mark.parametrize(
    ("configured", "login", "says"),
    [
        ("root", "lab", "python_stack_user is root"),
        ("", "root", "the deploy runs as root and python_stack_user is empty"),
        (None, "root", "the deploy runs as root and python_stack_user is empty"),
        ("", "", "the login user is unknown"),
        ("  ", " ", "the login user is unknown"),
    ],
)
def test_root_or_nobody_never_trains(configured: str | None, login: str, says: str) -> None:
    with pytest.raises(ValueError) as e:
        plan.training_user(configured, login)
    message = str(e.value)
    assert message.startswith(says) and "set python_stack_user" in message and "\n" not in message


def test_open_sessions_are_told_to_log_in_again_only_when_groups_were_added() -> None:
    note = relogin_note("lab", ["render", "video"], processes=3)
    assert note is not None and note.startswith("lab was added to render, video while 3 of its processes run")
    assert "log in again" in note and "\n" not in note
    assert relogin_note("lab", [], processes=3) is None  # already a member: nothing changes
    assert relogin_note("lab", ["render"], processes=0) is None  # nobody logged in: the next login has it


def test_process_count_fact_reads_proc_owners() -> None:
    fact = UserProcessCount()
    assert "/proc/[0-9]*" in fact.command("lab") and "grep -cx -- lab" in fact.command("lab")
    assert fact.process(["4"]) == 4 and fact.process([]) == 0


def test_a_stream_switch_purges_exactly_the_packages_it_names() -> None:
    leftovers = ["hsa-rocr", "rocm-core", "rocminfo"]
    commands = repos.purge_commands(leftovers)
    assert len(commands) == 1
    argv = shlex.split(commands[0])
    assert argv[:3] == ["DEBIAN_FRONTEND=noninteractive", "dpkg", "--purge"]
    assert argv[3:] == leftovers  # no autoremove, no apt-get resolving dependents away
    assert not any("autoremove" in c or "apt-get" in c for c in commands)
    assert repos.purge_commands([]) == []
