"""What radeonlab knows about AMD GPUs: data tables and pure functions, in one place.

Nothing here reads the machine. `radeonlab.roles.gpu.sysfs` turns sysfs text into `Gpu` records with these
functions;
the ROCm and training roles ask them which override, wheel family or training device a card needs.

Sources (see docs/notes/rocm-facts.md for the field notes they come from):
- gfx names: LLVM AMDGPUUsage processor names; KFD `gfx_target_version` = major*10000 + minor*100 + stepping.
- marketing names: libdrm `data/amdgpu.ids` (the table rocminfo's "Marketing Name" comes from), read from
  github X11Libre/mirror.fdo.drm @06675b4fbede3c8547cf9de09444424672d06066 (a mirror of freedesktop mesa/drm).
- iGPU targets and Core SDK families: ROCm/TheRock cmake/therock_amdgpu_targets.cmake (FAMILY igpu-all, ...).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

# Used until roles/rocm/defaults.py (the ROCm role, DEFAULTS["rocm_version"]) exists: the newest release of
# the legacy repo.radeon.com stream that PyTorch builds wheels for (torch 2.11-2.13 -> 7.2,
# docs/notes/rocm-facts.md).
FALLBACK_ROCM_VERSION = "7.2"

AMD_VENDOR_ID = 0x1002

# ROCm Core SDK ("TheRock", repo.amd.com) starts here; earlier versions are the legacy repo.radeon.com stream.
CORE_SDK_FIRST_VERSION = "7.12"

# Legacy stream: the first ROCm release whose packages carry code for the gfx target itself (no override).
# gfx1030: earliest release checked is 5.6 (rocminfo fixture rx6800xt_gfx1030..._rocm5.6.0 runs it natively);
# gfx1100: "native since ROCm 5.7/6.x"; gfx1101: "native in ROCm 7 lists"; gfx1200/gfx1201: "native since
# 6.4.1"; gfx1150/gfx1151: "native on recent ROCm, forcing 11.5.1 hurts on 7.2+" (all
# docs/notes/rocm-facts.md, Cards).
# Targets missing here (gfx1031, gfx1102, gfx1103, ...) are native in no legacy release.
LEGACY_NATIVE_SINCE: dict[str, str] = {
    "gfx1030": "5.6",
    "gfx1100": "5.7",
    "gfx1101": "7.0",
    "gfx1150": "7.2",
    "gfx1151": "7.2",
    "gfx1200": "6.4.1",
    "gfx1201": "6.4.1",
}

# Core SDK meta packages `amdrocm<ver>-<family>` and the gfx targets each one carries natively. The families
# are from docs/notes/rocm-facts.md; the members are the cards the facts name for each package (gfx110x: RX
# 7900/7800/7700/7600 and W7900/W7800/W7700 = gfx1100-1102; gfx103x: W6800, V620 = gfx1030). TheRock can
# build more (gfx1031, gfx1103, ...), but the shipped package lists were not confirmed to, so those keep
# their override.
CORE_SDK_FAMILIES: dict[str, tuple[str, ...]] = {
    "gfx103x": ("gfx1030",),
    "gfx110x": ("gfx1100", "gfx1101", "gfx1102"),
    "gfx120x": ("gfx1200", "gfx1201"),
    "gfx1150": ("gfx1150",),
    "gfx1151": ("gfx1151",),
}

# gfx prefix -> architecture family; first match wins, so exact names come before their prefixes.
ARCH_BY_GFX_PREFIX: tuple[tuple[str, str], ...] = (
    ("gfx908", "CDNA1"),
    ("gfx90a", "CDNA2"),
    ("gfx940", "CDNA3"),
    ("gfx941", "CDNA3"),
    ("gfx942", "CDNA3"),
    ("gfx950", "CDNA4"),
    ("gfx90", "GCN5 (Vega)"),
    ("gfx80", "GCN3/4"),
    ("gfx101", "RDNA1"),
    ("gfx103", "RDNA2"),
    ("gfx110", "RDNA3"),
    ("gfx115", "RDNA3.5"),
    ("gfx120", "RDNA4"),
)

# Hardware bf16 (WMMA / matrix cores). RDNA2 has none: train in fp16 there (docs/notes/rocm-facts.md, Cards).
BF16_ARCHS = frozenset({"RDNA3", "RDNA3.5", "RDNA4", "CDNA1", "CDNA2", "CDNA3", "CDNA4"})

# HSA_OVERRIDE_GFX_VERSION: the one native target of the same architecture family that a non-native card may
# borrow code from. Only same-major targets: ROCr refuses cross-major overrides (ROCm/rocm-systems #5686) and
# they crash or hang (gfx1201). RDNA1 and RDNA4 have no entry: there is nothing safe to borrow.
OVERRIDE_REFERENCE: dict[str, str] = {
    "RDNA2": "gfx1030",
    "RDNA3": "gfx1100",
    "RDNA3.5": "gfx1100",
}

# Targets that exist only as integrated GPUs (TheRock FAMILY igpu-all; LLVM AMDGPUUsage "APU" for gfx90c,
# gfx902, gfx909, gfx1037). Modern KFD gives an APU's GPU its own node with cpu_cores_count 0 (LACT phoenix/
# strixpoint/vangogh captures), so the KFD node alone does not say "integrated".
APU_GFX = frozenset(
    {"gfx902", "gfx909", "gfx90c", "gfx1033", "gfx1035", "gfx1036", "gfx1037"}
    | {"gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}
)

# (PCI device id, revision) -> marketing name, copied from libdrm amdgpu.ids (mirror commit above) for the
# Radeon cards and APUs radeonlab expects. One device id can cover several cards: only the revision tells them
# apart (744C: C8 = 7900 XTX, CC = 7900 XT, CE = 7900 GRE; the W7900 is 7448, the W7800 745E).
CARD_NAMES: dict[tuple[int, int], str] = {
    (0x73A3, 0x00): "AMD Radeon Pro W6800",
    (0x73A5, 0xC0): "AMD Radeon RX 6950 XT",
    (0x73BF, 0xC0): "AMD Radeon RX 6900 XT",
    (0x73BF, 0xC1): "AMD Radeon RX 6800 XT",
    (0x73BF, 0xC3): "AMD Radeon RX 6800",
    (0x73DF, 0xC0): "AMD Radeon RX 6750 XT",
    (0x73DF, 0xC1): "AMD Radeon RX 6700 XT",
    (0x73DF, 0xC5): "AMD Radeon RX 6700 XT",
    (0x73DF, 0xDF): "AMD Radeon RX 6700",
    (0x73DF, 0xFF): "AMD Radeon RX 6700",
    (0x73EF, 0xC1): "AMD Radeon RX 6650 XT",
    (0x73FF, 0xC1): "AMD Radeon RX 6600 XT",
    (0x73FF, 0xC7): "AMD Radeon RX 6600",
    (0x7448, 0x00): "AMD Radeon Pro W7900",
    (0x7449, 0x00): "AMD Radeon Pro W7800 48GB",
    (0x744C, 0xC8): "AMD Radeon RX 7900 XTX",
    (0x744C, 0xCC): "AMD Radeon RX 7900 XT",
    (0x744C, 0xCE): "AMD Radeon RX 7900 GRE",
    (0x745E, 0xCC): "AMD Radeon Pro W7800",
    (0x7470, 0x00): "AMD Radeon Pro W7700",
    (0x747E, 0xC8): "AMD Radeon RX 7800 XT",
    (0x747E, 0xDB): "AMD Radeon RX 7700",
    (0x747E, 0xFF): "AMD Radeon RX 7700 XT",
    (0x7480, 0x00): "AMD Radeon Pro W7600",
    (0x7480, 0xC0): "AMD Radeon RX 7600 XT",
    (0x7480, 0xCF): "AMD Radeon RX 7600",
    (0x7550, 0xC0): "AMD Radeon RX 9070 XT",
    (0x7550, 0xC2): "AMD Radeon RX 9070 GRE",
    (0x7550, 0xC3): "AMD Radeon RX 9070",
    (0x7551, 0xC0): "AMD Radeon AI PRO R9700",
    (0x7590, 0xC0): "AMD Radeon RX 9060 XT",
    (0x7590, 0xC7): "AMD Radeon RX 9060",
    (0x150E, 0xC1): "AMD Radeon 890M Graphics",
    (0x150E, 0xC4): "AMD Radeon 880M Graphics",
    (0x1586, 0xC1): "AMD Radeon 8060S Graphics",
    (0x1586, 0xC2): "AMD Radeon 8050S Graphics",
    (0x15BF, 0xC1): "AMD Radeon 780M Graphics",
    (0x15BF, 0xDD): "AMD Radeon 780M Graphics",
    (0x1681, 0xC8): "AMD Radeon 680M",
    (0x67DF, 0xE7): "AMD Radeon RX 580 Series",
    (0x687F, 0xC3): "AMD Radeon RX Vega",
}

# PCI device id -> chip and the cards it may be, for when the revision is unknown or not in CARD_NAMES
# (chips from pci.ids as printed by lspci in the recorded captures (tests/fixtures/SOURCES.md), cards from
# amdgpu.ids).
CHIP_NAMES: dict[int, str] = {
    0x73A5: "Navi 21 (RX 6950 XT)",
    0x73BF: "Navi 21 (RX 6900 XT / 6800 XT / 6800)",
    0x73DF: "Navi 22 (RX 6750 XT / 6700 XT / 6700)",
    0x73EF: "Navi 23 (RX 6650 XT)",
    0x73FF: "Navi 23 (RX 6600 XT / 6600)",
    0x7448: "Navi 31 (Radeon Pro W7900)",
    0x744C: "Navi 31 (RX 7900 XTX / XT / GRE)",
    0x745E: "Navi 31 (Radeon Pro W7800)",
    0x747E: "Navi 32 (RX 7800 XT / 7700 XT / 7700)",
    0x7480: "Navi 33 (RX 7600 XT / 7600, Pro W7600)",
    0x7550: "Navi 48 (RX 9070 XT / 9070 / 9070 GRE)",
    0x7551: "Navi 48 (Radeon AI PRO R9700)",
    0x7590: "Navi 44 (RX 9060 XT / 9060)",
    0x13C0: "Granite Ridge (Radeon Graphics)",
    0x150E: "Strix Point (Radeon 890M / 880M)",
    0x1586: "Strix Halo (Radeon 8060S / 8050S / 8040S)",
    0x15BF: "Phoenix (Radeon 780M / 760M / 740M)",
    0x163F: "Van Gogh (Steam Deck APU)",
    0x164E: "Raphael (Radeon Graphics)",
    0x1681: "Rembrandt (Radeon 680M / 660M)",
    0x1900: "Phoenix / Hawk Point (Radeon 780M / 760M)",
    0x6860: "Vega 10 (Instinct MI25 / Pro V340)",
    0x67DF: "Polaris 10/20 (RX 580 / 570 / 480 / 470)",
    0x687F: "Vega 10 (RX Vega 56 / 64)",
    0x740F: "Aldebaran (Instinct MI210)",
}


def version_tuple(version: str) -> tuple[int, ...]:
    """Version string to a comparable tuple: "7.2.4" -> (7, 2, 4), "7.12" -> (7, 12).

    Trailing zeros do not matter: "7.1" == "7.1.0" (AMD publishes a .0 release as "7.1").
    """
    parts = [int(p) for p in str(version).strip().split(".") if p != ""]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def is_core_sdk(rocm_version: str) -> bool:
    """True for ROCm Core SDK releases (7.12 and later), False for the legacy repo.radeon.com stream."""
    return version_tuple(rocm_version) >= version_tuple(CORE_SDK_FIRST_VERSION)


def gfx_from_target_version(target_version: int | None) -> str | None:
    """KFD gfx_target_version -> LLVM target name: 110000 -> gfx1100, 100301 -> gfx1031, 90010 -> gfx90a.

    Minor and stepping are one hex digit each in the name (LLVM's gfx90a, gfx90c). 0 (CPU node) and None
    (kernels before gfx_target_version existed) give None.
    """
    if not target_version:
        return None
    major, minor, stepping = target_version // 10000, target_version // 100 % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def _gfx_parts(gfx: str) -> tuple[int, int, int]:
    digits = gfx.removeprefix("gfx")
    return int(digits[:-2]), int(digits[-2], 16), int(digits[-1], 16)


def hsa_version(gfx: str) -> str:
    """The HSA_OVERRIDE_GFX_VERSION spelling of a target: gfx1030 -> "10.3.0", gfx90a -> "9.0.10"."""
    return ".".join(str(p) for p in _gfx_parts(gfx))


def gfx_from_hsa_version(version: str) -> str:
    """Override value to target: "10.3.0" -> gfx1030, the target whose code the runtime then loads."""
    major, minor, stepping = (int(p) for p in version.split("."))
    return f"gfx{major}{minor:x}{stepping:x}"


def arch_family(gfx: str | None) -> str:
    """gfx1100 -> "RDNA3", gfx1151 -> "RDNA3.5", gfx90a -> "CDNA2"; "unknown" otherwise."""
    if gfx:
        for prefix, arch in ARCH_BY_GFX_PREFIX:
            if gfx.startswith(prefix):
                return arch
    return "unknown"


def has_bf16(gfx: str | None) -> bool:
    """True where the hardware does bf16 (RDNA3, RDNA3.5, RDNA4, CDNA); RDNA2 trains in fp16."""
    return arch_family(gfx) in BF16_ARCHS


def core_sdk_family(gfx: str | None) -> str | None:
    """The Core SDK meta package family that serves a card: gfx1100 -> "gfx110x", gfx1031 -> "gfx103x",
    gfx1151 -> "gfx1151". A card served through an override gets its reference target's family."""
    if not gfx:
        return None
    if gfx in CORE_SDK_FAMILIES:
        return gfx
    family = gfx[:-1] + "x"
    return family if family in CORE_SDK_FAMILIES else None


def is_native(gfx: str | None, rocm_version: str) -> bool:
    """Does this ROCm release ship code for this exact gfx target?"""
    if not gfx:
        return False
    if is_core_sdk(rocm_version):
        return any(gfx in members for members in CORE_SDK_FAMILIES.values())
    since = LEGACY_NATIVE_SINCE.get(gfx)
    return since is not None and version_tuple(rocm_version) >= version_tuple(since)


def override_for(gfx: str | None, rocm_version: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION a card needs on this ROCm, or None.

    None for native cards (an override on a native card hurts) and for cards with no same-family, same-major
    native target on this ROCm: those are unsupported (see `is_supported`), never overridden across majors.
    """
    if not gfx or is_native(gfx, rocm_version):
        return None
    reference = OVERRIDE_REFERENCE.get(arch_family(gfx))
    if reference is None or reference == gfx or not is_native(reference, rocm_version):
        return None
    if _gfx_parts(reference)[0] != _gfx_parts(gfx)[0]:  # never cross-major, whatever the table says
        return None
    return hsa_version(reference)


def override_for_wheel(gfx: str | None, wheel_targets: Iterable[str]) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION a card needs with a torch build carrying code for `wheel_targets`, or None.

    The torch wheel brings its own ROCm libraries, so what matters for training is which targets the wheel
    has code for: none for a card it carries (AMD's multi-arch wheels carry gfx1031-1036 and gfx1103:
    no override there), else the same-family reference target (10.3.0 for RDNA2, 11.0.0 for RDNA3/3.5) when
    the wheel has it and it is the same major (AMD's guard, ROCm/rocm-systems#5686, refuses cross-major
    overrides: they crashed gfx1151/gfx1201), else None (the card is then not usable with that wheel).
    """
    targets = set(wheel_targets)
    if not gfx or gfx in targets:
        return None
    reference = OVERRIDE_REFERENCE.get(arch_family(gfx))
    if reference is None or reference == gfx or reference not in targets:
        return None
    if _gfx_parts(reference)[0] != _gfx_parts(gfx)[0]:
        return None
    return hsa_version(reference)


def is_supported(gfx: str | None, rocm_version: str) -> bool:
    """Usable on this ROCm: natively or through a same-major override."""
    return is_native(gfx, rocm_version) or override_for(gfx, rocm_version) is not None


def is_igpu(gfx: str | None, cpu_cores_count: int = 0) -> bool:
    """Integrated GPU: an APU-only gfx target, or an old combined CPU+GPU KFD node (cpu_cores_count > 0)."""
    return cpu_cores_count > 0 or gfx in APU_GFX


def card_name(device_id: int | None, revision: int | None) -> str:
    """Marketing name when (device id, revision) names one card, else the chip with its candidate cards."""
    if device_id is None:
        return "unknown AMD GPU"
    if revision is not None and (device_id, revision) in CARD_NAMES:
        return CARD_NAMES[(device_id, revision)]
    return CHIP_NAMES.get(device_id, f"AMD GPU [1002:{device_id:04x}]")


@dataclass
class Gpu:
    """One GPU as KFD and DRM describe it, with what radeonlab concludes for one ROCm version."""

    node: int  # KFD topology node number
    rocr_index: int  # position among GPU nodes: the index ROCR_VISIBLE_DEVICES uses
    card: str | None  # DRM card directory (card0), None if no card matched
    pci_slot: str | None  # 0000:03:00.0
    gfx: str | None
    gfx_target_version: int | None
    vendor_id: int
    device_id: int | None
    revision: int | None
    name: str
    family: str
    vram_total: int | None  # bytes
    vram_used: int | None  # bytes
    simd_count: int
    igpu: bool
    bf16: bool
    rocm_version: str
    native: bool
    override: str | None  # HSA_OVERRIDE_GFX_VERSION for rocm_version, None when not needed or not possible
    supported: bool
    unique_id: int | None  # KFD unique_id; 0 (APUs) becomes None
    gtt_total: int | None = None  # bytes the GPU can map from system RAM (mem_info_gtt_total)
    usable_memory: int | None = (
        None  # bytes for tensors: VRAM, or carve-out + GTT on an APU (usable_memory())
    )
    # DRM render node minor (/dev/dri/renderD<minor>): the device file Slurm's gres.conf names
    render_minor: int | None = None

    @property
    def uuid(self) -> str | None:
        """The GPU-<hex> form rocminfo prints and ROCR_VISIBLE_DEVICES accepts."""
        return f"GPU-{self.unique_id:016x}" if self.unique_id else None

    @property
    def runs_as(self) -> str | None:
        """The gfx target whose code this card runs on this ROCm (its own, or the override's)."""
        if self.override:
            return gfx_from_hsa_version(self.override)
        return self.gfx if self.native else None

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "uuid": self.uuid, "runs_as": self.runs_as}


def rocm_arch_list(gpus: Iterable[Gpu]) -> str:
    """PYTORCH_ROCM_ARCH: the targets these GPUs run as, sorted and ';'-joined (unsupported: left out)."""
    return ";".join(sorted({g.runs_as for g in gpus if g.runs_as}))


def usable_memory(vram_total: int | None, gtt_total: int | None, igpu: bool) -> int | None:
    """Memory a GPU can hold tensors in. A discrete card: its VRAM. An APU: its VRAM carve-out plus the GTT
    the kernel lets it map (mem_info_gtt_total): on Strix Halo and other unified-memory APUs most of a
    model lives in GTT, so a 512 MiB carve-out says nothing about what it can train."""
    if vram_total is None:
        return None
    return vram_total + (gtt_total or 0) if igpu else vram_total


def is_training_gpu(gpu: Gpu, min_vram_bytes: int, min_unified_bytes: int) -> bool:
    """Decided by usable memory: a discrete card with at least min_vram_bytes of VRAM, an APU with at least
    min_unified_bytes of carve-out + GTT (a Strix Halo with 64-128 GB trains; a 780M's 0.5-4 GiB carve-out
    with a laptop's GTT does not), and supported by the torch build."""
    usable = gpu.usable_memory if gpu.usable_memory is not None else gpu.vram_total
    return gpu.supported and (usable or 0) >= (min_unified_bytes if gpu.igpu else min_vram_bytes)


def training_devices(
    gpus: Iterable[Gpu], min_vram_bytes: int, min_unified_bytes: int | None = None
) -> list[Gpu]:
    """GPUs to train on (is_training_gpu): drops small iGPU carve-outs that can appear first in the device
    list, keeps APUs with large unified memory."""
    unified = min_vram_bytes if min_unified_bytes is None else min_unified_bytes
    return [g for g in gpus if is_training_gpu(g, min_vram_bytes, unified)]
