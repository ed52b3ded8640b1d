"""`radeonlab gpus`: the AMD GPUs in a sysfs tree (this machine's by default) and what ROCm needs for them."""

from __future__ import annotations

import importlib
import json

import click
from rich import box
from rich.console import Console
from rich.table import Table

from radeonlab.errors import RadeonlabError
from radeonlab.roles.gpu import cards
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu.sysfs import read_sysfs
from radeonlab.roles.gpu_env.plan import TorchBuild, for_torch
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.roles.python_stack.defaults import TORCH_SOURCES
from radeonlab.roles.python_stack.plan import pytorch_rocm_series
from radeonlab.units import gib


def default_rocm_version() -> str:
    """The ROCm role's rocm_version, or the GPU role's fallback until that role exists."""
    try:
        rocm_defaults = importlib.import_module("radeonlab.roles.rocm.defaults")
    except ModuleNotFoundError:
        return cards.FALLBACK_ROCM_VERSION
    return str(rocm_defaults.DEFAULTS.get("rocm_version", cards.FALLBACK_ROCM_VERSION))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def decisions(gpus: list[cards.Gpu], rocm_version: str) -> dict[str, list[str]]:
    """The override decision per torch source, per GPU: "-" (no override: the wheel has the card's code),
    the HSA_OVERRIDE_GFX_VERSION value, or "unsupported"."""
    out = {}
    for source in TORCH_SOURCES:
        build = TorchBuild(source, rocm_version if source == "amd" else _pytorch_series(rocm_version))
        out[source] = [
            g.override or ("-" if g.supported else "unsupported")
            for g in (for_torch(gpu, build) for gpu in gpus)
        ]
    return out


def _pytorch_series(rocm_version: str) -> str:
    stack = {**STACK_DEFAULTS}
    return pytorch_rocm_series(stack, rocm_version)


def _table(gpus: list[cards.Gpu], rocm_version: str) -> Table:
    table = Table(
        title=f"AMD GPUs (ROCm {rocm_version}; override per torch source)",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    for column in ("node", "card", "name", "gfx", "VRAM GiB\nused/all", "usable\nGiB", "bf16", "iGPU",
                   "override\nAMD wheels", "override\npytorch.org"):  # fmt: skip
        # ids and numbers never wrap (a wrapped "gfx1100" or "23.9/24.0" misreads); the name may
        table.add_column(column, no_wrap=column != "name", min_width=14 if column == "name" else None)
    decided = decisions(gpus, rocm_version)
    for i, gpu in enumerate(gpus):
        table.add_row(
            str(gpu.node),
            gpu.card or "-",
            gpu.name,
            gpu.gfx or "?",
            f"{gib(gpu.vram_used)}/{gib(gpu.vram_total)}",
            gib(gpu.usable_memory if gpu.usable_memory is not None else gpu.vram_total),
            _yes(gpu.bf16),
            _yes(gpu.igpu),
            decided["amd"][i],
            decided["pytorch"][i],
        )
    return table


@click.command(name="gpus")
@click.option(
    "--sysfs",
    "sysfs_root",
    default=str(GPU_DEFAULTS["gpu_sysfs_root"]),
    show_default=True,
    help="Where to read: a filesystem root (/ reads /sys/class/...), a sysfs tree (/sys), or a recorded tree "
    "of either shape.",
)
@click.option(
    "--rocm-version", default=None, help="ROCm release to judge support against [default: the ROCm role's]."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def command(sysfs_root: str, rocm_version: str | None, as_json: bool) -> None:
    """List AMD GPUs from KFD and DRM sysfs: gfx target, VRAM and usable memory, bf16, and the override each
    torch source needs (AMD's multi-arch wheels, PyTorch's ROCm wheels)."""
    version = rocm_version or default_rocm_version()
    gpus = read_sysfs(sysfs_root, version)
    if not gpus:
        raise RadeonlabError(f"no AMD GPU found under {sysfs_root} (no KFD GPU node in [sys/]class/kfd)")
    if as_json:
        decided = decisions(gpus, version)
        rows = [
            {**gpu.to_dict(), "override_by_torch_source": {src: decided[src][i] for src in decided}}
            for i, gpu in enumerate(gpus)
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    Console().print(_table(gpus, version))
    arch = cards.rocm_arch_list(for_torch(g, TorchBuild("amd", version)) for g in gpus)
    if arch:
        click.echo(f"PYTORCH_ROCM_ARCH={arch} (AMD's wheels)")
