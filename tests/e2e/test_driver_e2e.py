"""End to end: a card on the PCI bus that the running kernel does not drive yet (SIMULATED, sandbox hosts).

The host shows the RX 7900 XTX under /sys/bus/pci/devices with no driver, no KFD class and no DRM card
(simcards.write_card_state driven=False). It presents itself as Ubuntu 24.04 (SIMULATED, ubuntuarchive.py:
AMD lists no Debian for Radeon) with a SIMULATED Ubuntu archive holding the kernel packages the path installs;
amdgpu-dkms is the SIMULATED AMD repository's stand-in and the reboot the host's SIMULATED `reboot`, after
which its sysfs shows the card driven (host_init.py). Nothing here exercises a real kernel, driver or reboot.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from radeonlab.sandbox import aptrepo, ubuntuarchive, web, wheels
from radeonlab.sandbox.hosts import Sandbox, SandboxError, SandboxHost
from tests.support.provisioned import run_deploy

pytestmark = pytest.mark.sandbox

CARD = "rx7900xtx"
MARKERS = Path("usr/share/radeonlab-simulated")
DATA = {"rocm_amdgpu_version": "30.30"}  # the driver repository the SIMULATED AMD repository serves


@dataclass
class Lab:
    sandbox: Sandbox
    url: str
    archive: Path

    def undriven_host(self, name: str, ubuntu: bool = True, **data: object) -> SandboxHost:
        host = self.sandbox.create_host(name, card=CARD, data={**DATA, **data})
        # booted with the card undriven: the driven trees wait for the SIMULATED reboot
        host.stop()
        host.set_card(CARD, driven=False)
        for _ in range(100):  # the killed sshd's connections may hold its port for a moment
            try:
                host.start()
                break
            except SandboxError:
                time.sleep(0.1)
        assert host.is_running()
        if ubuntu:
            ubuntuarchive.present_as_ubuntu_2404(host.root, self.archive, self.url)
        return host


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox) -> Iterator[Lab]:
    repo = aptrepo.build_repo(sandbox.state_dir)
    index = wheels.build_wheel_index(sandbox.state_dir)
    archive = ubuntuarchive.build(sandbox.state_dir)
    with web.spawn(sandbox.www_dir) as server:
        sandbox.set_common_data(**repo.settings(server.url), **index.settings(server.url))
        yield Lab(sandbox, server.url, archive)


# What logging in leaves, not the deploy: login records, and the marker Debian's sudo writes on a first use
# (with the directory whose mtime it changes).
LOGIN_TRACES = {"home/lab", "home/lab/.sudo_as_admin_successful"}


def disk_state(host: SandboxHost) -> dict[str, tuple[int, int, int]]:
    """Every file of the host's disk (path -> mode, size, mtime), login traces (var/log, LOGIN_TRACES) left
    out."""
    state = {}
    for top, dirs, files in os.walk(host.root):
        rel_top = os.path.relpath(top, host.root)
        if rel_top in ("proc", "sys", "dev", "run", "var/log"):
            dirs[:] = []
            continue
        for name in files + dirs:
            st = os.lstat(os.path.join(top, name))
            if os.path.join(rel_top, name) not in LOGIN_TRACES:
                state[os.path.join(rel_top, name)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return state


def test_pci_shows_the_card_kfd_does_not(lab: Lab) -> None:
    host = lab.undriven_host("drv-view")
    try:
        pci = host.exec("cat /sys/bus/pci/devices/*/uevent; ls /sys/class").stdout
        assert "PCI_ID=1002:744C" in pci and "DRIVER=" not in pci
        assert "kfd" not in pci.split() and host.exec("ls /dev/kfd", check=False).returncode != 0
    finally:
        lab.sandbox.destroy_host(host.name)


def test_reboot_forbidden_one_line_nonzero_exit_nothing_changed(lab: Lab) -> None:
    host = lab.undriven_host("drv-noreboot")  # rocm_allow_reboot: false, the role's default
    try:
        before = disk_state(host)
        run = run_deploy(lab.sandbox, [host])
        assert run.returncode != 0
        output = (run.stdout + run.stderr).splitlines()
        lines = [line for line in output if "is on the PCI bus but not driven by the running kernel" in line]
        assert len(lines) == 1, run.stderr[-3000:]
        assert "linux-generic-hwe-24.04" in lines[0] and "amdgpu-dkms" in lines[0]
        assert "rocm_allow_reboot: true" in lines[0]
        after = disk_state(host)
        assert len(before) > 1000  # the whole disk was compared
        assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == set()
    finally:
        lab.sandbox.destroy_host(host.name)


def test_debian_has_no_documented_path_one_line_even_with_reboots_allowed(lab: Lab) -> None:
    host = lab.undriven_host("drv-debian", ubuntu=False, rocm_allow_reboot=True)  # the sandbox's Debian 12
    try:
        before = disk_state(host)
        run = run_deploy(lab.sandbox, [host])
        assert run.returncode != 0
        lines = [line for line in (run.stdout + run.stderr).splitlines() if "AMD documents no" in line]
        assert len(lines) == 1, run.stderr[-3000:]
        assert "on debian-12" in lines[0] and "gpu_cpu_only" in lines[0]
        assert disk_state(host) == before
    finally:
        lab.sandbox.destroy_host(host.name)


@pytest.mark.slow  # provisions the training stack
def test_driver_path_reboots_and_the_second_pass_provisions(lab: Lab) -> None:
    host = lab.undriven_host("drv-reboot", rocm_allow_reboot=True, rocm_reboot_delay=3)
    kernel = os.uname().release
    try:
        run = run_deploy(lab.sandbox, [host])
        assert run.returncode == 0, run.stderr[-5000:]
        changed = run.changed_ops(host.name)
        assert any(op.startswith("Install the kernel and driver AMD asks for (linux-generic-hwe-24.04, "
                                 f"linux-headers-{kernel}, linux-modules-extra-{kernel}, amdgpu-dkms)")
                   for op in changed), changed  # fmt: skip
        assert any(op.startswith("Reboot so that the kernel drives AMD Radeon RX 7900 XTX") for op in changed)
        for package in ("linux-generic-hwe-24.04", f"linux-headers-{kernel}", f"linux-modules-extra-{kernel}",
                        "amdgpu-dkms"):  # fmt: skip
            assert (host.root / MARKERS / package).is_file(), package
        console = (host.dir / "console.log").read_text()
        assert "SIMULATED reboot" in console and "SIMULATED amdgpu driver loaded" in console
        # the second pass found the card through KFD and provisioned the host to its record
        record = host.exec("cat /etc/radeonlab/host.json").stdout
        assert "AMD Radeon RX 7900 XTX" in record and "gfx1100" in record
        again = run_deploy(lab.sandbox, [host])  # driven now: no driver step, no reboot
        assert again.returncode == 0, again.stderr[-3000:]
        assert not [op for op in again.changed_ops(host.name) if "kernel" in op or "Reboot" in op]
    finally:
        lab.sandbox.destroy_host(host.name)
