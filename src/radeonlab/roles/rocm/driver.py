"""The kernel and driver AMD asks for, on a host whose AMD GPU is on the PCI bus but not driven yet.

KFD lists no GPU until the amdgpu driver drives it; roles/gpu/pci.py still finds the card on PCI. Then this
runs AMD's path for the distribution, kernel and part, and reboots (roles/rocm README, "Kernel driver"):

- AMD's support matrix (sandbox/amdworld/support-matrix.yaml [OSSUPPORT], [PREREQ]): Radeon on Ubuntu 24.04
  only with the HWE 6.17 kernel (not GA 6.8), on 22.04 with HWE 6.8, on 26.04 the GA 7.0 kernel; Ryzen APUs
  on 24.04 need the OEM kernel, on 26.04 the GA one. Debian is listed for neither (Instinct only).
- For Radeon dGPUs AMD asks for the AMD GPU driver, amdgpu-dkms, after linux-headers-$(uname -r) and
  linux-modules-extra-$(uname -r); Ryzen APUs use the inbox driver (amdworld/releases.yaml [INSTALL100]).
  Then a reboot.

`plan_driver` is pure (facts in -> the plan); `install_kernel_driver` turns a plan into operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.server import KernelVersion, LinuxDistribution
from pyinfra.operations import apt, server

from radeonlab.roles.privilege import as_root
from radeonlab.roles.rocm.facts import SecureBootState


@dataclass(frozen=True)
class DriverPlan:
    """What a host with an undriven AMD GPU gets: apt packages in install order, then a reboot."""

    part: str  # "radeon" (a discrete card among the GPUs) or "ryzen" (APUs only)
    kernel_package: str | None  # the kernel metapackage AMD's matrix asks for; None: the running one is it
    packages: tuple[str, ...]  # kernel metapackage, headers and modules-extra of the running kernel, dkms
    dkms: bool  # amdgpu-dkms is in `packages` (dGPUs only): the AMD GPU driver repository is needed
    gpus: str  # "AMD Radeon RX 7900 XTX (0000:03:00.0)", for messages


def distro_key(name: str, major: int | None) -> str:
    """ "Ubuntu", 24 -> "ubuntu-24": the keys of rocm_driver_kernels."""
    return f"{name.lower()}-{major}"


def plan_driver(
    distro: str, kernel_release: str, pci_gpus: Sequence[Mapping[str, Any]], data: Mapping[str, Any]
) -> DriverPlan:
    """The driver plan for undriven `pci_gpus` (AmdPciGpus dicts) on `distro` (distro_key) running
    `kernel_release` (uname -r). Raises ValueError, in one line, where AMD documents no path."""
    if not pci_gpus:
        raise ValueError("no AMD GPU on the PCI bus")
    part = "ryzen" if all(gpu.get("apu") for gpu in pci_gpus) else "radeon"
    names = ", ".join(f"{gpu['name']} ({gpu['pci_slot']})" for gpu in pci_gpus)
    kernels: Mapping[str, str] = data["rocm_driver_kernels"].get(part, {})
    if distro not in kernels:
        listed = ", ".join(sorted(kernels)) or "none"
        raise ValueError(
            f"{names} is not driven by the running kernel {kernel_release}, and AMD documents no kernel or "
            f"driver path for {'Ryzen APUs' if part == 'ryzen' else 'Radeon cards'} on {distro} (AMD's "
            f"matrix lists {listed}): boot a kernel whose amdgpu drives it, or set gpu_cpu_only: true"
        )
    kernel_package = kernels[distro] or None
    running = [t.format(kernel=kernel_release) for t in data["rocm_driver_kernel_packages"]]
    dkms = part == "radeon"
    packages = [*([kernel_package] if kernel_package else []), *running]
    if dkms:
        packages += list(data["rocm_driver_packages"])
    return DriverPlan(part, kernel_package, tuple(packages), dkms, names)


def manual_steps(plan: DriverPlan) -> str:
    """The one line a host gets when it may not reboot: what to run there by hand."""
    source = "AMD's amdgpu repository (rocm_amdgpu_repo_url), then " if plan.dkms else ""
    return (
        f"{plan.gpus} is on the PCI bus but not driven by the running kernel: add {source}"
        f"`sudo apt-get install {' '.join(plan.packages)}` and reboot, or set rocm_allow_reboot: true "
        "to let the deploy do it"
    )


def secure_boot_warning(secure_boot: bool | None, plan: DriverPlan) -> str | None:
    """With Secure Boot on, a DKMS-built module loads only once its signing key is enrolled (MOK)."""
    if not (secure_boot and plan.dkms):
        return None
    return (
        "Secure Boot is on: amdgpu-dkms signs its module with a machine owner key (MOK); after the reboot, "
        "enrol it at the console (MOK manager, the password `mokutil --import` asked for) or amdgpu will "
        "not load"
    )


def install_kernel_driver(pci_gpus: Sequence[Mapping[str, Any]]) -> None:
    """AMD's kernel and driver for the undriven `pci_gpus` (AmdPciGpus dicts), then a reboot through pyinfra.

    Everything that can be refused (no documented path, rebooting not allowed) is refused before any
    operation, so a refused host is left unchanged."""
    # imported here: the role's package (radeonlab.roles.rocm) is the importer of this module's names
    from radeonlab.roles.rocm import _driver_sources, repos, settings

    data = settings()
    distro = host.get_fact(LinuxDistribution)
    kernel_release = str(host.get_fact(KernelVersion) or "").strip()
    try:
        plan = plan_driver(distro_key(distro["name"] or "", distro["major"]), kernel_release, pci_gpus, data)
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    if not data["rocm_allow_reboot"]:
        # One line says what to do; the deploy fails for this host and nothing on it is changed.
        raise DeployError(f"{host.name}: {manual_steps(plan)}")
    warning = secure_boot_warning(host.get_fact(SecureBootState), plan)
    if warning:
        logger.warning(f"{host.print_prefix}{warning}")
    installed = host.get_fact(DebPackages)
    if plan.dkms:
        codename = repos.check_supported(host.name, repos.distro_from_fact(distro))
        prerequisites = list(data["rocm_prerequisite_packages"])
        if any(package not in installed for package in prerequisites):
            apt.packages(
                name="Install what fetching AMD's key needs", packages=prerequisites, update=True, **as_root()
            )
        _driver_sources(data, codename)
    if any(package not in installed for package in plan.packages):
        apt.update(name="Refresh apt package lists (kernel and driver packages to install)", **as_root())
    packages_op = apt.packages(
        name=f"Install the kernel and driver AMD asks for ({', '.join(plan.packages)})",
        packages=list(plan.packages),
        **as_root(),
    )
    server.reboot(
        name=f"Reboot so that the kernel drives {plan.gpus}",
        delay=int(data["rocm_reboot_delay"]),
        reboot_timeout=int(data["rocm_reboot_timeout"]),
        _if=packages_op.did_change,
        **as_root(),
    )
