"""What radeonlab knows about AMD GPUs: data tables and pure functions, in one place.

Nothing here reads the machine. `radeonlab.roles.gpu.sysfs` turns sysfs text into `Gpu` records with these
functions;
the ROCm and training roles ask them which override, wheel family or training device a card needs.

The facts themselves are rows of roles/gpu/table.py (one per gfx target, with their sources). KFD
`gfx_target_version` = major*10000 + minor*100 + stepping (LLVM AMDGPUUsage processor names).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from radeonlab.roles.gpu import table

# Used until roles/rocm/defaults.py (the ROCm role, DEFAULTS["rocm_version"]) exists: the newest release of
# the legacy repo.radeon.com stream that PyTorch builds wheels for (torch 2.11-2.13 -> 7.2,
# docs/notes/rocm-facts.md).
FALLBACK_ROCM_VERSION = "7.2"

AMD_VENDOR_ID = 0x1002

# ROCm Core SDK ("TheRock", repo.amd.com) starts here; earlier versions are the legacy repo.radeon.com stream.
CORE_SDK_FIRST_VERSION = "7.12"

# The GPU facts are one table keyed by gfx target (roles/gpu/table.py, with their sources); these names are
# the sets the functions below use, derived from it.
LEGACY_NATIVE_SINCE = table.LEGACY_NATIVE_SINCE  # first legacy release native for a target
CORE_SDK_FAMILIES = table.FAMILY_PACKAGES  # Core SDK family package -> the targets it carries natively
BF16_ARCHS = table.BF16_ARCHS
OVERRIDE_REFERENCE = table.OVERRIDE_REFERENCE  # architecture -> the native target an override borrows
APU_GFX = table.APU_GFX
CARD_NAMES = table.CARD_NAMES  # (PCI device id, revision) -> marketing name
CHIP_NAMES = table.CHIP_NAMES  # PCI device id -> chip and the cards it may be (revision unknown)


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
    """gfx1100 -> "RDNA3", gfx1151 -> "RDNA3.5", gfx90a -> "CDNA2"; "unknown" otherwise (table.arch_name)."""
    return table.arch_name(gfx)


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
