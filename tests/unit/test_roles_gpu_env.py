"""roles/gpu_env: GPUs in -> /etc/profile.d/radeonlab-gpu.sh out (the rendered template itself)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyinfra.api.util import get_template

from radeonlab.roles.gpu import cards
from radeonlab.roles.gpu_env import TEMPLATE
from radeonlab.roles.gpu_env.plan import TorchBuild, as_gpus, gpu_env, training_targets
from tests.support.provisioned import exports

GIB = 1024**3
MIN_VRAM = 6 * GIB
MIN_UNIFIED = 24 * GIB
AMD = TorchBuild("amd", "10.0", "2.13.0")  # AMD's multi-arch wheels (the default)
PT = TorchBuild("pytorch", "7.2", "2.13.0")  # download.pytorch.org rocm7.2


def gpu(
    index: int, gfx: str, name: str, vram: int, node: int | None = None, gtt: int | None = None
) -> cards.Gpu:
    """A Gpu record as roles/gpu builds it, conclusions from radeonlab.roles.gpu.cards (re-judged by
    gpu_env anyway)."""
    return cards.Gpu(
        node=node if node is not None else index + 1,
        rocr_index=index,
        card=f"card{index}",
        pci_slot=None,
        gfx=gfx,
        gfx_target_version=None,
        vendor_id=0x1002,
        device_id=None,
        revision=None,
        name=name,
        family=cards.arch_family(gfx),
        vram_total=vram,
        vram_used=0,
        simd_count=0,
        igpu=cards.is_igpu(gfx),
        bf16=cards.has_bf16(gfx),
        rocm_version="7.2",
        native=False,
        override=None,
        supported=False,
        unique_id=None,
        gtt_total=gtt,
        usable_memory=cards.usable_memory(vram, gtt, cards.is_igpu(gfx)),
    )


XTX = gpu(0, "gfx1100", "AMD Radeon RX 7900 XTX", 24 * GIB)
R6700 = gpu(0, "gfx1031", "AMD Radeon RX 6700 XT", 12 * GIB)
R9070 = gpu(0, "gfx1201", "AMD Radeon RX 9070 XT", 16 * GIB)
IGPU = gpu(1, "gfx1103", "AMD Radeon 780M Graphics", 512 * 1024**2, gtt=8 * GIB)  # a 16 GB laptop
# Strix Halo: the simulated host's values (radeonlab/sandbox/simcards.py, derived): 512 MiB + 64038 MiB GTT
HALO = gpu(0, "gfx1151", "AMD Radeon 8060S Graphics", 536870912, gtt=67148152832)
AOT = {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}


def render(gpus: list[cards.Gpu], build: TorchBuild = AMD, aotriton: bool = True) -> str:
    env = gpu_env(gpus, build, MIN_VRAM, MIN_UNIFIED, aotriton)
    return get_template(str(TEMPLATE), {"trim_blocks": True, "lstrip_blocks": True}).render(
        host_name="ws1", notes=env.notes, comments=env.comments, exports=env.exports
    )


def test_7900xtx_no_override_and_aotriton_with_the_why() -> None:
    text = render([XTX])
    assert exports(text) == {"PYTORCH_ROCM_ARCH": "gfx1100", **AOT}
    assert (
        "RX 7900 XTX, gfx1100" in text and "AMD's multi-arch wheels carry gfx1100 code: no override" in text
    )
    assert "torch 2.13.0 from AMD's multi-arch wheels (ROCm 10.0)" in text
    assert "RDNA3 attention otherwise falls back to the math path" in text


def test_the_aotriton_switch_turns_it_off() -> None:
    text = render([XTX], aotriton=False)
    assert exports(text) == {"PYTORCH_ROCM_ARCH": "gfx1100"}
    assert "gpu_env_aotriton_experimental is false" in text
    assert exports(render([R6700])) == {"PYTORCH_ROCM_ARCH": "gfx1031"}  # RDNA2: not set at all


@pytest.mark.parametrize(
    ("card", "build", "want"),
    [
        # AMD's wheels carry gfx1031 (device-gfx1031): no override; download.pytorch.org's rocm7.2 do not
        ("R6700", AMD, {"PYTORCH_ROCM_ARCH": "gfx1031"}),
        ("R6700", PT, {"PYTORCH_ROCM_ARCH": "gfx1030", "HSA_OVERRIDE_GFX_VERSION": "10.3.0"}),
        ("R9070", AMD, {"PYTORCH_ROCM_ARCH": "gfx1201", **AOT}),
        ("R9070", PT, {"PYTORCH_ROCM_ARCH": "gfx1201", **AOT}),
        # gfx1151: AMD's wheels carry it; download.pytorch.org's do not: same-major 11.0.0, never 12.x
        ("HALO", AMD, {"PYTORCH_ROCM_ARCH": "gfx1151", **AOT}),
        ("HALO", PT, {"PYTORCH_ROCM_ARCH": "gfx1100", "HSA_OVERRIDE_GFX_VERSION": "11.0.0", **AOT}),
    ],
)
def test_the_override_follows_the_torch_source(card: str, build: TorchBuild, want: dict) -> None:
    text = render([globals()[card]], build)
    assert exports(text) == want, text
    assert ("needs override" in text) == ("HSA_OVERRIDE_GFX_VERSION" in want)


def test_never_across_major_versions() -> None:
    assert cards.override_for_wheel("gfx1201", ["gfx1100"]) is None  # RDNA4 borrows nothing
    assert cards.override_for_wheel("gfx1151", ["gfx1201"]) is None  # 12.x on gfx1151 crashed (#3531)
    assert cards.override_for_wheel("gfx1103", ["gfx1100"]) == "11.0.0"
    assert cards.override_for_wheel("gfx1103", ["gfx1103", "gfx1100"]) is None


def test_mixed_cards_use_the_per_gpu_form() -> None:
    r6700_second = gpu(1, "gfx1031", "AMD Radeon RX 6700 XT", 12 * GIB)
    got = exports(render([XTX, r6700_second], PT))
    assert got == {"PYTORCH_ROCM_ARCH": "gfx1030;gfx1100", "HSA_OVERRIDE_GFX_VERSION_1": "10.3.0", **AOT}
    assert exports(render([XTX, r6700_second]))["PYTORCH_ROCM_ARCH"] == "gfx1031;gfx1100"


def test_small_igpu_is_skipped_and_strix_halo_trains_by_usable_memory() -> None:
    text = render([XTX, IGPU])
    assert exports(text)["PYTORCH_ROCM_ARCH"] == "gfx1100"
    assert "780M" in text and "an iGPU with under 24.0 GiB of usable memory" in text
    text = render([HALO])
    assert exports(text)["PYTORCH_ROCM_ARCH"] == "gfx1151"
    assert "63.0 GiB usable (0.5 GiB carve-out + 62.5 GiB GTT)" in text
    assert training_targets([XTX, IGPU], AMD, MIN_VRAM, MIN_UNIFIED) == ["gfx1100"]


def test_same_card_same_file_and_a_card_swap_changes_it() -> None:
    # a re-run reads new volatile values (VRAM in use, the ROCm version seen): the file must not follow them,
    # or every deploy would rewrite it
    busy = dataclasses.replace(XTX, vram_used=20 * GIB, rocm_version="7.14")
    assert render([busy]) == render([XTX])
    swapped = render([R9070])
    assert exports(swapped)["PYTORCH_ROCM_ARCH"] == "gfx1201" != exports(render([XTX]))["PYTORCH_ROCM_ARCH"]
    assert "RX 9070 XT" in swapped and "RX 7900 XTX" not in swapped


def test_fact_dicts_become_gpu_records() -> None:
    as_dict = {**XTX.to_dict(), "something_new": 1}
    assert as_gpus([as_dict]) == [XTX]


def test_no_training_gpu_gives_no_exports() -> None:
    env = gpu_env([gpu(0, "gfx1013", "unknown RDNA1", 8 * GIB)], AMD, MIN_VRAM)
    assert env.training == [] and env.exports == {} and "not usable with" in env.comments[0]


def test_the_template_is_found_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyinfra's files.template resolves a relative src from the cwd: the role passes its own folder's file
    monkeypatch.chdir(tmp_path)
    assert TEMPLATE.is_absolute() and TEMPLATE.parent.parent.name == "gpu_env"
    assert exports(render([XTX])) == {"PYTORCH_ROCM_ARCH": "gfx1100", **AOT}
