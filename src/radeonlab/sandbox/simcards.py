"""SIMULATED Radeon cards for sandbox hosts: sysfs trees and device nodes built from recorded real cards.

A sandbox host shares this machine's kernel, which has no AMD GPU. Each host therefore gets a plain
directory of its own bind-mounted (read-only inside the host) over `/sys/class`, holding what the GPU facts
read on a real workstation:

  /sys/class/kfd/kfd/topology/nodes/0/properties   CPU node (gfx_target_version 0)
  /sys/class/kfd/kfd/topology/nodes/1/properties   the GPU node (absent with no card)
  /sys/class/drm/card0/device/{vendor,device,revision,subsystem_vendor,subsystem_device,uevent,
                               mem_info_vram_total,mem_info_vram_used,hwmon/hwmon0/temp1_input}
  /sys/class/drm/renderD128 (device -> ../card0/device), /sys/class/hwmon/hwmon0 -> the card's hwmon

and stand-in device nodes /dev/kfd, /dev/dri/card0, /dev/dri/renderD128. Because the directory is a bind
mount, `write_sysclass` can rewrite it while the host runs (a card swap without a reboot).

Every value comes from a recording under tests/fixtures/ (see tests/fixtures/SOURCES.md) unless the card's
`derived` entry names it: those fields were not recorded for that card and were derived from the nearest
recording plus the public fact given there. Nothing here is presented as a capture it is not.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "recorded" / "sysfs"

RENDER_MINOR = 128  # the sandbox card is card0 / renderD128, as for a single-GPU workstation
# Stand-in device numbers: char 1:3 is /dev/null, so opening a simulated node does nothing harmful, while
# its owner/group/mode make permission checks (group `render`, `video`) behave as on a real host.
SIMULATED_DEVICE_NUMBER = (1, 3)
# owner group and mode of each node as udev creates them on Ubuntu (60-drm.rules / the amdgpu kfd rule)
DEVICE_NODES = {
    "dev/kfd": ("render", 0o660),
    "dev/dri/card0": ("video", 0o660),
    "dev/dri/renderD128": ("render", 0o660),
}

# The card table: one dict, data only. "kfd_node" is a fixture file; "kfd_changes" are the KFD property
# values set over it; "derived" names every value that is not a recording for this card, and why.
CARDS: dict[str, dict[str, Any]] = {
    "rx7900xtx": {
        "name": "AMD Radeon RX 7900 XTX",
        "gfx": "gfx1100",
        "kfd_node": "kfd/rx7900xtx_node1_tinygrad-mock_TEMPLATED.properties",
        "kfd_changes": {"drm_render_minor": RENDER_MINOR},
        "device_uevent": "drm/rx7900xtx/device_uevent",  # LACT rx7900xtx: PCI_ID 1002:744C, 1DA2:E471
        "vendor": "0x1002",
        "device": "0x744c",
        "revision": "0xc8",  # lact cli info (PowerColor 7900 XTX): 0x1002:0x744C:0xC8
        "subsystem_vendor": "0x1da2",
        "subsystem_device": "0xe471",
        "vram_total": 25753026560,  # 24560 MiB: lact cli info "VRAM Size: 24560 MiB"
        "vram_used": 1572745216,
        "temp1_input": "drm/rx7900xtx/hwmon_temp1_input",
        # plain rocm-smi of an idle RX 7900 XTX (standins/recorded/rocm-smi/rx7900xtx_rocm6.1.0_concise_no-
        # marketing-name.txt): "GPU%" 0%, "Power (Avg)" 10.0W, put in amdgpu's files for the same readings
        "gpu_busy_percent": 0,
        "power1_average": 10000000,  # microwatts, as hwmon counts them
        "gpu_id": 48161,
        "derived": {
            "kfd_changes.drm_render_minor": "the recording holds a Python placeholder; 128 = renderD128",
            "vram_used": "not recorded for this card; the RX 6700 XT's recorded idle use (rocm-smi)",
            "gpu_id": "not recorded (a hash the kernel computes); an arbitrary stand-in",
        },
    },
    "rx6700xt": {
        "name": "AMD Radeon RX 6700 XT",
        "gfx": "gfx1031",
        "kfd_node": "kfd/rx7900xtx_node1_tinygrad-mock_TEMPLATED.properties",
        "kfd_changes": {
            "drm_render_minor": RENDER_MINOR,
            "gfx_target_version": 100301,  # gfx1031
            "device_id": 0x73DF,  # 29663, rocminfo "Chip ID: 29663(0x73df)"
            "simd_count": 80,  # 2 SIMDs x 40 CUs (rocminfo "Compute Unit: 40")
        },
        "device_uevent": None,  # no sysfs capture of a 6700 XT: written from the fields below
        "pci_slot": "0000:07:00.0",  # rocm-smi "PCI Bus"
        "vendor": "0x1002",
        "device": "0x73df",  # rocm-smi "Device ID"
        "revision": "0xc1",  # rocm-smi "Device Rev"
        "subsystem_vendor": "0x1002",  # rocm-smi "Card Vendor": AMD
        "subsystem_device": "0x6601",  # rocm-smi "Subsystem ID"
        "vram_total": 12868124672,  # rocm-smi "VRAM Total Memory (B)"
        "vram_used": 1572745216,  # rocm-smi "VRAM Total Used Memory (B)"
        "temp1_input": 45000,  # rocm-smi "Temperature (Sensor edge) (C)": "45.0"
        "gpu_busy_percent": 0,  # rocm-smi "GPU use (%)": "0"
        "power1_average": 6000000,  # rocm-smi "Average Graphics Package Power (W)": "6.0" (in microwatts)
        "gpu_id": 5234,
        "derived": {
            "kfd_node": "no KFD capture of a 6700 XT: the RX 7900 XTX node with gfx_target_version, "
            "device_id, simd_count, drm_render_minor changed; every other field is the 7900 XTX's",
            "device_uevent": "composed in the kernel's format from the rocm-smi values",
            "gpu_id": "not recorded; an arbitrary stand-in",
        },
    },
    "rx9070xt": {
        "name": "AMD Radeon RX 9070 XT",
        "gfx": "gfx1201",
        "kfd_node": "kfd/rx7900xtx_node1_tinygrad-mock_TEMPLATED.properties",
        "kfd_changes": {
            "drm_render_minor": RENDER_MINOR,
            "gfx_target_version": 120001,  # gfx1201
            "device_id": 0x7550,  # 30032, rocminfo "Chip ID: 30032(0x7550)"
            "simd_count": 128,  # 2 SIMDs x 64 CUs (rocminfo "Compute Unit: 64", "SIMDs per CU: 2")
        },
        "device_uevent": "drm/rx9070xt/device_uevent",  # LACT rx9070xt: PCI_ID 1002:7550, 148C:2435
        "vendor": "0x1002",
        "device": "0x7550",
        "revision": "0xc0",  # lspci -nnk of an Acer RX 9070 XT: "rev c0"
        "subsystem_vendor": "0x148c",
        "subsystem_device": "0x2435",
        "vram_total": 17095983104,  # rocminfo GLOBAL pool "Size: 16695296(0xfec000) KB"
        "vram_used": 1572745216,
        "temp1_input": "drm/rx9070xt/hwmon_temp1_input",
        "gpu_busy_percent": "drm/rx9070xt/gpu_busy_percent",  # amdgpu-sysfs-rs rx9070xt capture
        # plain rocm-smi of an RX 9070 XT (standins/recorded/rocm-smi/rx9070xt_rocm7.13_concise_new-layout_
        # EXCERPT.txt): "Power (Avg)" 32.0W, in microwatts as hwmon counts them
        "power1_average": 32000000,
        "gpu_id": 61922,
        "derived": {
            "kfd_node": "no KFD capture of a 9070 XT: the RX 7900 XTX node with gfx_target_version, "
            "device_id, simd_count, drm_render_minor changed; every other field is the 7900 XTX's",
            "revision": "from a different board (Acer) with the same GPU",
            "vram_used": "not recorded for this card; the RX 6700 XT's recorded idle use (rocm-smi)",
            "gpu_id": "not recorded; an arbitrary stand-in",
        },
    },
    # Strix Halo (Ryzen AI Max+ 395, Radeon 8060S, gfx1151): no sysfs capture of one exists in the shared
    # fixtures or a public source found, so it is DERIVED from the nearest real APU capture (LACT's Strix
    # Point, gfx1150) and the Strix Halo recordings named below (tests/fixtures/SOURCES.md).
    "strixhalo": {
        "name": "AMD Radeon 8060S Graphics",
        "gfx": "gfx1151",
        "kfd_node": "kfd/lact_strixpoint_node1.properties",
        "kfd_changes": {
            "drm_render_minor": RENDER_MINOR,
            "gfx_target_version": 110501,  # gfx1151 (rocminfo ROCm/ROCm#5817: "gfx1151")
            "device_id": 0x1586,  # 5510, rocminfo ROCm/ROCm#5817 "Chip ID: 5510(0x1586)"
            "simd_count": 80,  # 2 SIMDs x 40 CUs (same rocminfo: "Compute Unit: 40", "SIMDs per CU: 2")
        },
        "device_uevent": "drm/strixpoint/device_uevent",  # LACT strixpoint card1 (PCI_SLOT 0000:c1:00.0)
        "vendor": "0x1002",
        "device": "0x1586",
        "revision": "0xc1",  # amdgpu.ids: (0x1586, 0xC1) = "AMD Radeon 8060S Graphics"
        "subsystem_vendor": "0x17aa",
        "subsystem_device": "0x3801",
        "vram_total": 536870912,  # the 512 MiB carve-out of the LACT Strix Point capture
        "vram_used": 514580480,  # LACT Strix Point capture
        "gtt_total": 67148152832,  # 64038 MiB: total_memory torch reported on an 8060S (torch fixture)
        "gpu_busy_percent": "drm/strixpoint/gpu_busy_percent",
        "temp1_input": "drm/strixpoint/hwmon_temp1_input",
        "gpu_id": 40112,
        "derived": {
            "kfd_node": "the LACT Strix Point (gfx1150) node with gfx_target_version, device_id, simd_count, "
            "drm_render_minor changed; every other field is Strix Point's",
            "device_uevent": "Strix Point's uevent (PCI_ID 1002:150E): the device/revision files say 0x1586",
            "revision": "amdgpu.ids' revision for the 8060S; not from a capture",
            "vram_total": "Strix Point's 512 MiB carve-out; a Strix Halo's BIOS may set 512 MiB to 96 GiB",
            "gtt_total": "torch's total_memory=64038MB on an 8060S (torch/strixhalo_8060s_..._torch2.11-"
            "rocm7.13_EXCERPT.txt) taken as the GTT the kernel reports; mem_info_gtt_total not recorded",
            "gpu_busy_percent": "Strix Point's",
            "gpu_id": "not recorded; an arbitrary stand-in",
        },
    },
}


def _fixture(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def kfd_properties(card: str) -> str:
    """The GPU node's properties file for `card`: the fixture with the card's `kfd_changes` applied."""
    spec = CARDS[card]
    # DERIVED for every card: the KFD node's PCI location must name the drm device's PCI slot, as on a real
    # machine (the recorded node and the recorded uevent come from different machines).
    changes = {"location_id": str(_location_id(_pci_slot(spec))), "domain": "0"}
    changes.update({k: str(v) for k, v in spec["kfd_changes"].items()})
    lines = []
    for line in _fixture(spec["kfd_node"]).splitlines():
        key = line.split(" ", 1)[0]
        lines.append(f"{key} {changes.pop(key)}" if key in changes else line)
    if changes:
        raise ValueError(f"{card}: kfd_changes name keys absent from {spec['kfd_node']}: {sorted(changes)}")
    return "\n".join(lines) + "\n"


def _pci_slot(spec: dict[str, Any]) -> str:
    if spec["device_uevent"]:
        for line in _fixture(spec["device_uevent"]).splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                return line.split("=", 1)[1]
    return spec["pci_slot"]


def _location_id(slot: str) -> int:
    """PCI slot "0000:03:00.0" -> KFD location_id (bus << 8 | device << 3 | function)."""
    _domain, bus, devfn = slot.split(":")
    dev, fn = devfn.split(".")
    return int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)


def _device_uevent(spec: dict[str, Any]) -> str:
    if spec["device_uevent"]:
        return _fixture(spec["device_uevent"])
    ven, dev = spec["vendor"][2:].upper(), spec["device"][2:].upper()
    sven, sdev = spec["subsystem_vendor"][2:].upper(), spec["subsystem_device"][2:].upper()
    return (
        f"DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_ID={ven}:{dev}\nPCI_SUBSYS_ID={sven}:{sdev}\n"
        f"PCI_SLOT_NAME={spec['pci_slot']}\n"
        f"MODALIAS=pci:v0000{ven}d0000{dev}sv0000{sven}sd0000{sdev}bc03sc00i00\n"
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_sysclass(dest: Path, card: str | None) -> None:
    """Fill `dest` (the host's /sys/class stand-in) for `card` (None: a machine with no AMD GPU).

    The directory itself is kept (it is the source of a live bind mount); only its contents change.
    """
    if card is not None and card not in CARDS:
        raise ValueError(f"unknown simulated card {card!r}; known: {', '.join(CARDS)}")
    dest.mkdir(parents=True, exist_ok=True)
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    # The KFD driver is loaded on any amdgpu-capable kernel; with no GPU the topology holds the CPU only.
    kfd = dest / "kfd" / "kfd"
    _write(kfd / "dev", _fixture("kfd/lact_phoenix_kfd_dev"))
    _write(kfd / "uevent", _fixture("kfd/lact_phoenix_kfd_uevent"))
    topo = kfd / "topology"
    _write(topo / "generation_id", _fixture("kfd/lact_phoenix_generation_id"))
    _write(topo / "system_properties", _fixture("kfd/lact_phoenix_system_properties"))
    _write(topo / "nodes" / "0" / "properties", _fixture("kfd/lact_phoenix_node0.properties"))
    _write(topo / "nodes" / "0" / "gpu_id", "0\n")
    _write(topo / "nodes" / "0" / "name", "\n")
    (dest / "drm").mkdir()
    (dest / "hwmon").mkdir()
    if card is None:
        return
    spec = CARDS[card]
    node1 = topo / "nodes" / "1"
    _write(node1 / "properties", kfd_properties(card))
    _write(node1 / "gpu_id", f"{spec['gpu_id']}\n")
    _write(node1 / "name", "ip discovery\n")  # as in the LACT Phoenix capture (IP-discovery ASICs)
    card0 = dest / "drm" / "card0"
    device = card0 / "device"
    for key in ("vendor", "device", "revision", "subsystem_vendor", "subsystem_device"):
        _write(device / key, f"{spec[key]}\n")
    _write(device / "uevent", _device_uevent(spec))
    _write(device / "mem_info_vram_total", f"{spec['vram_total']}\n")
    _write(device / "mem_info_vram_used", f"{spec['vram_used']}\n")
    if "gtt_total" in spec:
        _write(device / "mem_info_gtt_total", f"{spec['gtt_total']}\n")
    busy = spec.get("gpu_busy_percent")
    if busy is not None:  # a recorded file, or a value another tool recorded for the card
        _write(device / "gpu_busy_percent", f"{busy}\n" if isinstance(busy, int) else _fixture(busy))
    # device/drm/ lists the card's drm minors, as the kernel does: GPU detection reads the render minor here
    (device / "drm" / "card0").mkdir(parents=True)
    (device / "drm" / f"renderD{RENDER_MINOR}").mkdir()
    temp = spec["temp1_input"]
    _write(device / "hwmon" / "hwmon0" / "name", "amdgpu\n")
    _write(
        device / "hwmon" / "hwmon0" / "temp1_input", f"{temp}\n" if isinstance(temp, int) else _fixture(temp)
    )
    if "power1_average" in spec:  # no recording for a card: no file, as on a kernel without the sensor
        _write(device / "hwmon" / "hwmon0" / "power1_average", f"{spec['power1_average']}\n")
    # card0/renderD128 dev + uevent follow the LACT rx9070xt card1 capture (226:1, DEVTYPE=drm_minor)
    _write(card0 / "dev", "226:0\n")
    _write(card0 / "uevent", "MAJOR=226\nMINOR=0\nDEVNAME=dri/card0\nDEVTYPE=drm_minor\n")
    render = dest / "drm" / f"renderD{RENDER_MINOR}"
    _write(render / "dev", f"226:{RENDER_MINOR}\n")
    _write(
        render / "uevent",
        f"MAJOR=226\nMINOR={RENDER_MINOR}\nDEVNAME=dri/renderD{RENDER_MINOR}\nDEVTYPE=drm_minor\n",
    )
    (render / "device").symlink_to("../card0/device")
    (dest / "hwmon" / "hwmon0").symlink_to("../drm/card0/device/hwmon/hwmon0")


def _group_id(root: Path, group: str) -> int:
    for line in (root / "etc" / "group").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == group:
            return int(fields[2])
    raise LookupError(f"group {group!r} missing from {root}/etc/group")


def install_device_nodes(root: Path, card: str | None) -> None:
    """Create (card) or remove (None) the SIMULATED /dev/kfd and /dev/dri nodes in the host at `root`."""
    for rel, (group, mode) in DEVICE_NODES.items():
        path = root / rel
        if path.exists() or path.is_symlink():
            path.unlink()
        if card is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(*SIMULATED_DEVICE_NUMBER))
        os.chown(path, 0, _group_id(root, group))
        os.chmod(path, mode)  # mknod applies the umask


# --- the PCI view, and a card no kernel drives yet ------------------------------------------------------
# /sys/bus/pci/devices/<slot>/ of the card (bind-mounted over the host's, read-only): the files a PCI device
# directory holds, from the same card table (a DRM card's `device` is this very directory). `class` is the
# VGA class 0x030000 (the uevents' PCI_CLASS=30000). A driven card has the `driver` link and DRIVER= in its
# uevent; an undriven one (the running kernel has no driver for it) has neither, no KFD class and no DRM
# card: what sysfs shows before amdgpu-dkms and a reboot. SIMULATED from the recordings, not a capture.
BOOT_DRIVEN = "boot-driven"  # <host dir>/boot-driven/{class,pci,devices.json}: the trees after the driver
SIMULATED_DKMS_MARKER = "usr/share/radeonlab-simulated/amdgpu-dkms"  # what the stand-in amdgpu-dkms installs


def write_syspci(dest: Path, card: str | None, driven: bool = True) -> None:
    """Fill `dest` (the host's /sys/bus/pci/devices stand-in) for `card`; the directory itself is kept
    (the source of a bind mount)."""
    dest.mkdir(parents=True, exist_ok=True)
    for child in dest.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    if card is None:
        return
    spec = CARDS[card]
    device = dest / _pci_slot(spec)
    for key in ("vendor", "device", "revision", "subsystem_vendor", "subsystem_device"):
        _write(device / key, f"{spec[key]}\n")
    _write(device / "class", "0x030000\n")
    uevent = _device_uevent(spec)
    if not driven:
        uevent = "".join(line for line in uevent.splitlines(True) if not line.startswith("DRIVER="))
    _write(device / "uevent", uevent)
    if driven:
        (device / "driver").symlink_to("../../../bus/pci/drivers/amdgpu")


def write_card_state(host_dir: Path, card: str | None, driven: bool = True) -> None:
    """The host's /sys/class (host_dir/sysclass) and PCI devices (host_dir/syspci) for `card`; undriven, the
    driven trees wait in host_dir/boot-driven for the SIMULATED reboot (host_init.py) to mount them."""
    boot = host_dir / BOOT_DRIVEN
    if boot.exists():
        shutil.rmtree(boot)
    write_syspci(host_dir / "syspci", card, driven)
    write_sysclass(host_dir / "sysclass", card)
    if driven or card is None:
        return
    shutil.rmtree(host_dir / "sysclass" / "kfd")  # no amdgpu: no KFD class, no DRM card
    shutil.rmtree(host_dir / "sysclass" / "drm")
    (host_dir / "sysclass" / "drm").mkdir()
    for link in (host_dir / "sysclass" / "hwmon").iterdir():
        link.unlink()
    write_sysclass(boot / "class", card)
    write_syspci(boot / "pci", card, True)
    nodes = [{"path": "/" + rel, "group": group, "mode": mode} for rel, (group, mode) in DEVICE_NODES.items()]
    (boot / "devices.json").write_text(json.dumps(nodes) + "\n")
