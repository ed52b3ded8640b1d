"""How every role's operations gain privileges: the one place that decides sudo or not.

A deploy that already runs as root (`pyinfra @local deploy/setup.py` as root, or an SSH login as root) needs
no sudo, and a machine may have none (Debian's minimal installs do not ship it): its operations run as they
are. Any other login user gets `_sudo=True`. Operations as the training user use sudo -u from a non-root
login and `su` from root (su is in every Debian and Ubuntu base system, sudo is not).
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api import FactBase


class LoginUser(FactBase):
    """The user the connection runs as: `id -un` (pyinfra's User fact is `echo $USER`, empty where the
    environment has no USER: a container's root shell, cron). None when neither says anything."""

    def command(self) -> str:
        return 'id -un 2>/dev/null || echo "$USER"'

    def process(self, output: list[str]) -> str | None:
        return next((line.strip() for line in output if line.strip()), None)


def login_user() -> str:
    """Who the connection runs as, asked without sudo (an inventory may set `_sudo` for every operation);
    "" when unknown."""
    return str(host.get_fact(LoginUser, _sudo=False) or "")


def root_args_for(login: str) -> dict[str, Any]:
    """The privilege arguments of an operation that needs root, for this login user. `_sudo=False` as root
    wins over an inventory's `_sudo: True` (there may be no sudo to run)."""
    return {"_sudo": False} if login == "root" else {"_sudo": True}


def user_args_for(login: str, user: str) -> dict[str, Any]:
    """The privilege arguments of an operation run as `user` (the training user), for this login user."""
    if login == "root":
        return {"_sudo": False, "_su_user": user}
    return {"_sudo": True, "_sudo_user": user}


def as_root() -> dict[str, Any]:
    """`**as_root()` on every operation that changes the system."""
    return root_args_for(login_user())


def as_user(user: str) -> dict[str, Any]:
    """`**as_user(name)` on every operation that runs as the training user."""
    return user_args_for(login_user(), user)
