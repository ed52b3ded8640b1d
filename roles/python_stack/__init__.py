"""The training stack in the training user's venv: PyTorch for ROCm, pinned requirements, LLaMA-Factory."""

from __future__ import annotations

import io
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import Home, LinuxDistribution, User
from pyinfra.operations import apt, files, pip, server
from radeonlab.roles.python_stack import plan
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.roles.python_stack.facts import InstalledDistributions, PythonVersion, UserGroups
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS

TEMPLATES = Path(__file__).parent / "templates"
# Modes of the folders the role creates, owned by the training user and its primary group. The jobs dir
# holds users' datasets, models and adapters: nobody outside the training user's group reads it.
DIRECTORY_MODES: dict[str, str] = {"venv_parent": "755", "jobs_dir": "750"}


@dataclass(frozen=True)
class StackPaths:
    user: str
    group: str  # the training user's primary group
    home: str
    venv: str  # absolute
    jobs_dir: str  # absolute
    model_cache: str  # absolute: HF_HUB_CACHE of every job

    @property
    def python(self) -> str:
        return f"{self.venv}/bin/python"


def stack_paths() -> StackPaths:
    """Who trains on this host and where: read by the access and verify roles too."""
    # The login user: ssh_user, else who the connection runs as (_sudo=False: an inventory may set _sudo).
    login_user = host.data.get("ssh_user") or host.get_fact(User, _sudo=False)
    user = plan.training_user(host.data.get("python_stack_user", DEFAULTS["python_stack_user"]), login_user)
    home = host.get_fact(Home, user=user)
    if not home or home.startswith("~"):
        raise DeployError(f"{host.name}: training user {user!r} does not exist (python_stack_user)")
    group = (host.get_fact(UserGroups, user=user) or {}).get("group") or user
    venv = plan.expand_home(str(host.data.get("python_stack_venv", DEFAULTS["python_stack_venv"])), home)
    jobs = plan.expand_home(
        str(host.data.get("python_stack_jobs_dir", DEFAULTS["python_stack_jobs_dir"])), home
    )
    cache = plan.expand_home(
        str(host.data.get("python_stack_model_cache", DEFAULTS["python_stack_model_cache"])), home
    )
    return StackPaths(user, group, home, venv, jobs, cache)


def settings() -> dict[str, Any]:
    return {key: host.data.get(key, default) for key, default in DEFAULTS.items()}


@deploy("Install the Python training stack", data_defaults=DEFAULTS)
def install_python_stack(
    sources: Mapping[str, Any] | None = None, gfx_targets: Sequence[str | None] = ()
) -> None:
    """`sources`: settings that win over the inventory's (the wheel cache's index URLs, roles/wheel_cache).
    `gfx_targets`: the training GPUs' exact targets (AMD's wheels: one device extra each)."""
    data = {**settings(), **(sources or {})}
    targets = sorted({t for t in gfx_targets if t})
    paths = stack_paths()
    as_user: dict[str, Any] = {"_sudo": True, "_sudo_user": paths.user}
    rocm_version = str(host.data.get("rocm_version", ROCM_DEFAULTS["rocm_version"]))

    try:
        plan.extras_pins(data)  # a name without a pinned version stops here, before anything changes
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    python = _ensure_python(data)

    for path, mode in (
        (str(Path(paths.venv).parent), DIRECTORY_MODES["venv_parent"]),
        (paths.jobs_dir, DIRECTORY_MODES["jobs_dir"]),
        (paths.model_cache, DIRECTORY_MODES["jobs_dir"]),
    ):
        files.directory(
            name=f"Create {path}",
            path=path,
            present=True,
            user=paths.user,
            group=paths.group,
            mode=mode,
            **as_user,
        )
    pip.venv(name=f"Create the venv {paths.venv}", path=paths.venv, python=python, **as_user)

    installed = host.get_fact(
        InstalledDistributions, python=paths.python, names=plan.watched_names(data, targets), **as_user
    )
    installed = {plan.normalize(k): v for k, v in installed.items()}
    try:
        steps = plan.pip_steps(data, rocm_version, installed, targets)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    for step in steps:
        name = (
            f"Install {', '.join(step.packages[:3])}{' ...' if len(step.packages) > 3 else ''} "
            f"({'; '.join(step.reasons[:3])})"
        )
        if any("[" in package for package in step.packages):
            # pyinfra's pip.packages parses requirements as PEP 508 and drops extras ("torch[device-gfx1100]"
            # would be installed as plain "torch", without AMD's device package): our own command, run
            # only when our fact (InstalledDistributions) says something differs.
            pip_command = [f"{paths.venv}/bin/pip", "install", *step.pip_args, *step.packages]
            server.shell(name=name, commands=[shlex.join(pip_command)], **as_user)
            continue
        pip.packages(
            name=name,
            packages=step.packages,
            virtualenv=paths.venv,
            # pip.packages would otherwise run `virtualenv`, which is not installed, if the venv were missing.
            virtualenv_kwargs={"venv": True, "python": python},
            extra_install_args=" ".join(step.pip_args),
            **as_user,
        )
    _install_extras(data, paths, python, installed, as_user)


def _install_extras(
    data: dict[str, Any], paths: StackPaths, python: str, installed: dict[str, Any], as_user: dict[str, Any]
) -> None:
    """python_stack_extras, at their pins, with the stack's pins as pip constraints (none of them moves)."""
    if not data.get("python_stack_extras"):
        return
    constraints = f"{paths.venv}/{plan.CONSTRAINTS_FILE}"
    files.put(  # as root, then owned by the training user: a put as another sudo user needs setfacl
        name="Write the stack's pins for the extras (pip constraints)",
        src=io.StringIO(plan.constraints_text(data)),
        dest=constraints,
        user=paths.user,
        group=paths.group,
        mode="644",
        _sudo=True,
    )
    step = plan.extras_step(data, installed, constraints)
    if step is None:
        host.noop(f"python_stack_extras already installed: {', '.join(plan.extras_pins(data))}")
        return
    pip.packages(
        name=f"Install the extras {', '.join(step.packages)} ({'; '.join(step.reasons[:3])})",
        packages=step.packages,
        virtualenv=paths.venv,
        virtualenv_kwargs={"venv": True, "python": python},
        extra_install_args=" ".join(shlex.quote(a) for a in step.pip_args),
        **as_user,
    )


def _ensure_python(data: dict[str, Any]) -> str:
    """Make a new enough Python available; return the executable the venv is created with."""
    distro = host.get_fact(LinuxDistribution)
    try:
        choice = plan.choose_python(distro["name"], host.get_fact(PythonVersion, python="python3"), data)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    installed = host.get_fact(DebPackages)
    if not choice.deadsnakes:
        missing = [p for p in data["python_stack_venv_packages"] if p not in installed]
        if missing:
            apt.packages(name="Install python3's venv module", packages=missing, update=True, _sudo=True)
        return choice.executable

    packages = [p.format(python=choice.executable) for p in data["python_stack_deadsnakes_packages"]]
    if all(p in installed for p in packages):
        return choice.executable
    codename = distro["release_meta"].get("VERSION_CODENAME")
    keyring = data["python_stack_deadsnakes_keyring"]
    apt.key(
        name="Install the deadsnakes PPA key",
        src=data["python_stack_deadsnakes_key_url"],
        dest=keyring,
        _sudo=True,
    )
    files.template(
        name="Add the deadsnakes PPA",
        src=str(TEMPLATES / "deadsnakes.list.j2"),
        dest="/etc/apt/sources.list.d/deadsnakes.list",
        user="root",
        group="root",
        mode="644",
        python=choice.executable,
        line=f"deb [signed-by={keyring}] {data['python_stack_deadsnakes_repo_url']} {codename} main",
        _sudo=True,
    )
    apt.packages(
        name=f"Install {choice.executable} from deadsnakes", packages=packages, update=True, _sudo=True
    )
    return choice.executable
