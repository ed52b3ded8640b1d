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
from pyinfra.facts.server import Home, LinuxDistribution
from pyinfra.operations import apt, files, pip, server

from radeonlab.roles import privilege
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import plan
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.roles.python_stack.facts import InstalledDistributions, PythonVersion, UserGroups
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS

TEMPLATES = Path(__file__).parent / "templates"
# Modes of the folders the role creates, owned by the training user and its primary group. The jobs dir
# holds users' datasets, models and adapters: nobody outside the training user's group reads it.
DIRECTORY_MODES: dict[str, str] = {"venv_parent": "755", "jobs_dir": "750"}
# Beside the venv: this host's lines of the hash lock, and the runner that installs them (pip_locked.py).
LOCK_FILE = "radeonlab-lock.txt"
RUNNER_FILE = "radeonlab-pip-locked.py"


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
    try:
        user = plan.training_user(
            host.data.get("python_stack_user", DEFAULTS["python_stack_user"]), privilege.login_user()
        )
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
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


def lock_file(sources: Mapping[str, Any] | None = None) -> Path:
    """The hash lock this host's stack is installed from (facts only; install_python_stack refuses a
    missing or stale one)."""
    data = {**settings(), **(sources or {})}
    rocm_version = str(host.data.get("rocm_version", ROCM_DEFAULTS["rocm_version"]))
    try:
        _, python_minor = _python_choice(data)
        return stack_lock.lock_path(data, stack_lock.lock_key(data, rocm_version, python_minor))
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None


@deploy("Install the Python training stack", data_defaults=DEFAULTS)
def install_python_stack(
    sources: Mapping[str, Any] | None = None, gfx_targets: Sequence[str | None] = ()
) -> None:
    """`sources`: settings that win over the inventory's (the wheel cache's index URLs, roles/wheel_cache).
    `gfx_targets`: the training GPUs' exact targets (AMD's wheels: one device extra each)."""
    data = {**settings(), **(sources or {})}
    targets = sorted({t for t in gfx_targets if t})
    paths = stack_paths()
    as_user = privilege.as_user(paths.user)
    rocm_version = str(host.data.get("rocm_version", ROCM_DEFAULTS["rocm_version"]))

    extras = list(data.get("python_stack_extras") or [])
    try:
        plan.extras_pins(data)  # a name without a pinned version stops here, before anything changes
        plan.torch_request(data, rocm_version, targets)  # so does what the torch source cannot serve
        choice, python_minor = _python_choice(data)
        # The hash lock of this stack: none, or a pin changed without a new lock, stops here too.
        lock = stack_lock.load_lock(data, rocm_version, python_minor, extras)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    pins = lock.for_host(targets, extras)
    if data.get("pytorch_source", "amd") == "amd" and (
        missing := sorted(set(targets) - {p.target for p in pins if p.target})
    ):
        raise DeployError(
            f"{host.name}: the hash lock {lock.key} has no device package for {', '.join(missing)}: run "
            f"`{stack_lock.lockgen_command(data, rocm_version, python_minor)}`"
        )
    python = _ensure_python(data, choice)

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
    _install_locked(data, paths, lock, pins, rocm_version, as_user)


def _install_locked(
    data: dict[str, Any],
    paths: StackPaths,
    lock: stack_lock.Lock,
    pins: list[stack_lock.Pin],
    rocm_version: str,
    as_user: dict[str, Any],
) -> None:
    """This host's lines of the lock, installed with `pip --require-hashes --no-deps` through pip_locked.py
    (one line per refused file): exactly the locked files, or nothing. Runs only when the venv differs
    from the lock (InstalledDistributions: every locked name's version)."""
    lock_file, runner = f"{paths.venv}/{LOCK_FILE}", f"{paths.venv}/{RUNNER_FILE}"
    for src, dest, what in (
        (io.StringIO(lock.text(pins)), lock_file, f"this host's lines of the hash lock {lock.key}"),
        (str(Path(__file__).with_name("pip_locked.py")), runner, "the locked pip runner"),
    ):
        files.put(  # as root, then owned by the training user: a put as another sudo user needs setfacl
            name=f"Write {what}",
            src=src,
            dest=dest,
            user=paths.user,
            group=paths.group,
            mode="644",
            **as_root(),
        )
    installed = host.get_fact(
        InstalledDistributions, python=paths.python, names=sorted({p.name for p in pins}), **as_user
    )
    installed = {plan.normalize(k): v for k, v in installed.items()}
    reasons = stack_lock.install_reasons(pins, installed)
    if not reasons:
        host.noop(f"the Python stack already matches the hash lock {lock.key} ({len(pins)} distributions)")
        return
    args = [paths.python, runner, paths.python, "-m", "pip", "install", "--require-hashes", "--no-deps"]
    args += ["--disable-pip-version-check", "--index-url", str(data["python_stack_index_url"])]
    torch_index = plan.torch_index_url(data, rocm_version)
    if torch_index != data["python_stack_index_url"]:
        args += ["--extra-index-url", torch_index]  # the hashes decide what is accepted, not the index
    for link in data["pytorch_find_links"]:
        args += ["--find-links", str(link)]
    args += ["-r", lock_file]
    server.shell(
        name=f"Install the hash-locked stack {lock.key} ({'; '.join(reasons[:3])}"
        f"{' ...' if len(reasons) > 3 else ''})",
        commands=[shlex.join(args)],
        **as_user,
    )


def _python_choice(data: dict[str, Any]) -> tuple[plan.PythonChoice, str]:
    """The Python the venv is made with and its version (major.minor): facts only, nothing changes."""
    distro = host.get_fact(LinuxDistribution)
    python3 = host.get_fact(PythonVersion, python="python3")
    choice = plan.choose_python(distro["name"], python3, data)
    if choice.deadsnakes or not python3:
        return choice, choice.executable.removeprefix("python")  # "python3.11" -> "3.11"
    return choice, ".".join(python3.split(".")[:2])


def _ensure_python(data: dict[str, Any], choice: plan.PythonChoice) -> str:
    """Make a new enough Python available; return the executable the venv is created with."""
    distro = host.get_fact(LinuxDistribution)
    installed = host.get_fact(DebPackages)
    if not choice.deadsnakes:
        missing = [p for p in data["python_stack_venv_packages"] if p not in installed]
        if missing:
            apt.packages(name="Install python3's venv module", packages=missing, update=True, **as_root())
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
        **as_root(),
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
        **as_root(),
    )
    apt.packages(
        name=f"Install {choice.executable} from deadsnakes", packages=packages, update=True, **as_root()
    )
    return choice.executable
