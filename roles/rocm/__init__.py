"""Install ROCm from AMD's apt repositories: the legacy repo.radeon.com stream or the ROCm Core SDK."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt, files, python, server
from pyinfra.operations.util import any_changed
from radeonlab.roles.python_stack.defaults import DEFAULTS as PYTHON_STACK_DEFAULTS
from radeonlab.roles.python_stack.defaults import PYTORCH_ROCM_PAIRING
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm.defaults import DEFAULTS

TEMPLATES = Path(__file__).parent / "templates"
SUDO: dict[str, Any] = {"_sudo": True}


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
        **SUDO,
    )


def settings() -> dict[str, Any]:
    """This host's value of every rocm_* key (inventory data over the role's defaults)."""
    return {key: host.data.get(key, default) for key, default in DEFAULTS.items()}


def _missing(packages: Sequence[str]) -> list[str]:
    installed = host.get_fact(DebPackages)
    return [p for p in packages if p.split("=", 1)[0] not in installed]


@deploy("Install ROCm", data_defaults=DEFAULTS)
def install_rocm(gfx_targets: Sequence[str | None] = ()) -> None:
    """Install ROCm for the GPUs whose gfx targets are given (the Core SDK picks packages by GPU family)."""
    data = settings()
    codename = repos.check_supported(host.name, repos.distro_from_fact(host.get_fact(LinuxDistribution)))
    _check_torch_pairing(data)

    missing_prereqs = _missing(data["rocm_prerequisite_packages"])
    if missing_prereqs:
        apt.packages(
            name="Install what fetching AMD's key needs",
            packages=data["rocm_prerequisite_packages"],
            update=True,
            **SUDO,
        )

    if data["rocm_stream"] == "legacy":
        keyring, key_url, origin = data["rocm_keyring"], data["rocm_key_url"], data["rocm_origin"]
        list_name, lines = "rocm", repos.legacy_sources(data, codename)
        packages = repos.legacy_packages(data)
    elif data["rocm_stream"] == "coresdk":
        keyring, key_url, origin = (
            data["rocm_coresdk_keyring"],
            data["rocm_coresdk_key_url"],
            data["rocm_coresdk_origin"],
        )
        list_name, lines = "amdrocm", repos.coresdk_sources(data, codename)
        packages = repos.coresdk_packages(data, gfx_targets)
        if not packages:
            raise DeployError(
                f"{host.name}: no ROCm Core SDK package family serves this host's GPUs {list(gfx_targets)}"
            )
    else:
        raise DeployError(
            f"{host.name}: rocm_stream must be 'legacy' or 'coresdk', not {data['rocm_stream']!r}"
        )

    source_ops = [
        apt.key(name=f"Install AMD's apt key as {keyring}", src=key_url, dest=keyring, **SUDO),
        _root_template(
            name=f"Write /etc/apt/sources.list.d/{list_name}.list",
            template="apt-sources.list.j2",
            dest=f"/etc/apt/sources.list.d/{list_name}.list",
            lines=lines,
            comment=f"ROCm {data['rocm_version']} ({data['rocm_stream']} stream)",
        ),
        _root_template(
            name=f"Pin {origin} above the distribution's packages",
            template="apt-pin.j2",
            dest=f"/etc/apt/preferences.d/{list_name}-pin-600",
            origin=origin,
            pin=repos.pin(origin),
        ),
    ]
    driver_packages: list[str] = []
    if data["rocm_install_driver"]:
        driver_packages = list(data["rocm_driver_packages"])
        source_ops += _driver_sources(data, codename)

    # Refresh the package lists when a source changed, or unconditionally when something is to be installed
    # (a run interrupted after writing the sources would otherwise install from stale lists).
    if _missing(packages + driver_packages):
        apt.update(name="Refresh apt package lists", **SUDO)
    else:
        apt.update(
            name="Refresh apt package lists (ROCm sources changed)", _if=any_changed(*source_ops), **SUDO
        )

    rocm_op = apt.packages(name=f"Install ROCm {data['rocm_version']} packages", packages=packages, **SUDO)
    if driver_packages:
        _install_driver(data, driver_packages)

    ld_op = _root_template(
        name="Register ROCm's libraries with the dynamic linker",
        template="ld.so.conf.j2",
        dest="/etc/ld.so.conf.d/rocm.conf",
        paths=data["rocm_ld_paths"],
    )
    server.shell(
        name="Rebuild the dynamic linker cache",
        commands=["ldconfig"],
        _if=any_changed(ld_op, rocm_op),
        **SUDO,
    )
    _root_template(
        name="Put ROCm's tools on login shells' PATH",
        template="radeonlab-rocm.sh.j2",
        dest="/etc/profile.d/radeonlab-rocm.sh",
        bin_path=data["rocm_bin_path"],
    )


def _check_torch_pairing(data: dict[str, Any]) -> None:
    torch_version = str(host.data.get("pytorch_version", PYTHON_STACK_DEFAULTS["pytorch_version"]))
    problem = repos.torch_pairing_problem(str(data["rocm_version"]), torch_version, PYTORCH_ROCM_PAIRING)
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
                **SUDO,
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
    driver_op = apt.packages(name="Install the amdgpu kernel driver", packages=packages, **SUDO)
    if data["rocm_allow_reboot"]:
        server.reboot(name="Reboot into the new amdgpu driver", _if=driver_op.did_change, **SUDO)
    else:
        python.call(
            name="Say that the new amdgpu driver needs a reboot",
            function=lambda: logger.warning(
                f"{host.print_prefix}amdgpu driver changed: reboot this host (rocm_allow_reboot is false)"
            ),
            _if=driver_op.did_change,
        )
