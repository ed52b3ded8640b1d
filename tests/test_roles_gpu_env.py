"""roles/gpu_env: GPUs in -> /etc/profile.d/radeonlab-gpu.sh out (the rendered template itself)."""

from __future__ import annotations

from pathlib import Path

from pyinfra.api.util import get_template
from radeonlab.roles.gpu import cards
from radeonlab.roles.gpu_env import TEMPLATE
from radeonlab.roles.gpu_env.plan import as_gpus, gpu_env

GIB = 1024**3
MIN_VRAM = 6 * GIB
ROCM = "7.2.4"


def gpu(index: int, gfx: str, name: str, vram: int, node: int | None = None) -> cards.Gpu:
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
    )


XTX = gpu(0, "gfx1100", "AMD Radeon RX 7900 XTX", 24 * GIB)
R6700 = gpu(0, "gfx1031", "AMD Radeon RX 6700 XT", 12 * GIB)
R9070 = gpu(0, "gfx1201", "AMD Radeon RX 9070 XT", 16 * GIB)
IGPU = gpu(1, "gfx1103", "AMD Radeon 780M Graphics", 512 * 1024**2)


def render(gpus: list[cards.Gpu]) -> str:
    env = gpu_env(gpus, ROCM, MIN_VRAM)
    return get_template(str(TEMPLATE), {"trim_blocks": True, "lstrip_blocks": True}).render(
        host_name="ws1", rocm_version=ROCM, comments=env.comments, exports=env.exports
    )


def exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, value = line.removeprefix("export ").split("=", 1)
            out[key] = value.strip('"')
    return out


def test_7900xtx_native_no_override() -> None:
    text = render([XTX])
    assert exports(text) == {"PYTORCH_ROCM_ARCH": "gfx1100"}
    assert "RX 7900 XTX, gfx1100" in text and "native on ROCm 7.2.4" in text


def test_6700xt_needs_10_3_0() -> None:
    text = render([R6700])
    # The card is gfx1031; with the override HIP sees it as gfx1030, the target extensions must be built for.
    assert exports(text) == {"PYTORCH_ROCM_ARCH": "gfx1030", "HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    assert "RX 6700 XT, gfx1031" in text and "needs override 10.3.0" in text


def test_9070xt_native_no_override() -> None:
    assert exports(render([R9070])) == {"PYTORCH_ROCM_ARCH": "gfx1201"}


def test_mixed_cards_use_the_per_gpu_form() -> None:
    r6700_second = gpu(1, "gfx1031", "AMD Radeon RX 6700 XT", 12 * GIB)
    got = exports(render([XTX, r6700_second]))
    assert got == {"PYTORCH_ROCM_ARCH": "gfx1030;gfx1100", "HSA_OVERRIDE_GFX_VERSION_1": "10.3.0"}


def test_small_igpu_is_skipped_and_commented() -> None:
    text = render([XTX, IGPU])
    assert exports(text) == {"PYTORCH_ROCM_ARCH": "gfx1100"}  # 780M would need 11.0.0, but is not trained on
    assert "780M" in text and "not used for training" in text


def test_same_input_same_file_and_a_card_swap_changes_it() -> None:
    assert render([XTX]) == render([XTX])
    assert render([XTX]) != render([R9070])


def test_fact_dicts_become_gpu_records() -> None:
    as_dict = {**XTX.to_dict(), "something_new": 1}
    assert as_gpus([as_dict]) == [XTX]


def test_no_training_gpu_gives_no_exports() -> None:
    env = gpu_env([gpu(0, "gfx1010", "RX 5700 XT", 8 * GIB)], ROCM, MIN_VRAM)
    assert env.training == [] and env.exports == {} and "not supported" in env.comments[0]


def test_template_is_the_role_own(tmp_path: Path) -> None:
    assert TEMPLATE.is_file() and TEMPLATE.parent.parent.name == "gpu_env"
