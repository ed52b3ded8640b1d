"""Install ROCm from AMD's apt repositories: the ROCm Core SDK (repo.amd.com) or the legacy repo.radeon.com
stream."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import KernelVersion, LinuxDistribution
from pyinfra.operations import apt, files, python, server
from pyinfra.operations.util import any_changed

from radeonlab.roles.privilege import as_root
from radeonlab.roles.rocm import matrix, repos
from radeonlab.roles.rocm.defaults import DEFAULTS
from radeonlab.roles.stack import StackChoice

TEMPLATES = Path(__file__).parent / "templates"


def _root_template(name: str, template: str, dest: str, **context: Any) -> Any:
    """Render one of this role's templates to a root-owned 0644 file (every file the role writes)."""
    return files.template(
        name=name,
        src=str(TEMPLATES / template),
        dest=dest,
        user="root",
        group="root",
        mode="644",
        jinja_env_kwargs={"trim_blocks": True, "lstrip_blocks": True},  # a fresh dict: pyinfra pops from it
        **context,
        **as_root(),
    )


def settings() -> dict[str, Any]:
    """This host's value of every rocm_* key (inventory data over the role's defaults)."""
    return {key: host.data.get(key, default) for key, default in DEFAULTS.items()}


def _missing(packages: Sequence[str]) -> list[str]:
    installed = host.get_fact(DebPackages)
    return [p for p in packages if p.split("=", 1)[0] not in installed]


@deploy("Install ROCm", data_defaults=DEFAULTS)
def install_rocm(stack: StackChoice) -> None:
    """Install ROCm for the GPUs this host trains on (`stack.targets`, the stack choice deploy/stack.py
    makes once): the Core SDK picks one meta package per exact target (multi-arch layout) or per GPU family;
    the legacy stream installs its runtime packages.

    Everything that can be refused (an unpublished release, a stream AMD does not serve on this distribution,
    a GPU without a package, an unpaired torch) is refused here, before any operation runs.
    """
    data = settings()
    gfx_targets = stack.targets
    distro_fact = host.get_fact(LinuxDistribution)
    codename = repos.check_supported(host.name, repos.distro_from_fact(distro_fact))
    _warn_outside_matrix(distro_fact, gfx_targets)
    try:
        source = repos.apt_source(data, codename)
        if source.stream == "legacy":
            packages = repos.legacy_packages(data)
        else:
            packages = repos.coresdk_packages(data, gfx_targets)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    if not packages:
        raise DeployError(f"{host.name}: no ROCm package serves this host's GPUs {list(gfx_targets)}")
    _check_torch_pairing(data, stack)

    missing_prereqs = _missing(data["rocm_prerequisite_packages"])
    if missing_prereqs:
        apt.packages(
            name="Install what fetching AMD's key needs",
            packages=data["rocm_prerequisite_packages"],
            update=True,
            **as_root(),
        )

    removed = _remove_other_streams(data, source.stream)
    source_ops = [
        apt.key(
            name=f"Install AMD's apt key as {source.keyring}",
            src=source.key_url,
            dest=source.keyring,
            **as_root(),
        ),
        _root_template(
            name=f"Write {source.list_path}",
            template="apt-sources.list.j2",
            dest=source.list_path,
            lines=list(source.lines),
            comment=source.comment,
        ),
        _root_template(
            name=f"Pin {source.origin} above the distribution's packages",
            template="apt-pin.j2",
            dest=source.pin_path,
            origin=source.origin,
            pin=source.pin,
        ),
        *removed,
    ]
    driver_packages: list[str] = []
    if data["rocm_install_driver"]:
        driver_packages = list(data["rocm_driver_packages"])
        source_ops += _driver_sources(data, codename)

    # Refresh the package lists when a source changed, or unconditionally when something is to be installed
    # (a run interrupted after writing the sources would otherwise install from stale lists).
    if _missing(packages + driver_packages):
        apt.update(name="Refresh apt package lists", **as_root())
    else:
        apt.update(
            name="Refresh apt package lists (ROCm sources changed)", _if=any_changed(*source_ops), **as_root()
        )

    rocm_op = apt.packages(
        name=f"Install ROCm {data['rocm_version']} packages ({', '.join(packages)})",
        packages=packages,
        **as_root(),
    )
    if driver_packages:
        _install_driver(data, driver_packages)

    ld_op = _root_template(
        name="Register ROCm's libraries with the dynamic linker",
        template="ld.so.conf.j2",
        dest="/etc/ld.so.conf.d/rocm.conf",
        paths=repos.ld_paths(data),
    )
    server.shell(
        name="Rebuild the dynamic linker cache",
        commands=["ldconfig"],
        _if=any_changed(ld_op, rocm_op, *removed),
        **as_root(),
    )
    _root_template(
        name="Put ROCm's tools on login shells' PATH",
        template="radeonlab-rocm.sh.j2",
        dest="/etc/profile.d/radeonlab-rocm.sh",
        bin_path=data["rocm_bin_path"],
    )


# (state, host name) already told it is outside AMD's matrix: one warning per host and run, however many
# times the role runs for it (a second provisioning pass after a reboot).
_MATRIX_WARNED: set[tuple[int, str]] = set()


def _warn_outside_matrix(distro_fact: Any, gfx_targets: Sequence[str | None]) -> None:
    """One warning when AMD's support matrix does not list this host (Debian for Radeon, an Ubuntu kernel
    AMD does not name): provisioned anyway, AMD still publishes the repository (roles/rocm/matrix.py)."""
    key = (id(host.state), host.name)
    if key in _MATRIX_WARNED:
        return
    warning = matrix.matrix_warning(
        distro_fact.get("name"),
        distro_fact.get("major"),
        distro_fact.get("minor"),
        host.get_fact(KernelVersion),
        gfx_targets,
    )
    if warning:
        _MATRIX_WARNED.add(key)
        logger.warning(f"{host.print_prefix}outside AMD's support matrix: {warning}")


def _remove_other_streams(data: dict[str, Any], stream: str) -> list[Any]:
    """A switch of stream (or of Core SDK release): remove the other stream's sources and pin, then its
    packages, so apt sees one ROCm origin and the linker one ROCm. Nothing to do: no operation at all."""
    ops = []
    other = "coresdk" if stream == "legacy" else "legacy"
    for path in repos.stream_files(other).values():
        ops.append(
            files.file(name=f"Remove {path} (the {other} stream's)", path=path, present=False, **as_root())
        )
    if data["rocm_remove_other_streams"]:
        leftovers = repos.leftover_packages(data, host.get_fact(DebPackages))
        if leftovers:
            ops.append(
                server.shell(
                    name=f"Remove ROCm packages of another stream or release ({', '.join(leftovers[:4])}"
                    f"{' ...' if len(leftovers) > 4 else ''})",
                    commands=repos.purge_commands(leftovers),
                    **as_root(),
                )
            )
    return ops


def _check_torch_pairing(data: dict[str, Any], stack: StackChoice) -> None:
    # AMD's wheels pair with the Core SDK release; download.pytorch.org's with the rocm<series> index they
    # come from (their own ROCm libraries inside, so they also run beside a Core SDK): stack.torch says which.
    torch = stack.torch
    problem = repos.torch_pairing_problem(torch.rocm_version, torch.torch_version, stack.pairing)
    if problem and not data["rocm_allow_unpaired_torch"]:
        raise DeployError(f"{host.name}: {problem} (set rocm_allow_unpaired_torch: true to install anyway)")
    if problem:
        logger.warning(f"{host.print_prefix}{problem} (allowed by rocm_allow_unpaired_torch)")


def _driver_sources(data: dict[str, Any], codename: str) -> list[Any]:
    try:
        lines = repos.driver_sources(data, codename)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    ops = []
    if data["rocm_stream"] != "legacy":  # the driver is signed with repo.radeon.com's key in both streams
        ops.append(
            apt.key(
                name="Install AMD's driver apt key",
                src=data["rocm_key_url"],
                dest=data["rocm_keyring"],
                **as_root(),
            )
        )
    ops.append(
        _root_template(
            name="Write /etc/apt/sources.list.d/amdgpu.list",
            template="apt-sources.list.j2",
            dest="/etc/apt/sources.list.d/amdgpu.list",
            lines=lines,
            comment=f"amdgpu kernel driver {repos.driver_version(data)} for ROCm {data['rocm_version']}",
        )
    )
    return ops


def _install_driver(data: dict[str, Any], packages: list[str]) -> None:
    driver_op = apt.packages(name="Install the amdgpu kernel driver", packages=packages, **as_root())
    if data["rocm_allow_reboot"]:
        server.reboot(name="Reboot into the new amdgpu driver", _if=driver_op.did_change, **as_root())
    else:
        python.call(
            name="Say that the new amdgpu driver needs a reboot",
            function=lambda: logger.warning(
                f"{host.print_prefix}amdgpu driver changed: reboot this host (rocm_allow_reboot is false)"
            ),
            _if=driver_op.did_change,
        )
