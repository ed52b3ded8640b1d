"""The one GPU table: what radeonlab knows about each AMD gfx target, one row per target.

Every other GPU set of the product derives from `TARGETS` (cards.py: native releases, Core SDK families,
architectures, bf16, overrides, APUs, card names; rocm/releases.py: AMD's per-target and per-family meta
packages; gpu_env: which wheel carries which target, AOTriton). Roles read this module, never another
role's defaults.

The target hierarchy (target -> sub-family -> family) and the device package names come from AMD's
`rocm-bootstrap` (PyPI, MIT, by AMD; pinned in pyproject.toml): its `targets.py` is AMD's own encoding of
LLVM's GCNProcessors.td. The Core SDK apt families below are derived from its sub-families; where AMD's apt
packages spell a sub-family differently, SDK_FAMILY_BY_SUB_FAMILY says how (tests/unit/test_gpu_table.py
compares every row with rocm-bootstrap).

Where the old per-role tables disagreed, this table follows AMD's data (rocm-bootstrap and
sandbox/amdworld/*.yaml, with docs/notes/rocm-facts.md):
- gfx110x carries gfx1100-1103 (rocm-bootstrap sub-family gfx110x; "amdrocm<ver>-gfx110x (gfx1100-1103)" in
  AMD's install selector): gfx1103 was missing from cards.py's family, so its override on the Core SDK goes.
- gfx103x carries gfx1030 only (AMD's selector; TheRock's gfx103X-all build family has no gfx1031), although
  rocm-bootstrap's sub-family gfx10_3 spans gfx1030-1036: SDK_FAMILY_ONLY below.
- gfx1152 has its own apt package `amdrocm<ver>-gfx1152` (AMD's selector, rocm-facts.md apt layouts): it was
  missing from cards.py's families.
- gfx1153 has a per-target multi-arch package [S1] and an AMD wheel extra, but no per-family package.

Sources of the per-row facts:
- legacy_since: the first legacy (repo.radeon.com) ROCm release with code for the target itself (rocminfo
  fixture rx6800xt_gfx1030..._rocm5.6.0; docs/notes/rocm-facts.md, Cards). None: native in no legacy release.
- sdk_target: a per-target meta package `amdrocm<ver>-<gfx>` in the multi-arch layout [S1] = ROCm/rocm-docs
  docs/install/include/200-install.rst @0c31064a (AMD's install selector for 10.0).
- amd_wheel: a `device-<gfx>` extra on AMD's multi-arch index (TheRock RELEASES.md @89553ce3).
- pytorch_org: download.pytorch.org's rocm7.2 wheels carry code for it (unslothai/unsloth
  docker/Dockerfile.rocm, as cited in rocm-facts.md, plus the Instinct targets every ROCm build carries).
- apu: integrated only (TheRock FAMILY igpu-all; LLVM AMDGPUUsage "APU" for gfx90c, gfx902, gfx909, gfx1037).
- cards/chips: libdrm `data/amdgpu.ids` (github X11Libre/mirror.fdo.drm @06675b4f, a mirror of freedesktop
  mesa/drm) and pci.ids chip names as lspci prints them in the recorded captures (tests/fixtures/SOURCES.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from rocm_bootstrap import lookup_target, packaging_chain
from rocm_bootstrap.naming import device_dist_name


@dataclass(frozen=True)
class Arch:
    """Facts of an architecture family, shared by its targets."""

    name: str
    # Hardware bf16 (WMMA / matrix cores). RDNA2 has none: train in fp16 there (rocm-facts.md, Cards).
    bf16: bool = False
    # HSA_OVERRIDE_GFX_VERSION: the one native target a non-native card of this family may borrow code from.
    # Same major only: ROCr refuses cross-major overrides (ROCm/rocm-systems #5686) and they crash or hang.
    # RDNA1 and RDNA4 have none: there is nothing safe to borrow.
    reference: str | None = None
    # TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL applies (unslothai/unsloth#8821: gfx1200 flash 41 ms vs math
    # 486 ms; rocm-facts.md).
    aotriton: bool = False


GCN34 = Arch("GCN3/4")
GCN5 = Arch("GCN5 (Vega)")
CDNA1, CDNA2, CDNA3, CDNA4 = (Arch(f"CDNA{n}", bf16=True) for n in (1, 2, 3, 4))
RDNA1 = Arch("RDNA1")
RDNA2 = Arch("RDNA2", reference="gfx1030")
RDNA3 = Arch("RDNA3", bf16=True, reference="gfx1100", aotriton=True)
RDNA35 = Arch("RDNA3.5", bf16=True, reference="gfx1100", aotriton=True)
RDNA4 = Arch("RDNA4", bf16=True, aotriton=True)


@dataclass(frozen=True)
class Target:
    """One gfx target (LLVM AMDGPUUsage processor name) and what radeonlab knows of it."""

    gfx: str
    arch: Arch
    apu: bool = False
    legacy_since: str | None = None
    sdk_target: bool = False
    amd_wheel: bool = False
    pytorch_org: bool = False
    cards: dict[tuple[int, int], str] = field(default_factory=dict)  # (PCI device, revision) -> name
    chips: dict[int, str] = field(default_factory=dict)  # PCI device -> chip and its candidate cards


class _Columns(TypedDict, total=False):
    sdk_target: bool
    amd_wheel: bool
    pytorch_org: bool


# Shorthands for the columns most rows share.
_ALL: _Columns = {"sdk_target": True, "amd_wheel": True}
_ORG: _Columns = {**_ALL, "pytorch_org": True}

_ROWS = (
    Target("gfx803", GCN34, cards={(0x67DF, 0xE7): "AMD Radeon RX 580 Series"},
           chips={0x67DF: "Polaris 10/20 (RX 580 / 570 / 480 / 470)"}),
    Target("gfx900", GCN5, amd_wheel=True, pytorch_org=True, cards={(0x687F, 0xC3): "AMD Radeon RX Vega"},
           chips={0x687F: "Vega 10 (RX Vega 56 / 64)", 0x6860: "Vega 10 (Instinct MI25 / Pro V340)"}),
    Target("gfx902", GCN5, apu=True),
    Target("gfx906", GCN5, amd_wheel=True, pytorch_org=True),
    Target("gfx908", CDNA1, **_ORG),
    Target("gfx909", GCN5, apu=True),
    Target("gfx90a", CDNA2, **_ORG, chips={0x740F: "Aldebaran (Instinct MI210)"}),
    Target("gfx90c", GCN5, apu=True),
    Target("gfx940", CDNA3),
    Target("gfx941", CDNA3),
    Target("gfx942", CDNA3, **_ORG),
    Target("gfx950", CDNA4, **_ORG),
    Target("gfx1010", RDNA1, amd_wheel=True),
    Target("gfx1011", RDNA1, amd_wheel=True),
    Target("gfx1012", RDNA1, amd_wheel=True),
    Target("gfx1030", RDNA2, legacy_since="5.6", **_ORG, cards={
        (0x73A3, 0x00): "AMD Radeon Pro W6800", (0x73A5, 0xC0): "AMD Radeon RX 6950 XT",
        (0x73BF, 0xC0): "AMD Radeon RX 6900 XT", (0x73BF, 0xC1): "AMD Radeon RX 6800 XT",
        (0x73BF, 0xC3): "AMD Radeon RX 6800",
    }, chips={0x73A5: "Navi 21 (RX 6950 XT)", 0x73BF: "Navi 21 (RX 6900 XT / 6800 XT / 6800)"}),
    Target("gfx1031", RDNA2, amd_wheel=True, cards={
        (0x73DF, 0xC0): "AMD Radeon RX 6750 XT", (0x73DF, 0xC1): "AMD Radeon RX 6700 XT",
        (0x73DF, 0xC5): "AMD Radeon RX 6700 XT", (0x73DF, 0xDF): "AMD Radeon RX 6700",
        (0x73DF, 0xFF): "AMD Radeon RX 6700",
    }, chips={0x73DF: "Navi 22 (RX 6750 XT / 6700 XT / 6700)"}),
    Target("gfx1032", RDNA2, amd_wheel=True, cards={
        (0x73EF, 0xC1): "AMD Radeon RX 6650 XT", (0x73FF, 0xC1): "AMD Radeon RX 6600 XT",
        (0x73FF, 0xC7): "AMD Radeon RX 6600",
    }, chips={0x73EF: "Navi 23 (RX 6650 XT)", 0x73FF: "Navi 23 (RX 6600 XT / 6600)"}),
    Target("gfx1033", RDNA2, apu=True, amd_wheel=True, chips={0x163F: "Van Gogh (Steam Deck APU)"}),
    Target("gfx1034", RDNA2, amd_wheel=True),
    Target("gfx1035", RDNA2, apu=True, amd_wheel=True, cards={(0x1681, 0xC8): "AMD Radeon 680M"},
           chips={0x1681: "Rembrandt (Radeon 680M / 660M)"}),
    Target("gfx1036", RDNA2, apu=True, amd_wheel=True,
           chips={0x13C0: "Granite Ridge (Radeon Graphics)", 0x164E: "Raphael (Radeon Graphics)"}),
    Target("gfx1037", RDNA2, apu=True),
    Target("gfx1100", RDNA3, legacy_since="5.7", **_ORG, cards={
        (0x7448, 0x00): "AMD Radeon Pro W7900", (0x7449, 0x00): "AMD Radeon Pro W7800 48GB",
        (0x744C, 0xC8): "AMD Radeon RX 7900 XTX", (0x744C, 0xCC): "AMD Radeon RX 7900 XT",
        (0x744C, 0xCE): "AMD Radeon RX 7900 GRE", (0x745E, 0xCC): "AMD Radeon Pro W7800",
    }, chips={0x7448: "Navi 31 (Radeon Pro W7900)", 0x744C: "Navi 31 (RX 7900 XTX / XT / GRE)",
              0x745E: "Navi 31 (Radeon Pro W7800)"}),
    Target("gfx1101", RDNA3, legacy_since="7.0", **_ORG, cards={
        (0x7470, 0x00): "AMD Radeon Pro W7700", (0x747E, 0xC8): "AMD Radeon RX 7800 XT",
        (0x747E, 0xDB): "AMD Radeon RX 7700", (0x747E, 0xFF): "AMD Radeon RX 7700 XT",
    }, chips={0x747E: "Navi 32 (RX 7800 XT / 7700 XT / 7700)"}),
    Target("gfx1102", RDNA3, **_ORG, cards={
        (0x7480, 0x00): "AMD Radeon Pro W7600", (0x7480, 0xC0): "AMD Radeon RX 7600 XT",
        (0x7480, 0xCF): "AMD Radeon RX 7600",
    }, chips={0x7480: "Navi 33 (RX 7600 XT / 7600, Pro W7600)"}),
    Target("gfx1103", RDNA3, apu=True, **_ALL, cards={
        (0x15BF, 0xC1): "AMD Radeon 780M Graphics", (0x15BF, 0xDD): "AMD Radeon 780M Graphics",
    }, chips={0x15BF: "Phoenix (Radeon 780M / 760M / 740M)",
              0x1900: "Phoenix / Hawk Point (Radeon 780M / 760M)"}),
    Target("gfx1150", RDNA35, apu=True, legacy_since="7.2", **_ALL, cards={
        (0x150E, 0xC1): "AMD Radeon 890M Graphics", (0x150E, 0xC4): "AMD Radeon 880M Graphics",
    }, chips={0x150E: "Strix Point (Radeon 890M / 880M)"}),
    Target("gfx1151", RDNA35, apu=True, legacy_since="7.2", **_ALL, cards={
        (0x1586, 0xC1): "AMD Radeon 8060S Graphics", (0x1586, 0xC2): "AMD Radeon 8050S Graphics",
    }, chips={0x1586: "Strix Halo (Radeon 8060S / 8050S / 8040S)"}),
    Target("gfx1152", RDNA35, apu=True, **_ALL),
    Target("gfx1153", RDNA35, apu=True, **_ALL),
    Target("gfx1200", RDNA4, legacy_since="6.4.1", **_ORG, cards={
        (0x7590, 0xC0): "AMD Radeon RX 9060 XT", (0x7590, 0xC7): "AMD Radeon RX 9060",
    }, chips={0x7590: "Navi 44 (RX 9060 XT / 9060)"}),
    Target("gfx1201", RDNA4, legacy_since="6.4.1", **_ORG, cards={
        (0x7550, 0xC0): "AMD Radeon RX 9070 XT", (0x7550, 0xC2): "AMD Radeon RX 9070 GRE",
        (0x7550, 0xC3): "AMD Radeon RX 9070", (0x7551, 0xC0): "AMD Radeon AI PRO R9700",
    }, chips={0x7550: "Navi 48 (RX 9070 XT / 9070 / 9070 GRE)", 0x7551: "Navi 48 (Radeon AI PRO R9700)"}),
)  # fmt: skip

TARGETS: dict[str, Target] = {t.gfx: t for t in _ROWS}

# ROCm Core SDK per-family apt packages `amdrocm<ver>-<family>`: rocm-bootstrap's sub-family, spelled as AMD's
# install selector spells the package (rocm-facts.md apt layouts: -gfx110x (gfx1100-1103), -gfx120x,
# -gfx103x, -gfx1150, -gfx1151, -gfx1152). RDNA3.5 has one package per target, not one for gfx115x; gfx1153
# has none (it is served by the multi-arch layout only). AMD's 7.13 selector also lists Instinct family
# packages (-gfx950, -gfx94x, -gfx90a, -gfx908): a declared choice (amd_releases.DECLARED_CHOICES;
# tests/unit/test_amd_world.py compares with sandbox/amdworld).
SDK_FAMILY_BY_SUB_FAMILY: dict[str, str] = {"gfx10_3": "gfx103x", "gfx110x": "gfx110x", "gfx12_0": "gfx120x"}
SDK_FAMILY_PER_TARGET = ("gfx1150", "gfx1151", "gfx1152")
# Where a family package carries less than its sub-family: AMD's 7.13 selector sends only gfx1030 to
# -gfx103x (sandbox/amdworld/coresdk-packages.yaml), and TheRock's gfx103X-all build family has no gfx1031
# (ROCm/TheRock cmake/therock_amdgpu_targets.cmake @02eb4a57). The other RDNA2 targets are not counted native
# there: they get the 10.3.0 override (the road RX 6700 XT owners know works), never a guess at native code.
SDK_FAMILY_ONLY: dict[str, tuple[str, ...]] = {"gfx103x": ("gfx1030",)}


def known_to_rocm_bootstrap(gfx: str) -> bool:
    try:
        lookup_target(gfx)
    except ValueError:
        return False
    return True


def hierarchy(gfx: str) -> tuple[str, str, str] | None:
    """(target, sub-family, family) bundle keys from rocm-bootstrap: gfx1151 -> (gfx1151, gfx115x, gfx11)."""
    if not known_to_rocm_bootstrap(gfx):
        return None
    target, sub_family, family = packaging_chain(gfx)
    return target.key, sub_family.key, family.key


def rocm_device_package(gfx: str) -> str | None:
    """The ROCm device wheel of a target as rocm-bootstrap names it: gfx1100 -> rocm-sdk-device-gfx1100."""
    if not known_to_rocm_bootstrap(gfx):
        return None
    return device_dist_name("rocm-sdk-device", packaging_chain(gfx)[0])


def sdk_family(gfx: str) -> str | None:
    """The per-family Core SDK package family that carries this target natively, or None."""
    if gfx in SDK_FAMILY_PER_TARGET:
        return gfx
    chain = hierarchy(gfx)
    family = SDK_FAMILY_BY_SUB_FAMILY.get(chain[1]) if chain else None
    if family in SDK_FAMILY_ONLY and gfx not in SDK_FAMILY_ONLY[family]:
        return None
    return family


def _family_packages() -> dict[str, tuple[str, ...]]:
    """Family -> its targets; sub-family packages first, then the per-target ones (the order the sandbox's
    SIMULATED repository is built in, so its cached packages stay the same)."""
    order = (*SDK_FAMILY_BY_SUB_FAMILY.values(), *SDK_FAMILY_PER_TARGET)
    return {f: tuple(g for g in TARGETS if sdk_family(g) == f) for f in order}


# The derived sets the roles use.
FAMILY_PACKAGES: dict[str, tuple[str, ...]] = _family_packages()
MULTI_ARCH_TARGETS: tuple[str, ...] = tuple(t.gfx for t in _ROWS if t.sdk_target)
LEGACY_NATIVE_SINCE: dict[str, str] = {t.gfx: t.legacy_since for t in _ROWS if t.legacy_since}
AMD_DEVICE_TARGETS: tuple[str, ...] = tuple(t.gfx for t in _ROWS if t.amd_wheel)
PYTORCH_ORG_TARGETS: tuple[str, ...] = tuple(t.gfx for t in _ROWS if t.pytorch_org)
APU_GFX: frozenset[str] = frozenset(t.gfx for t in _ROWS if t.apu)
BF16_ARCHS: frozenset[str] = frozenset(t.arch.name for t in _ROWS if t.arch.bf16)
AOTRITON_ARCHS: frozenset[str] = frozenset(t.arch.name for t in _ROWS if t.arch.aotriton)
OVERRIDE_REFERENCE: dict[str, str] = {t.arch.name: t.arch.reference for t in _ROWS if t.arch.reference}
CARD_NAMES: dict[tuple[int, int], str] = {k: v for t in _ROWS for k, v in t.cards.items()}
CHIP_NAMES: dict[int, str] = {k: v for t in _ROWS for k, v in t.chips.items()}


def wheel_targets(source: str) -> tuple[str, ...]:
    """The exact gfx targets the chosen torch wheel source ("amd" or "pytorch") carries code for."""
    return AMD_DEVICE_TARGETS if source == "amd" else PYTORCH_ORG_TARGETS


def arch_name(gfx: str | None) -> str:
    """gfx1100 -> "RDNA3". A target with no row takes the architecture its sub-family's rows agree on
    (gfx1104 -> RDNA3), else "unknown"."""
    if not gfx:
        return "unknown"
    if gfx in TARGETS:
        return TARGETS[gfx].arch.name
    kin = {t.arch.name for g, t in TARGETS.items() if len(g) == len(gfx) and g[:-1] == gfx[:-1]}
    return kin.pop() if len(kin) == 1 else "unknown"
