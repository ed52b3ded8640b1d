"""A card on the PCI bus that no kernel drives yet: detection from recorded sysfs (recorded input -> parsed
fact) and AMD's kernel/driver plan per distribution, kernel and part (facts -> exact packages and lines).

The PCI device directories are built from the recorded DRM `card*/device` captures (tests/fixtures/gpu/drm,
SOURCES.md): a DRM card's `device` is its PCI device's sysfs directory. Constructed here, and said so: the
`DRIVER=amdgpu` line is taken out of the recorded uevent for the "not driven" state (the kernel writes
DRIVER= only for a bound device), and the HDMI audio function's files (class, ids from the recorded lspci
excerpt src/radeonlab/sandbox/recorded/sysfs/recorded-values/rx9070xt_acer_lspci-nnk_EXCERPT.txt:
"Audio device [0403] ... [1002:ab40]").
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from radeonlab.roles.gpu.facts import AmdPciGpus
from radeonlab.roles.rocm.defaults import DEFAULTS
from radeonlab.roles.rocm.driver import manual_steps, plan_driver, secure_boot_warning
from radeonlab.roles.rocm.facts import SecureBootState

DRM = Path(__file__).parents[1] / "fixtures" / "gpu" / "drm"
KERNEL = "6.8.0-48-generic"


def pci_device(root: Path, slot: str, capture: str, driven: bool) -> None:
    device = root / "sys/bus/pci/devices" / slot
    device.mkdir(parents=True)
    for path in (DRM / capture).iterdir():
        text = path.read_text(errors="replace")
        if path.name == "uevent" and not driven:
            text = "".join(line for line in text.splitlines(True) if not line.startswith("DRIVER="))
        (device / path.name).write_text(text)


def run_fact(root: Path) -> list[dict[str, object]]:
    fact = AmdPciGpus()
    out = subprocess.run(["sh", "-c", fact.command(sysfs_root=str(root))], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    return fact.process(lines) if lines else fact.default()


def test_an_undriven_card_is_found_and_named_and_its_audio_function_is_not(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:03:00.0", "lact-rx7900xtx-card0", driven=False)
    audio = tmp_path / "sys/bus/pci/devices/0000:03:00.1"
    audio.mkdir()
    for name, value in {"vendor": "0x1002", "device": "0xab40", "class": "0x040300"}.items():
        (audio / name).write_text(value + "\n")
    other = tmp_path / "sys/bus/pci/devices/0000:00:02.0"  # another vendor's VGA device
    other.mkdir()
    (other / "vendor").write_text("0x8086\n")
    (other / "class").write_text("0x030000\n")
    # the LACT capture has no `device`/`revision` files: ids from uevent's PCI_ID, so the chip is named
    assert run_fact(tmp_path) == [
        {
            "pci_slot": "0000:03:00.0",
            "device_id": 0x744C,
            "revision": None,
            "name": "Navi 31 (RX 7900 XTX / XT / GRE)",
            "apu": False,
            "driver": None,
        }
    ]


def test_a_driven_apu_is_found_with_its_driver(tmp_path: Path) -> None:
    pci_device(tmp_path, "0000:c4:00.0", "lact-phoenix-card1", driven=True)
    [gpu] = run_fact(tmp_path)
    assert (gpu["name"], gpu["apu"], gpu["driver"]) == ("AMD Radeon 780M Graphics", True, "amdgpu")


def test_no_pci_tree_is_no_gpu(tmp_path: Path) -> None:
    assert run_fact(tmp_path) == []


RX7900 = {"pci_slot": "0000:03:00.0", "name": "AMD Radeon RX 7900 XTX", "apu": False}
STRIX = {"pci_slot": "0000:c1:00.0", "name": "AMD Radeon 8060S Graphics", "apu": True}


@pytest.mark.parametrize(
    ("distro", "gpus", "packages"),
    [
        (
            "ubuntu-24",
            [RX7900],
            [
                "linux-generic-hwe-24.04",
                f"linux-headers-{KERNEL}",
                f"linux-modules-extra-{KERNEL}",
                "amdgpu-dkms",
            ],
        ),
        (
            "ubuntu-22",
            [RX7900],
            [
                "linux-generic-hwe-22.04",
                f"linux-headers-{KERNEL}",
                f"linux-modules-extra-{KERNEL}",
                "amdgpu-dkms",
            ],
        ),
        ("ubuntu-26", [RX7900], [f"linux-headers-{KERNEL}", f"linux-modules-extra-{KERNEL}", "amdgpu-dkms"]),
        # Ryzen APU alone: the OEM kernel, the inbox driver (no amdgpu-dkms)
        (
            "ubuntu-24",
            [STRIX],
            ["linux-oem-24.04a", f"linux-headers-{KERNEL}", f"linux-modules-extra-{KERNEL}"],
        ),
        ("ubuntu-26", [STRIX], [f"linux-headers-{KERNEL}", f"linux-modules-extra-{KERNEL}"]),
        # an APU beside a card: the card's path (amdgpu-dkms drives both)
        (
            "ubuntu-24",
            [STRIX, RX7900],
            [
                "linux-generic-hwe-24.04",
                f"linux-headers-{KERNEL}",
                f"linux-modules-extra-{KERNEL}",
                "amdgpu-dkms",
            ],
        ),
    ],
)
def test_driver_plan_per_distro_and_part(distro: str, gpus: list[dict], packages: list[str]) -> None:
    plan = plan_driver(distro, KERNEL, gpus, DEFAULTS)
    assert list(plan.packages) == packages
    assert plan.dkms == ("amdgpu-dkms" in packages)


@pytest.mark.parametrize(
    ("distro", "gpus"), [("debian-12", [RX7900]), ("debian-13", [STRIX]), ("ubuntu-22", [STRIX])]
)
def test_no_documented_path_is_one_line_refusal(distro: str, gpus: list[dict]) -> None:
    with pytest.raises(ValueError, match="AMD documents no kernel or driver path") as refused:
        plan_driver(distro, "6.1.0-40-amd64", gpus, DEFAULTS)
    assert "\n" not in str(refused.value) and "gpu_cpu_only" in str(refused.value)


def test_manual_line_names_every_package_and_the_reboot() -> None:
    line = manual_steps(plan_driver("ubuntu-24", KERNEL, [RX7900], DEFAULTS))
    assert "\n" not in line
    assert (
        "sudo apt-get install linux-generic-hwe-24.04 linux-headers-6.8.0-48-generic "
        "linux-modules-extra-6.8.0-48-generic amdgpu-dkms` and reboot" in line
    )
    assert "rocm_allow_reboot: true" in line and "amdgpu repository" in line


def test_secure_boot_warns_for_dkms_only() -> None:
    card = plan_driver("ubuntu-24", KERNEL, [RX7900], DEFAULTS)
    apu = plan_driver("ubuntu-24", KERNEL, [STRIX], DEFAULTS)
    assert "MOK" in (secure_boot_warning(True, card) or "")
    assert secure_boot_warning(False, card) is None and secure_boot_warning(None, card) is None
    assert secure_boot_warning(True, apu) is None


@pytest.mark.parametrize(
    ("output", "state"),
    [
        (["SecureBoot enabled"], True),
        (["SecureBoot disabled"], False),
        (["efivar 1"], True),
        (["efivar 0"], False),
        ([], None),
    ],
)
def test_secure_boot_fact(output: list[str], state: bool | None) -> None:
    assert SecureBootState().process(output) is state
