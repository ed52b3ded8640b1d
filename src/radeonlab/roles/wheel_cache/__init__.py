"""A lab wheel cache: one host downloads the pinned training stack once and serves it; every host installs
from it (see README.md). `setup_wheel_cache()` returns the python_stack settings that point a host at the
cache ({} when the inventory names no cache host), for `install_python_stack(sources=...)`."""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyinfra import host, inventory
from pyinfra import state as pyinfra_state
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt, files, pip, server, systemd

from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import plan as stack_plan
from radeonlab.roles.python_stack import settings as stack_settings
from radeonlab.roles.python_stack.facts import PythonVersion
from radeonlab.roles.stack import StackChoice
from radeonlab.roles.wheel_cache import plan
from radeonlab.roles.wheel_cache.defaults import DEFAULTS
from radeonlab.roles.wheel_cache.facts import _PROBE, WheelCacheState

HERE = Path(__file__).parent


def settings() -> dict[str, Any]:
    return {key: host.data.get(key, default) for key, default in DEFAULTS.items()}


@deploy("Set up the lab wheel cache", data_defaults=DEFAULTS)
def setup_wheel_cache(stack: StackChoice, stack_of: Callable[[Any], StackChoice]) -> dict[str, Any]:
    """On the cache host: download, index and serve. On every host: the python_stack sources to use.
    `stack`: this host's stack choice; `stack_of`: the same choice for another host of the inventory (the
    cache downloads for every host it serves)."""
    data = settings()
    groups = {name: [h.name for h in members] for name, members in inventory.groups.items()}
    cache_name = plan.cache_host_name(data, groups)
    if cache_name is None:
        return {}
    cache_host = inventory.get_host(cache_name, None)
    if cache_host is None:
        raise DeployError(f"{host.name}: wheel_cache_host {cache_name!r} is not a host of the inventory")
    url = plan.cache_url(data, cache_name, {"ssh_hostname": cache_host.data.get("ssh_hostname")})
    if host.name == cache_name:
        _serve_cache(data, stack, stack_of)
    return plan.python_stack_sources(url)


def _serve_cache(data: dict[str, Any], chosen: StackChoice, stack_of: Callable[[Any], StackChoice]) -> None:
    stack = stack_settings()
    rocm_version = chosen.rocm_version
    try:
        upstream = plan.Upstream.from_stack(stack, rocm_version, _lab_targets(stack_of))
        upstream.torch(stack)  # what the source cannot serve is refused here, in one line
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    python3 = host.get_fact(PythonVersion, python="python3")
    try:
        choice = stack_plan.choose_python(host.get_fact(LinuxDistribution)["name"], python3, stack)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    pyver = plan.python_version(data, choice, python3)
    extras_per_host = [h.data.get("python_stack_extras", []) for h in inventory]
    names = sorted({stack_plan.normalize(str(n)) for extras in extras_per_host for n in extras or []})
    try:  # every host's extras and GPU targets: the cache serves the whole lab, from the stack's lock
        plan.lab_extras(stack, extras_per_host)
        with_uv = stack_plan.installer(stack) == "uv"
        lock = stack_lock.load_lock(stack, rocm_version, pyver, names, str(pyinfra_state.cwd or os.getcwd()))
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    lab_lock = lock.text(lock.for_host(upstream.targets, names))
    if with_uv:  # the hosts' installer comes through the cache too, hash-pinned
        lab_lock += stack_plan.uv_pin_line(stack) + "\n"
    digest = plan.lock_digest(lab_lock, upstream, pyver)
    cache_dir = str(data["wheel_cache_dir"]).rstrip("/")
    try:
        bind = plan.bind_address(data, host.name, host.data)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    port = int(data["wheel_cache_port"])
    probe_url = f"http://{plan.probe_address(bind)}:{port}/{plan.SIMPLE}/"
    state = host.get_fact(WheelCacheState, cache_dir=cache_dir, stamp_file=plan.STAMP, probe_url=probe_url)

    installed = host.get_fact(DebPackages)
    missing = [p for p in data["wheel_cache_apt_packages"] if p not in installed]
    if missing:
        apt.packages(name="Install python3's venv module", packages=missing, update=True, **as_root())
    for path in (cache_dir, f"{cache_dir}/{plan.FILES}"):
        files.directory(name=f"Create {path}", path=path, user="root", group="root", mode="755", **as_root())
    venv = f"{cache_dir}/{plan.TOOL_VENV}"
    pip.venv(name=f"Create pip's venv {venv}", path=venv, python="python3", **as_root())
    uploads = {}
    for src, dest, what in (
        (str(HERE / "build_index.py"), plan.INDEX_SCRIPT, "the index builder"),
        (str(HERE / "serve.py"), plan.SERVER_SCRIPT, "the server"),
        (io.StringIO(lab_lock), plan.LOCK, f"the lab's lines of the hash lock {lock.key}"),
    ):
        uploads[dest] = files.put(
            name=f"Upload {what}",
            src=src,
            dest=f"{cache_dir}/{dest}",
            user="root",
            group="root",
            mode="644",
            **as_root(),
        )
    if state["stamp"] != digest:
        stamp = shlex.quote(f"{cache_dir}/{plan.STAMP}")
        server.shell(
            name=f"Download the hash-locked stack {lock.key} into the wheel cache, verify and index it",
            commands=[
                plan.download_command(upstream, cache_dir, pyver),
                # read-only for everyone but root: the server (wheel_cache_user) cannot change what it serves
                f"chmod 0444 {shlex.quote(cache_dir)}/{plan.FILES}/*",
                shlex.join(
                    ["python3", f"{cache_dir}/{plan.INDEX_SCRIPT}", cache_dir, f"{cache_dir}/{plan.LOCK}"]
                ),
                f"echo {digest} > {stamp}.tmp && mv -f {stamp}.tmp {stamp}",
            ],
            **as_root(),
        )
    if state["systemd"]:
        _serve_with_systemd(data, cache_dir, port, bind)
    elif not state["serving"]:
        _serve_detached(data, cache_dir, port, bind, probe_url)
    else:  # a new server script (an upgrade of radeonlab) replaces the running one
        _serve_detached(data, cache_dir, port, bind, probe_url, _if=uploads[plan.SERVER_SCRIPT].did_change)


def _lab_targets(stack_of: Callable[[Any], StackChoice]) -> list[str]:
    """The GPU targets every host of this run trains on (its own facts, read over its connection): the
    cache downloads one device package of AMD's wheels for each, once for the lab. Hosts left out by
    --limit are not asked; a target only they have is then fetched by the next run that includes them."""
    targets: set[str] = set()
    for other in inventory.iter_activated_hosts():
        if other.data.get("gpu_cpu_only", False):
            continue
        targets.update(stack_of(other).targets)
    return sorted(targets)


def _serve_with_systemd(data: dict[str, Any], cache_dir: str, port: int, bind: str) -> None:
    name = str(data["wheel_cache_service_name"])
    unit = files.template(
        name=f"Write the {name} unit",
        src=str(HERE / "templates" / "wheel-cache.service.j2"),
        dest=f"/etc/systemd/system/{name}.service",
        user="root",
        group="root",
        mode="644",
        directory=cache_dir,
        port=port,
        bind_address=bind,
        user_name=data["wheel_cache_user"],
        **as_root(),
    )
    systemd.service(
        name=f"Run {name}",
        service=f"{name}.service",
        running=True,
        enabled=True,
        restarted=unit.did_change(),
        daemon_reload=unit.did_change(),
        **as_root(),
    )


def _serve_detached(
    data: dict[str, Any], cache_dir: str, port: int, bind: str, probe_url: str, **op_args: Any
) -> None:
    """No systemd (a container, the sandbox): a detached server with a pidfile; the fact's probe keeps it
    idempotent (started only when nothing answers)."""
    pidfile, log = str(data["wheel_cache_pidfile"]), str(data["wheel_cache_log"])
    tries = int(float(data["wheel_cache_start_timeout"]) * 10)
    script_path = f"{cache_dir}/{plan.SERVER_SCRIPT}"
    serve = ["python3", script_path, "--bind", bind, "--directory", cache_dir, str(port)]
    q = shlex.quote
    script = (
        f'if [ -f {q(pidfile)} ]; then kill "$(cat {q(pidfile)})" 2>/dev/null || true; fi; '
        f"setsid runuser -u {q(str(data['wheel_cache_user']))} -- {shlex.join(serve)} "
        f">>{q(log)} 2>&1 </dev/null & echo $! > {q(pidfile)}; "
        f'i=0; until [ "$(python3 -c {q(_PROBE)} {q(probe_url)})" = ok ]; do '
        f"i=$((i+1)); if [ $i -gt {tries} ]; then "
        f"echo 'wheel cache does not answer at {probe_url}; see {log}' >&2; "
        f"tail -n 5 {q(log)} >&2; exit 1; fi; "
        "sleep 0.1; done"
    )
    server.shell(
        name=f"Start the wheel cache server on {bind}:{port}", commands=[script], **as_root(), **op_args
    )
