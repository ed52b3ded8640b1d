"""The training stack in the training user's venv: PyTorch for ROCm, pinned requirements, LLaMA-Factory."""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import Directory
from pyinfra.facts.server import Home, LinuxDistribution
from pyinfra.operations import apt, files, pip, python, server

from radeonlab.contract.jobdir import blobs_dir
from radeonlab.roles import privilege
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import firstlock, plan
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.roles.python_stack.facts import InstalledDistributions, PythonVersion, UserGroups
from radeonlab.roles.stack import StackChoice

TEMPLATES = Path(__file__).parent / "templates"
# Modes of the folders the role creates, owned by the training user and its primary group. The jobs dir
# holds users' datasets, models and adapters: nobody outside the training user's group reads it.
# ~/radeonlab itself and the content store too (uploaded datasets and models; a Slurm lab has other users):
# 0750, set on every run, so a deploy repairs what an older radeonlab made 0755.
DIRECTORY_MODES: dict[str, str] = {"venv_parent": "750", "jobs_dir": "750", "blobs": "750"}
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


def run_dir() -> str:
    """The directory pyinfra runs in: the lab's locks are kept in its `locks/` (python_stack_lock_dir)."""
    return str(state.cwd or os.getcwd())


def lock_file(stack: StackChoice, sources: Mapping[str, Any] | None = None) -> Path:
    """The hash lock this host's stack is installed from: the repository's, else the lab's (made by the
    first deploy of the stack when missing). Facts only."""
    data = {**settings(), **(sources or {})}
    rocm_version = stack.rocm_version
    try:
        _, python_minor = _python_choice(data)
        return stack_lock.lock_path(data, stack_lock.lock_key(data, rocm_version, python_minor), run_dir())
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None


def lock_inputs(stack: StackChoice, sources: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What choosing and installing the lab's hash lock takes, for a host that does not install the stack
    in a venv (a container host's derived image: roles/container): the settings, the ROCm release, where
    pyinfra runs, the extras, pip's index options and URLs, and the lab's lock folder. Settings only."""
    data = {**settings(), **(sources or {})}
    index_args, indexes = _index_args(data, stack.rocm_version)
    return {
        "data": data,
        "rocm_version": stack.rocm_version,
        "cwd": run_dir(),
        "extras": list(data.get("python_stack_extras") or []),
        "index_args": index_args,
        "indexes": indexes,
        "lock_dir": str(stack_lock.lab_lock_dir(data, run_dir())),
    }


@deploy("Install the Python training stack", data_defaults=DEFAULTS)
def install_python_stack(stack: StackChoice, sources: Mapping[str, Any] | None = None) -> None:
    """`stack`: the host's stack choice (deploy/stack.py): its ROCm release and the training GPUs' exact
    targets (AMD's wheels: one device extra each). `sources`: settings that win over the inventory's (the
    wheel cache's index URLs, roles/wheel_cache)."""
    data = {**settings(), **(sources or {})}
    targets = sorted({t for t in stack.targets if t})
    paths = stack_paths()
    as_user = privilege.as_user(paths.user)
    rocm_version = stack.rocm_version

    extras = list(data.get("python_stack_extras") or [])
    try:
        plan.extras_pins(data)  # a name without a pinned version stops here, before anything changes
        plan.torch_request(data, rocm_version, targets)  # so does what the torch source cannot serve
        choice, python_minor = _python_choice(data)
        installer = plan.installer(data)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    uv_cache = plan.expand_home(str(data["python_stack_uv_cache_dir"]), paths.home)
    key = stack_lock.lock_key(data, rocm_version, python_minor)
    path = stack_lock.lock_path(data, key, run_dir())
    lock = stack_lock.parse_lock(path.read_text(), key) if path.exists() else None
    committed = path.parent == stack_lock.LOCKS_DIR
    if lock is not None and committed and not stack_lock.covers(lock, data, targets, extras):
        stale = ", ".join(stack_lock.stale_pins(lock, data, extras)) or "a GPU target of this host"
        raise DeployError(  # the repository's lock is a reviewed promise: never rewritten by a deploy
            f"{host.name}: the committed hash lock {path} lacks {stale}: remove it to let the deploy resolve "
            "the stack into the lab's lock, or commit a new one"
        )
    if sources and not (lock is not None and stack_lock.covers(lock, data, targets, extras)):
        # The lab wheel cache serves the lab's lock and nothing else: no resolution can go through it.
        try:
            stack_lock.load_lock(data, rocm_version, python_minor, extras, run_dir())
            why = f"the hash lock {path} has no device package for {', '.join(targets)}"
        except ValueError as e:
            why = str(e)
        raise DeployError(
            f"{host.name}: {why}; through the lab wheel cache only the lab's lock is served: deploy without "
            "wheel_cache_host once to resolve the stack (python_stack_lock_refresh: true for a changed pin)"
        )
    if lock is not None and data.get("python_stack_lock_refresh") and not committed:
        lock = None  # resolved again at execution time (firstlock.py)
    python_bin = _ensure_python(data, choice)

    for path_, mode in (
        (str(Path(paths.venv).parent), DIRECTORY_MODES["venv_parent"]),
        (paths.jobs_dir, DIRECTORY_MODES["jobs_dir"]),
        (paths.model_cache, DIRECTORY_MODES["jobs_dir"]),
        (blobs_dir(paths.jobs_dir), DIRECTORY_MODES["blobs"]),
        (f"{blobs_dir(paths.jobs_dir)}/sha256", DIRECTORY_MODES["blobs"]),
    ):
        files.directory(
            name=f"Create {path_}",
            path=path_,
            present=True,
            user=paths.user,
            group=paths.group,
            mode=mode,
            **as_user,
        )
    pip.venv(name=f"Create the venv {paths.venv}", path=paths.venv, python=python_bin, **as_user)
    index_args, indexes = _index_args(data, rocm_version)
    runner = f"{paths.venv}/{RUNNER_FILE}"
    files.put(  # as root, then owned by the training user: a put as another sudo user needs setfacl
        name="Write the locked pip runner",
        src=str(Path(__file__).with_name("pip_locked.py")),
        dest=runner,
        user=paths.user,
        group=paths.group,
        mode="644",
        **as_root(),
    )
    install = plan.install_command(installer, paths.venv, runner, uv_cache, index_args)
    if installer == "uv":
        _install_uv(paths, data, index_args, as_user)
    if lock is not None and stack_lock.covers(lock, data, targets, extras):
        _install_locked(paths, lock, lock.for_host(targets, extras), install, indexes, as_user)
        return
    job = firstlock.Job(
        key, str(stack_lock.lab_lock_dir(data, run_dir()) / f"{key}.txt"), data, rocm_version, targets,
        extras, paths.python, paths.venv, paths.user, paths.group, index_args, indexes, install,
        root_args=as_root(), user_args=as_user,
    )  # fmt: skip
    python.call(
        name=f"Resolve the stack {key} into the lab's hash lock (none covers this host yet) and install "
        "from it",
        function=firstlock.resolve_and_install,
        job=job,
    )


def _index_args(data: dict[str, Any], rocm_version: str) -> tuple[list[str], list[str]]:
    """pip's index options for this stack, and the index URLs (what a lock records it was made from)."""
    args = plan.index_url_args(str(data["python_stack_index_url"]))
    indexes = [str(data["python_stack_index_url"]) or plan.PIP_DEFAULT_INDEX]
    torch_index = plan.torch_index_url(data, rocm_version)
    if torch_index != data["python_stack_index_url"]:
        args += ["--extra-index-url", torch_index]
        indexes.append(torch_index)
    for link in data["pytorch_find_links"]:
        args += ["--find-links", str(link)]
        indexes.append(str(link))
    return args, indexes


def _install_uv(
    paths: StackPaths, data: dict[str, Any], index_args: list[str], as_user: dict[str, Any]
) -> None:
    """uv into the venv, by the venv's pip from one hash-pinned wheel (python_stack_uv_version and _sha256)
    through the stack's own index (the lab wheel cache serves it beside the lock). Only when the venv
    lacks that version (fact InstalledDistributions)."""
    version = str(data["python_stack_uv_version"])
    if host.get_fact(Directory, path=f"{paths.venv}/bin"):  # no venv yet: nothing to ask its python
        installed = host.get_fact(InstalledDistributions, python=paths.python, names=["uv"], **as_user)
        if installed.get("uv") == version:
            return
    pin = f"{paths.venv}/radeonlab-uv.txt"
    files.put(
        name=f"Write uv's hash pin ({version})",
        src=io.StringIO(plan.uv_pin_line(data) + "\n"),
        dest=pin,
        user=paths.user,
        group=paths.group,
        mode="644",
        **as_root(),
    )
    command = [paths.python, "-m", "pip", "install", "--require-hashes", "--no-deps", "--quiet"]
    command += ["--disable-pip-version-check", *index_args, "-r", pin]
    server.shell(
        name=f"Install uv {version} from its hash-pinned wheel", commands=[shlex.join(command)], **as_user
    )


def _install_locked(
    paths: StackPaths,
    lock: stack_lock.Lock,
    pins: list[stack_lock.Pin],
    install: list[str],
    indexes: list[str],
    as_user: dict[str, Any],
) -> None:
    """This host's lines of the lock, installed with `pip --require-hashes --no-deps` through pip_locked.py
    (one line per refused file): exactly the locked files, or nothing. From the indexes the lock was made
    from, by the recorded URLs (no index page read); else by name. Runs only when the venv differs from
    the lock (InstalledDistributions: every locked name's version)."""
    lock_file = f"{paths.venv}/{LOCK_FILE}"
    files.put(
        name=f"Write this host's lines of the hash lock {lock.key}",
        src=io.StringIO(lock.install_text(pins, tuple(indexes) == lock.indexes)),
        dest=lock_file,
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
    server.shell(
        name=f"Install the hash-locked stack {lock.key} ({'; '.join(reasons[:3])}"
        f"{' ...' if len(reasons) > 3 else ''})",
        commands=[shlex.join([*install, "-r", lock_file])],
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
