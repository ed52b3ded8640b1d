"""Read AMD GPUs from sysfs: one shell command dumps the files, one parser turns the dump into `Gpu`s.

The pyinfra fact (`radeonlab.roles.gpu.facts.RadeonGpus`) runs `dump_command` on a host; `read_sysfs` runs
the very same
command on this machine (for `radeonlab gpus --sysfs ROOT` and for recorded trees). Both parse with
`parse_dump`, so there is one parser.

Files read, relative to the sysfs root (nothing else):
    sys/class/kfd/kfd/topology/nodes/*/properties
    sys/class/drm/card*/device/{vendor,device,revision,mem_info_vram_total,mem_info_vram_used,
                                mem_info_gtt_total,uevent}
    sys/class/drm/card*/device/drm/renderD*   (only the names: the render minor of each card)
Connector directories (card0-DP-1) are skipped.

Dump format: a "@node <N>" or "@card <cardN>" line opens a section; KFD lines are "key value", card lines
"key value" (the single-value files) or "KEY=VALUE" (uevent). NUL bytes are deleted by the command and again
by the parser (some captures are NUL-padded to 4096 bytes).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TypedDict

from radeonlab.roles.gpu import cards

CARD_FILES = (
    "vendor",
    "device",
    "revision",
    "mem_info_vram_total",
    "mem_info_vram_used",
    "mem_info_gtt_total",
)


def dump_command(root: str = "/") -> str:
    """The shell command that prints every KFD node and DRM card under `root`; prints nothing when absent.

    `root` is a filesystem root (`/`, reading /sys/class/...) or a sysfs tree itself (`/sys`, or a recorded
    tree shaped like it: class/kfd/... directly under it)."""
    base = shlex.quote(root.rstrip("/") or "/")
    files = " ".join(CARD_FILES)
    return (
        f"r={base}; "
        '[ -d "$r/class" ] && [ ! -d "$r/sys/class" ] && s="$r" || s="${r%/}/sys"; '
        'for n in "$s"/class/kfd/kfd/topology/nodes/*; do '
        '[ -r "$n/properties" ] || continue; '
        'echo "@node ${n##*/}"; tr -d \'\\000\' < "$n/properties"; echo; '
        "done; "
        'for c in "$s"/class/drm/card*; do '
        'case "${c##*/}" in *-*) continue;; esac; '
        'd="$c/device"; '
        '[ -r "$d/uevent" ] || [ -r "$d/vendor" ] || continue; '
        'echo "@card ${c##*/}"; '
        f"for f in {files}; do "
        '[ -r "$d/$f" ] && { printf \'%s \' "$f"; tr -d \'\\000\\n\' < "$d/$f"; echo; }; '
        "done; "
        '[ -r "$d/uevent" ] && { tr -d \'\\000\' < "$d/uevent"; echo; }; '
        'for m in "$d"/drm/renderD*; do [ -e "$m" ] && echo "render_minor ${m##*renderD}"; done; '
        "done; true"
    )


def _int(value: str | None) -> int | None:
    """sysfs numbers: decimal (KFD, mem_info) or 0x-prefixed hex (vendor, device, revision)."""
    if value is None:
        return None
    try:
        return int(value.strip(), 0)
    except ValueError:
        return None


def _sections(lines: Iterable[str]) -> tuple[dict[int, dict[str, str]], dict[str, dict[str, str]]]:
    nodes: dict[int, dict[str, str]] = {}
    cards_: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in lines:
        line = raw.replace("\0", "").strip()
        if not line:
            continue
        if line.startswith("@node "):
            index = _int(line.split(None, 1)[1])
            current = nodes.setdefault(index, {}) if index is not None else None
        elif line.startswith("@card "):
            current = cards_.setdefault(line.split(None, 1)[1], {})
        elif current is not None:
            key, sep, value = line.partition("=") if "=" in line.split(" ", 1)[0] else line.partition(" ")
            if sep:
                current[key.strip()] = value.strip()
    return nodes, cards_


def pci_slot_from_location(location_id: int, domain: int = 0) -> str:
    """KFD location_id (bus << 8 | device << 3 | function) -> PCI_SLOT_NAME: 25600 -> 0000:64:00.0."""
    return f"{domain:04x}:{location_id >> 8:02x}:{(location_id >> 3) & 0x1F:02x}.{location_id & 0x7:x}"


class DrmCard(TypedDict, total=False):
    """What `_amd_cards` reads of one DRM card (a KFD node without a card has none of it)."""

    device: int | None
    revision: int | None
    vram_total: int | None
    vram_used: int | None
    gtt_total: int | None
    pci_slot: str | None
    render_minor: int | None


def _amd_cards(cards_: dict[str, dict[str, str]]) -> dict[str, DrmCard]:
    """DRM cards of AMD's vendor id, with ids from the files or, where those are missing, from uevent."""
    found: dict[str, DrmCard] = {}
    for name, props in cards_.items():
        pci_vendor, _, pci_device = props.get("PCI_ID", "").partition(":")
        vendor = _int(props.get("vendor")) or _int("0x" + pci_vendor if pci_vendor else None)
        if vendor != cards.AMD_VENDOR_ID:
            continue
        found[name] = {
            "device": _int(props.get("device")) or _int("0x" + pci_device if pci_device else None),
            "revision": _int(props.get("revision")),
            "vram_total": _int(props.get("mem_info_vram_total")),
            "vram_used": _int(props.get("mem_info_vram_used")),
            "gtt_total": _int(props.get("mem_info_gtt_total")),
            "pci_slot": props.get("PCI_SLOT_NAME", "").lower() or None,
            "render_minor": _int(props.get("render_minor")),
        }
    return found


def _match_card(node: dict[str, str], amd_cards: dict[str, DrmCard]) -> str | None:
    """The DRM card of a KFD node: by PCI location, else by render minor."""
    location = _int(node.get("location_id"))
    if location:
        slot = pci_slot_from_location(location, _int(node.get("domain")) or 0)
        for name, card in amd_cards.items():
            if card["pci_slot"] == slot:
                return name
    minor = _int(node.get("drm_render_minor"))
    if minor:
        for name, card in amd_cards.items():
            if card["render_minor"] == minor:
                return name
    return None


def parse_dump(lines: Iterable[str], rocm_version: str = cards.FALLBACK_ROCM_VERSION) -> list[cards.Gpu]:
    """`dump_command` output -> the GPUs, in KFD node order. CPU nodes (no SIMDs, gfx_target_version 0) are
    skipped; a GPU node from a kernel without gfx_target_version is kept with gfx None."""
    nodes, cards_ = _sections(lines)
    amd_cards = _amd_cards(cards_)
    gpus: list[cards.Gpu] = []
    for index in sorted(nodes):
        node = nodes[index]
        simd_count = _int(node.get("simd_count")) or 0
        target_version = _int(node.get("gfx_target_version"))
        if simd_count == 0 or target_version == 0:
            continue
        card_name = _match_card(node, amd_cards)
        card: DrmCard = amd_cards.get(card_name, {}) if card_name else {}
        gfx = cards.gfx_from_target_version(target_version)
        device_id = _int(node.get("device_id")) or card.get("device")
        revision = card.get("revision")
        vram_total = card.get("vram_total") or _int(node.get("local_mem_size")) or None
        location = _int(node.get("location_id"))
        igpu = cards.is_igpu(gfx, _int(node.get("cpu_cores_count")) or 0)
        gpus.append(
            cards.Gpu(
                node=index,
                rocr_index=len(gpus),
                card=card_name,
                pci_slot=card.get("pci_slot")
                or (pci_slot_from_location(location, _int(node.get("domain")) or 0) if location else None),
                gfx=gfx,
                gfx_target_version=target_version,
                vendor_id=_int(node.get("vendor_id")) or cards.AMD_VENDOR_ID,
                device_id=device_id,
                revision=revision,
                name=cards.card_name(device_id, revision),
                family=cards.arch_family(gfx),
                vram_total=vram_total,
                vram_used=card.get("vram_used"),
                simd_count=simd_count,
                igpu=igpu,
                bf16=cards.has_bf16(gfx),
                rocm_version=rocm_version,
                native=cards.is_native(gfx, rocm_version),
                override=cards.override_for(gfx, rocm_version),
                supported=cards.is_supported(gfx, rocm_version),
                unique_id=_int(node.get("unique_id")) or None,
                gtt_total=card.get("gtt_total"),
                usable_memory=cards.usable_memory(vram_total, card.get("gtt_total"), igpu),
                render_minor=card.get("render_minor") or _int(node.get("drm_render_minor")),
            )
        )
    return gpus


def read_sysfs(root: Path | str = "/", rocm_version: str = cards.FALLBACK_ROCM_VERSION) -> list[cards.Gpu]:
    """Run `dump_command` on this machine over `root` (a real / or a recorded tree) and parse it."""
    result = subprocess.run(
        ["sh", "-c", dump_command(str(root))],
        capture_output=True,
        text=True,
        errors="replace",
        check=True,
    )
    return parse_dump(result.stdout.splitlines(), rocm_version)


def drm_cards(lines: Iterable[str]) -> dict[str, DrmCard]:
    """The AMD DRM cards in a `dump_command` output (ids, revision, VRAM, PCI slot, render minor)."""
    return _amd_cards(_sections(lines)[1])
