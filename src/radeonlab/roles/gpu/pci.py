"""AMD GPUs as the PCI bus lists them, whether or not a kernel driver drives them.

KFD (roles/gpu/sysfs.py) lists a GPU only once the amdgpu driver drives it. A card the running kernel cannot
drive yet (a new card on an older kernel, no amdgpu module installed) is still a PCI device: this finds it,
so that the deploy can run AMD's kernel and driver steps instead of stopping at "no AMD GPU".

Files read, relative to the sysfs root (nothing else):
    sys/bus/pci/devices/*/{vendor,device,revision,class,uevent}   and the name of the `driver` link
A PCI device's sysfs directory is the very one a DRM card's `device` link points at, so the recorded
`drm/card*/device` captures (tests/fixtures/gpu/drm) are PCI device captures too.

Kept: vendor 0x1002 (AMD) and PCI base class 0x03 (display controller: 0x0300 VGA, 0x0380 other display;
the PCI-SIG class codes as lspci prints them, "VGA compatible controller [0300]"). The card's HDMI audio
function (class 0x0403, same vendor) is left out.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from radeonlab.roles.gpu import cards

DISPLAY_BASE_CLASS = 0x03

# PCI device ids of CHIP_NAMES (table.py: pci.ids chips, libdrm amdgpu.ids names) that are integrated GPUs of
# Ryzen APUs: AMD's install path differs for them (OEM kernel on Ubuntu 24.04, the inbox driver).
APU_DEVICE_IDS = frozenset({0x13C0, 0x150E, 0x1586, 0x15BF, 0x163F, 0x164E, 0x1681, 0x1900})


@dataclass(frozen=True)
class PciGpu:
    """One AMD display device on the PCI bus."""

    pci_slot: str
    device_id: int | None
    revision: int | None
    name: str
    apu: bool
    driver: str | None  # the bound kernel driver ("amdgpu"), None when no driver drives the device

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def dump_command(root: str = "/") -> str:
    """The shell command that prints every AMD PCI device under `root` (a filesystem root or a sysfs tree)."""
    base = shlex.quote(root.rstrip("/") or "/")
    return (
        f"r={base}; "
        '[ -d "$r/bus" ] && [ ! -d "$r/sys/bus" ] && s="$r" || s="${r%/}/sys"; '
        'for d in "$s"/bus/pci/devices/*; do '
        '[ -r "$d/vendor" ] || continue; '
        'case "$(tr -d \'\\000\\n\' < "$d/vendor")" in 0x1002) ;; *) continue;; esac; '
        'echo "@pci ${d##*/}"; '
        "for f in vendor device revision class; do "
        '[ -r "$d/$f" ] && { printf \'%s \' "$f"; tr -d \'\\000\\n\' < "$d/$f"; echo; }; '
        "done; "
        '[ -r "$d/uevent" ] && { tr -d \'\\000\' < "$d/uevent"; echo; }; '
        '[ -L "$d/driver" ] && { l=$(readlink "$d/driver"); echo "driver_link ${l##*/}"; }; '
        "done; true"
    )


def _int(value: str | None, base: int = 0) -> int | None:
    if not value:
        return None
    try:
        return int(value.strip(), base)
    except ValueError:
        return None


def _sections(lines: Iterable[str]) -> dict[str, dict[str, str]]:
    devices: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in lines:
        line = raw.replace("\0", "").strip()
        if not line:
            continue
        if line.startswith("@pci "):
            current = devices.setdefault(line.split(None, 1)[1].lower(), {})
        elif current is not None:
            key, sep, value = line.partition("=") if "=" in line.split(" ", 1)[0] else line.partition(" ")
            if sep:
                current[key.strip()] = value.strip()
    return devices


def parse_dump(lines: Iterable[str]) -> list[PciGpu]:
    """`dump_command` output -> the AMD display devices, in PCI slot order."""
    found = []
    for slot, props in sorted(_sections(lines).items()):
        pci_vendor, _, pci_device = props.get("PCI_ID", "").partition(":")
        vendor = _int(props.get("vendor")) or _int(pci_vendor, 16)
        # `class` is "0x030000"; uevent's PCI_CLASS is the same number in bare hex ("30000")
        pci_class = _int(props.get("class")) or _int(props.get("PCI_CLASS"), 16)
        if vendor != cards.AMD_VENDOR_ID or pci_class is None or pci_class >> 16 != DISPLAY_BASE_CLASS:
            continue
        device_id = _int(props.get("device")) or _int(pci_device, 16)
        revision = _int(props.get("revision"))
        found.append(
            PciGpu(
                pci_slot=slot,
                device_id=device_id,
                revision=revision,
                name=cards.card_name(device_id, revision),
                apu=device_id in APU_DEVICE_IDS,
                driver=props.get("DRIVER") or props.get("driver_link") or None,
            )
        )
    return found
