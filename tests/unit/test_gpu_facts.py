"""GPU detection over real recorded sysfs files: recorded input -> parsed fact, in pyinfra's spirit.

Each test builds a small sysfs tree in tmp_path from files under tests/fixtures/gpu/ (see
tests/fixtures/SOURCES.md, "GPU detection"), runs the fact's own shell command over it and checks the parsed
value. Expected values come from the capture itself (ids, sizes) or from docs/notes/rocm-facts.md and
libdrm amdgpu.ids (cited next to each).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.roles.gpu import cards
from radeonlab.roles.gpu.facts import RadeonGpus
from radeonlab.roles.gpu.sysfs import drm_cards, read_sysfs

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
GIB = 1024**3


def build_tree(
    root: Path, nodes: dict[int, str], drm: dict[str, str], render_minors: dict[str, int] | None = None
):
    """A sysfs tree: KFD node N <- fixtures/gpu/kfd/<file>, drm/<card>/device <- fixtures/gpu/drm/<dir>.

    render_minors adds the empty device/drm/renderD<minor> directory a real PCI device has.
    """
    for index, name in nodes.items():
        node_dir = root / "sys/class/kfd/kfd/topology/nodes" / str(index)
        node_dir.mkdir(parents=True)
        text = (FIXTURES / "kfd" / name).read_text()
        # The tinygrad capture is a template: its render minor is a Python placeholder. The test fills in the
        # minor it gives the card (render_minors), so matching by render minor is what is exercised.
        text = text.replace("{drm_render_minor}", str((render_minors or {}).get("card0", 0)))
        (node_dir / "properties").write_text(text)
    for card, source in drm.items():
        shutil.copytree(FIXTURES / "drm" / source, root / "sys/class/drm" / card / "device")
        for path in (root / "sys/class/drm" / card / "device").iterdir():
            path.chmod(0o644)
    for card, minor in (render_minors or {}).items():
        (root / "sys/class/drm" / card / "device/drm" / f"renderD{minor}").mkdir(parents=True)
    return root


def run_fact(root: Path, rocm_version: str) -> list[dict[str, object]]:
    """What pyinfra does with the fact: run its command in a shell, split stdout into lines, process them."""
    fact = RadeonGpus()
    command = fact.command(sysfs_root=str(root), rocm_version=rocm_version)
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    return fact.process(lines) if lines else fact.default()


# --- the fact over real trees ------------------------------------------------------------------------------


def test_phoenix_apu_cpu_node_skipped_and_card_matched_by_pci_location(tmp_path: Path) -> None:
    # LACT phoenix capture: KFD node0 = CPU, node1 = GPU (location_id 25600 = 0x6400 -> 64:00.0), card1 uevent
    # PCI_SLOT_NAME=0000:64:00.0, device 0x15bf revision 0xdd, VRAM 4294967296 (a 4 GiB carve-out).
    root = build_tree(
        tmp_path,
        {0: "lact_phoenix_node0.properties", 1: "lact_phoenix_node1.properties"},
        {"card1": "lact-phoenix-card1"},
    )
    [gpu] = run_fact(root, "7.2.4")
    assert gpu["node"] == 1 and gpu["rocr_index"] == 0
    assert gpu["card"] == "card1" and gpu["pci_slot"] == "0000:64:00.0"
    assert gpu["gfx"] == "gfx1103" and gpu["gfx_target_version"] == 110003
    assert (gpu["device_id"], gpu["revision"]) == (0x15BF, 0xDD)
    assert gpu["name"] == "AMD Radeon 780M Graphics"  # amdgpu.ids "15BF, DD, AMD Radeon 780M Graphics"
    assert gpu["vram_total"] == 4294967296 and gpu["vram_used"] == 1272893440
    assert gpu["igpu"] is True  # APU although its KFD node has cpu_cores_count 0
    assert gpu["family"] == "RDNA3" and gpu["bf16"] is True
    # docs/notes/rocm-facts.md: "780M gfx1103 ... 1103 -> 11.0.0"
    assert gpu["native"] is False and gpu["override"] == "11.0.0" and gpu["runs_as"] == "gfx1100"
    assert gpu["unique_id"] is None and gpu["uuid"] is None  # KFD unique_id 0 on this APU


def test_strixpoint_apu_native_on_7_2(tmp_path: Path) -> None:
    # LACT strixpoint: gfx_target_version 110500, location 49408 = 0xC100 -> c1:00.0, device 0x150e rev 0xc4.
    root = build_tree(
        tmp_path,
        {0: "lact_strixpoint_node0.properties", 1: "lact_strixpoint_node1.properties"},
        {"card1": "lact-strixpoint-card1"},
    )
    [gpu] = run_fact(root, "7.2.4")
    assert gpu["gfx"] == "gfx1150" and gpu["card"] == "card1" and gpu["pci_slot"] == "0000:c1:00.0"
    assert gpu["name"] == "AMD Radeon 880M Graphics"  # amdgpu.ids "150E, C4, AMD Radeon 880M Graphics"
    assert gpu["family"] == "RDNA3.5" and gpu["igpu"] is True
    assert gpu["vram_total"] == 536870912  # 512 MiB carve-out: never a training device
    # docs/notes/rocm-facts.md: "1150/1151 native on recent ROCm, forcing 11.5.1 hurts on 7.2+"
    assert gpu["native"] is True and gpu["override"] is None


def test_vangogh_without_revision_file_named_by_chip_and_overridden_to_gfx1030(tmp_path: Path) -> None:
    # LACT vangogh: card0/device has only vendor + uevent (PCI_ID 1002:163F, PCI_SLOT_NAME 0000:04:00.0);
    # KFD node1 location_id 1024 = 0x0400 -> 04:00.0, gfx_target_version 100303.
    root = build_tree(tmp_path, {1: "lact_vangogh_node1.properties"}, {"card0": "lact-vangogh-card0"})
    [gpu] = run_fact(root, "6.4.1")
    assert gpu["gfx"] == "gfx1033" and gpu["card"] == "card0"
    assert gpu["revision"] is None and gpu["name"] == "Van Gogh (Steam Deck APU)"
    assert gpu["vram_total"] is None  # no mem_info files, and KFD local_mem_size is 0
    # RDNA2: no bf16 hardware; borrows gfx1030 code (docs/notes/rocm-facts.md: gfx103x cards "need override
    # 10.3.0")
    assert gpu["family"] == "RDNA2" and gpu["bf16"] is False and gpu["override"] == "10.3.0"


def test_rx7900xtx_matched_by_render_minor(tmp_path: Path) -> None:
    # tinygrad's RX 7900 XTX node (device_id 29772 = 0x744c, gfx 110000, location 86:00.0) with LACT's
    # rx7900xtx card0 (0000:03:00.0, no revision file): the PCI locations differ (two machines), so only the
    # render minor can pair them.
    root = build_tree(
        tmp_path,
        {1: "rx7900xtx_node1_tinygrad-mock_TEMPLATED.properties"},
        {"card0": "lact-rx7900xtx-card0"},
        render_minors={"card0": 128},
    )
    [gpu] = run_fact(root, "6.2")
    assert gpu["card"] == "card0" and gpu["pci_slot"] == "0000:03:00.0"
    assert gpu["gfx"] == "gfx1100" and gpu["simd_count"] == 192
    # 744C covers XTX (C8), XT (CC), GRE (CE) in amdgpu.ids: without a revision only the chip is named
    assert gpu["name"] == "Navi 31 (RX 7900 XTX / XT / GRE)"
    assert gpu["igpu"] is False and gpu["bf16"] is True
    # docs/notes/rocm-facts.md: gfx1100 native since 5.7/6.x
    assert gpu["native"] is True and gpu["override"] is None
    assert gpu["uuid"] == "GPU-a1ffc9d1799c317f"  # KFD unique_id 11673270660693242239 in hex


def test_unmatched_node_keeps_kfd_values(tmp_path: Path) -> None:
    # Same node without the render minor link: no card, the PCI slot comes from KFD's location_id 34304.
    root = build_tree(
        tmp_path, {1: "rx7900xtx_node1_tinygrad-mock_TEMPLATED.properties"}, {"card0": "lact-rx7900xtx-card0"}
    )
    [gpu] = run_fact(root, "6.2")
    assert gpu["card"] is None and gpu["pci_slot"] == "0000:86:00.0" and gpu["vram_total"] is None


def test_mi25_legacy_topology_without_gfx_target_version(tmp_path: Path) -> None:
    # k8s-device-plugin 2018 capture: no gfx_target_version line at all; node1 has 256 SIMDs, device 26720.
    root = build_tree(
        tmp_path,
        {0: "vega10_mi25_2018_node0.properties", 1: "vega10_mi25_2018_node1.properties"},
        {},
    )
    [gpu] = run_fact(root, "6.2")
    assert gpu["node"] == 1 and gpu["gfx"] is None and gpu["gfx_target_version"] is None
    assert gpu["device_id"] == 0x6860 and gpu["name"] == "Vega 10 (Instinct MI25 / Pro V340)"
    assert gpu["vram_total"] == 17163091968  # KFD local_mem_size, as no DRM card is there
    assert gpu["pci_slot"] == "0000:19:00.0"  # location_id 6400 = 0x1900
    assert gpu["supported"] is False and gpu["override"] is None


def test_mi210_node2_is_gfx90a_cdna2(tmp_path: Path) -> None:
    root = build_tree(tmp_path, {0: "mi210_node0.properties", 2: "mi210_node2.properties"}, {})
    [gpu] = run_fact(root, "7.2.4")
    assert (gpu["node"], gpu["rocr_index"]) == (2, 0)
    assert gpu["gfx"] == "gfx90a" and gpu["family"] == "CDNA2" and gpu["bf16"] is True
    assert gpu["unique_id"] == 1801979520617338022


def test_no_kfd_prints_nothing_and_gives_the_default(tmp_path: Path) -> None:
    fact = RadeonGpus()
    command = fact.command(sysfs_root=str(tmp_path))
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert run_fact(tmp_path, "7.2.4") == []


def test_drm_only_tree_has_no_gpu(tmp_path: Path) -> None:
    # A card with no KFD node (the rx7800xt capture has no kfd/) is not a compute device.
    root = build_tree(tmp_path, {}, {"card1": "amdgpu-sysfs-rs-rx7800xt"})
    assert run_fact(root, "7.2.4") == []


@pytest.mark.parametrize("source", ["lact-rx6900xt-card0", "amdgpu-sysfs-rs-rx6900xt"])
def test_nul_padded_card_files(tmp_path: Path, source: str) -> None:
    # Both rx6900xt captures are NUL-padded to 4096 bytes per file; no device file (ids from uevent PCI_ID).
    root = build_tree(tmp_path, {}, {"card0": source})
    dump = subprocess.run(["sh", "-c", RadeonGpus().command(str(root))], capture_output=True, text=True)
    card = drm_cards(dump.stdout.splitlines())["card0"]
    assert card["device"] == 0x73BF and card["revision"] == 0xC0
    assert card["vram_total"] == 17163091968 and card["vram_used"] == 668274688
    assert card["pci_slot"] == "0000:0c:00.0"
    assert cards.card_name(card["device"], card["revision"]) == "AMD Radeon RX 6900 XT"  # the capture's name


def test_non_amdgpu_vendor_and_connectors_are_skipped(tmp_path: Path) -> None:
    root = build_tree(tmp_path, {}, {"card0": "lact-hd7870-card0", "card1": "amdgpu-sysfs-rs-rx9070xt"})
    (root / "sys/class/drm/card1-DP-1").mkdir()
    (root / "sys/class/drm/card1-DP-1/device").symlink_to(root / "sys/class/drm/card1")
    dump = subprocess.run(["sh", "-c", RadeonGpus().command(str(root))], capture_output=True, text=True)
    found = drm_cards(dump.stdout.splitlines())
    # hd7870 runs the old radeon driver but is still vendor 0x1002; the connector directory is not a card
    assert sorted(found) == ["card0", "card1"]
    assert found["card1"]["device"] == 0x7550 and found["card1"]["pci_slot"] == "0000:09:00.0"


def test_read_sysfs_is_the_fact_parser(tmp_path: Path) -> None:
    root = build_tree(
        tmp_path,
        {0: "lact_phoenix_node0.properties", 1: "lact_phoenix_node1.properties"},
        {"card1": "lact-phoenix-card1"},
    )
    assert [g.to_dict() for g in read_sysfs(root, "6.2")] == run_fact(root, "6.2")


# --- card knowledge: tables ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target_version", "gfx"),
    [(110000, "gfx1100"), (100301, "gfx1031"), (120001, "gfx1201"), (90010, "gfx90a"), (110501, "gfx1151")],
)
def test_gfx_names(target_version: int, gfx: str) -> None:
    assert cards.gfx_from_target_version(target_version) == gfx


CORE_SDK = "7.12"
VERSIONS = ("6.2", "6.4.1", "7.2.4", CORE_SDK)

# gfx -> override expected on (6.2, 6.4.1, 7.2.4, 7.12); "-" native, None unsupported
# (docs/notes/rocm-facts.md, Cards). On the Core SDK a target its family package carries is native: gfx103x
# carries gfx1030 only, gfx110x gfx1100-1103 (AMD's selector; the one GPU table, roles/gpu/table.py).
OVERRIDES: dict[str, tuple[str | None, ...]] = {
    "gfx1030": ("-", "-", "-", "-"),  # 73bf: native; Core SDK gfx103x (W6800, V620)
    "gfx1031": ("10.3.0",) * 4,  # 73df: needs override 10.3.0 (Core SDK: -gfx103x carries gfx1030 only)
    "gfx1032": ("10.3.0",) * 4,  # 73ff: needs override 10.3.0
    "gfx1034": ("10.3.0",) * 4,
    "gfx1035": ("10.3.0",) * 4,
    "gfx1036": ("10.3.0",) * 4,
    "gfx1100": ("-", "-", "-", "-"),  # 744c: native since ROCm 5.7/6.x
    "gfx1101": ("11.0.0", "11.0.0", "-", "-"),  # 747e: native in ROCm 7 lists; 11.0.0 on older ROCm
    "gfx1102": ("11.0.0", "11.0.0", "11.0.0", "-"),  # 7480: native only in Core SDK lists
    "gfx1103": ("11.0.0",) * 3 + ("-",),  # 780M: 1103 -> 11.0.0 on the legacy stream
    "gfx1150": ("11.0.0", "11.0.0", "-", "-"),  # native on recent ROCm (7.2+)
    "gfx1151": ("11.0.0", "11.0.0", "-", "-"),
    "gfx1200": (None, "-", "-", "-"),  # 7590: native since 6.4.1
    "gfx1201": (None, "-", "-", "-"),  # 7550: native since 6.4.1; no override value exists
}


@pytest.mark.parametrize("gfx", sorted(OVERRIDES))
@pytest.mark.parametrize("index", range(len(VERSIONS)))
def test_override_table(gfx: str, index: int) -> None:
    version, expected = VERSIONS[index], OVERRIDES[gfx][index]
    assert cards.is_native(gfx, version) is (expected == "-")
    assert cards.override_for(gfx, version) == (None if expected == "-" else expected)
    assert cards.is_supported(gfx, version) is (expected is not None)


def test_never_cross_major() -> None:
    # gfx1201 before its native release: borrowing 11.0.0 would be cross-major (ROCm/rocm-systems #5686)
    assert cards.override_for("gfx1201", "6.2") is None
    assert cards.override_for("gfx1010", "7.2.4") is None  # RDNA1: no same-family native target
    assert cards.override_for("gfx1101", "5.6") is None  # the gfx1100 it would borrow is native only from 5.7


@pytest.mark.parametrize(
    ("gfx", "bf16", "family"),
    [
        ("gfx1030", False, "RDNA2"),  # docs/notes/rocm-facts.md: 73bf "no bf16 hardware -> fp16"
        ("gfx1032", False, "RDNA2"),
        ("gfx1100", True, "RDNA3"),  # 744c "bf16 yes"
        ("gfx1103", True, "RDNA3"),
        ("gfx1151", True, "RDNA3.5"),
        ("gfx1201", True, "RDNA4"),
    ],
)
def test_bf16_and_family(gfx: str, bf16: bool, family: str) -> None:
    assert cards.has_bf16(gfx) is bf16 and cards.arch_family(gfx) == family


@pytest.mark.parametrize(
    ("device", "revision", "name"),
    [
        (0x744C, 0xC8, "AMD Radeon RX 7900 XTX"),  # LACT CLI capture: "RX 7900 XTX (0x1002:0x744C:0xC8)"
        (0x744C, 0xCC, "AMD Radeon RX 7900 XT"),  # amdgpu.ids
        (0x744C, None, "Navi 31 (RX 7900 XTX / XT / GRE)"),
        (0x747E, 0xC8, "AMD Radeon RX 7800 XT"),  # amdgpu.ids; rocminfo rx7800xt Marketing Name
        (0x747E, 0xFF, "AMD Radeon RX 7700 XT"),
        (0x747E, None, "Navi 32 (RX 7800 XT / 7700 XT / 7700)"),
        (0x7550, 0xC0, "AMD Radeon RX 9070 XT"),
        (0x7551, 0xC0, "AMD Radeon AI PRO R9700"),  # docs/notes/rocm-facts.md: 7551 Radeon AI PRO R9700
        (0x7448, 0x00, "AMD Radeon Pro W7900"),  # rocminfo w7900 fixture: Chip ID 0x7448, not 744c
        (0x1234, 0x00, "AMD GPU [1002:1234]"),
    ],
)
def test_card_names(device: int, revision: int | None, name: str) -> None:
    assert cards.card_name(device, revision) == name


@pytest.mark.parametrize(
    ("gfx", "family"),
    [("gfx1100", "gfx110x"), ("gfx1102", "gfx110x"), ("gfx1031", "gfx103x"), ("gfx1201", "gfx120x")]
    + [("gfx1150", "gfx1150"), ("gfx1151", "gfx1151"), ("gfx1010", None), ("gfx90a", None)],
)
def test_core_sdk_family(gfx: str, family: str | None) -> None:
    assert cards.core_sdk_family(gfx) == family


def test_rocm_arch_list_and_training_devices(tmp_path: Path) -> None:
    phoenix = build_tree(
        tmp_path / "a",
        {0: "lact_phoenix_node0.properties", 1: "lact_phoenix_node1.properties"},
        {"card1": "lact-phoenix-card1"},
    )
    strix = build_tree(
        tmp_path / "b",
        {0: "lact_strixpoint_node0.properties", 1: "lact_strixpoint_node1.properties"},
        {"card1": "lact-strixpoint-card1"},
    )
    gpus = read_sysfs(phoenix, "6.2") + read_sysfs(strix, "6.2")
    assert cards.rocm_arch_list(gpus) == "gfx1100"  # both borrow gfx1100 code on 6.2
    gpus = read_sysfs(phoenix, "7.2.4") + read_sysfs(strix, "7.2.4")
    assert cards.rocm_arch_list(gpus) == "gfx1100;gfx1150"
    assert cards.training_devices(gpus, 6 * GIB) == []  # 4 GiB and 512 MiB carve-outs
    assert [g.gfx for g in cards.training_devices(gpus, 4 * GIB)] == ["gfx1103"]


# --- the CLI verb -------------------------------------------------------------------------------------------


def test_cli_gpus_json(tmp_path: Path) -> None:
    root = build_tree(
        tmp_path,
        {0: "lact_phoenix_node0.properties", 1: "lact_phoenix_node1.properties"},
        {"card1": "lact-phoenix-card1"},
    )
    result = CliRunner().invoke(main, ["gpus", "--sysfs", str(root), "--rocm-version", "6.2", "--json"])
    assert result.exit_code == 0, result.output
    [gpu] = json.loads(result.output)
    assert (gpu["gfx"], gpu["override"], gpu["rocm_version"]) == ("gfx1103", "11.0.0", "6.2")


def test_cli_gpus_table_and_no_gpu(tmp_path: Path) -> None:
    root = build_tree(tmp_path / "t", {1: "lact_vangogh_node1.properties"}, {"card0": "lact-vangogh-card0"})
    result = CliRunner().invoke(main, ["gpus", "--sysfs", str(root), "--rocm-version", "10.0", "--json"])
    (gpu,) = json.loads(result.output)
    # AMD's wheels carry gfx1033 code; download.pytorch.org's borrow gfx1030's (10.3.0)
    assert gpu["gfx"] == "gfx1033" and gpu["override_by_torch_source"] == {"amd": "-", "pytorch": "10.3.0"}
    table = CliRunner().invoke(main, ["gpus", "--sysfs", str(root), "--rocm-version", "10.0"])
    assert table.exit_code == 0 and "PYTORCH_ROCM_ARCH=gfx1033 (AMD's wheels)" in table.output
    empty = CliRunner().invoke(main, ["gpus", "--sysfs", str(tmp_path / "empty")])
    assert empty.exit_code == 1 and "no AMD GPU found under" in empty.output
