"""The one GPU table (roles/gpu/table.py): every gfx target the product names has a row, and the rows agree
with AMD's rocm-bootstrap (target -> sub-family -> family, device package names) but for the differences
declared below, each with its reason."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import rocm_bootstrap

from radeonlab.roles.gpu import cards, table
from radeonlab.roles.python_stack import defaults as stack
from radeonlab.roles.rocm import releases

SRC = Path(__file__).resolve().parents[2] / "src/radeonlab"
TABLE = SRC / "roles/gpu/table.py"
GFX = re.compile(r"\bgfx[0-9a-f]{3,4}\b")  # gfx1100, gfx90a; not family names (gfx110x, gfx10_3, gfx11)

# Where the product's Core SDK family differs from rocm-bootstrap's sub-family key, and why.
DECLARED = {
    "gfx10_3": "AMD's apt package spells the RDNA2 sub-family gfx103x (amdrocm<ver>-gfx103x)",
    "gfx12_0": "AMD's apt package spells the RDNA4 sub-family gfx120x (amdrocm<ver>-gfx120x)",
    "gfx115x": "AMD's apt layout has one package per RDNA3.5 APU target (-gfx1150, -gfx1151, -gfx1152)",
}


def named_targets(rows: dict[str, table.Target]) -> dict[str, list[str]]:
    """gfx target -> the files of src/radeonlab naming it, for the targets without a row in `rows`."""
    missing: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*")):
        if not path.is_file() or path == TABLE or path.suffix in {".pyc", ".gz", ".whl", ".tar"}:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for gfx in sorted(set(GFX.findall(text)) - set(rows)):
            missing.setdefault(gfx, []).append(str(path.relative_to(SRC)))
    return missing


def test_every_gfx_target_named_in_the_product_has_a_row() -> None:
    assert named_targets(table.TARGETS) == {}


def test_removing_a_row_is_caught() -> None:
    """The test above bites: gfx1031 (named by the python_stack README, sysfs fixtures, cards) without a
    row is reported with the files that name it."""
    rows = {g: t for g, t in table.TARGETS.items() if g != "gfx1031"}
    missing = named_targets(rows)
    assert list(missing) == ["gfx1031"]
    assert "roles/gpu/cards.py" in missing["gfx1031"]


def test_the_table_agrees_with_rocm_bootstrap() -> None:
    known = [g for g in table.TARGETS if table.known_to_rocm_bootstrap(g)]
    # rows rocm-bootstrap 0.3.0 does not list: gfx803 (Polaris, before its gfx9 start), gfx940/gfx941 (early
    # MI300 steppings LLVM dropped for gfx942), gfx1037 (an LLVM APU target no ROCm package carries)
    assert set(table.TARGETS) - set(known) == {"gfx803", "gfx940", "gfx941", "gfx1037"}
    for gfx in known:
        target, sub_family, family = rocm_bootstrap.packaging_chain(gfx)
        assert table.hierarchy(gfx) == (gfx, sub_family.key, family.key)
        assert cards.gfx_from_target_version(target.members[0].gfx_target_version) == gfx  # KFD's encoding
        mine = table.sdk_family(gfx)
        if mine is not None and mine != sub_family.key:
            assert sub_family.key in DECLARED, f"{gfx}: family {mine} != rocm-bootstrap's {sub_family.key}"
        if table.TARGETS[gfx].amd_wheel:
            # AMD's wheel graph (python_stack) ends in rocm-bootstrap's device package for the target
            assert stack.device_packages(gfx)[-1] == table.rocm_device_package(gfx)
    # the apt families with one package per sub-family carry that whole sub-family, unless AMD's selector
    # says less (SDK_FAMILY_ONLY: -gfx103x carries gfx1030 alone)
    for sub_family, family in table.SDK_FAMILY_BY_SUB_FAMILY.items():
        members = tuple(t.name for t in rocm_bootstrap.lookup_bundle(sub_family).members)
        assert releases.FAMILY_PACKAGES[family] == table.SDK_FAMILY_ONLY.get(family, members)
    # no declared difference is stale
    used = {table.hierarchy(g)[1] for g in known if table.sdk_family(g) not in (None, table.hierarchy(g)[1])}
    assert used == set(DECLARED)


def test_a_wrong_row_is_caught_by_the_comparison() -> None:
    """A row rocm-bootstrap does not know gets no hierarchy; a typo'd device package would differ."""
    assert table.hierarchy("gfx1104") is None
    assert table.rocm_device_package("gfx1100") == "rocm-sdk-device-gfx1100"
    assert table.rocm_device_package("gfx1101") != stack.device_packages("gfx1100")[-1]


def test_every_derived_set_comes_from_the_rows() -> None:
    """The roles' sets are the table's: changing a row changes what cards, rocm and gpu_env see."""
    assert releases.MULTI_ARCH_TARGETS is table.MULTI_ARCH_TARGETS
    assert releases.FAMILY_PACKAGES is table.FAMILY_PACKAGES is cards.CORE_SDK_FAMILIES
    assert cards.CARD_NAMES is table.CARD_NAMES
    row = dataclasses.replace(table.TARGETS["gfx1031"], apu=True)
    assert row.apu and not table.TARGETS["gfx1031"].apu


@pytest.mark.parametrize(
    ("gfx", "family"),
    [("gfx1103", "gfx110x"), ("gfx1031", None), ("gfx1033", None), ("gfx1152", "gfx1152"),
     ("gfx1153", None), ("gfx942", None)],
)  # fmt: skip
def test_the_old_disagreements_follow_amds_data(gfx: str, family: str | None) -> None:
    """gfx1103 is in gfx110x and gfx1152 has its own family (AMD's selector); gfx1153 has a per-target
    multi-arch package but no family package; -gfx103x carries gfx1030 alone (AMD's selector), so gfx1031
    and gfx1033 run as gfx1030 through the 10.3.0 override. A Core SDK card in a family package is native."""
    assert table.sdk_family(gfx) == family
    if family:
        assert cards.is_native(gfx, "10.1") and cards.override_for(gfx, "10.1") is None
    elif gfx in ("gfx1031", "gfx1033"):
        assert not cards.is_native(gfx, "10.1") and cards.override_for(gfx, "10.1") == "10.3.0"
        assert cards.core_sdk_family(gfx) == "gfx103x"  # the reference target's family serves it
    assert gfx in releases.MULTI_ARCH_TARGETS or gfx in ("gfx1031", "gfx1033")


def test_roles_share_the_table_not_each_others_defaults() -> None:
    """gpu_env reads wheel targets from the GPU table, not from python_stack's defaults."""
    plan = (SRC / "roles/gpu_env/plan.py").read_text()
    assert "python_stack.defaults" not in plan
    assert "roles.gpu.table" in plan
