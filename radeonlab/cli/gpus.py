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

GIB = 1024**3


def default_rocm_version() -> str:
    """The ROCm role's rocm_version, or the GPU role's fallback until that role exists."""
    try:
        rocm_defaults = importlib.import_module("radeonlab.roles.rocm.defaults")
    except ModuleNotFoundError:
        return cards.FALLBACK_ROCM_VERSION
    return str(rocm_defaults.DEFAULTS.get("rocm_version", cards.FALLBACK_ROCM_VERSION))


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _table(gpus: list[cards.Gpu], rocm_version: str) -> Table:
    table = Table(
        title=f"AMD GPUs (ROCm {rocm_version})", box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False
    )
    for column in (
        "node",
        "card",
        "name",
        "gfx",
        "VRAM GiB\nused/all",
        "bf16",
        "iGPU",
        "override",
        "native",
    ):
        # ids and numbers never wrap (a wrapped "gfx1100" or "23.9/24.0" misreads); the name may
        table.add_column(column, no_wrap=column != "name", min_width=14 if column == "name" else None)
    for gpu in gpus:
        table.add_row(
            str(gpu.node),
            gpu.card or "-",
            gpu.name,
            gpu.gfx or "?",
            f"{_gib(gpu.vram_used)}/{_gib(gpu.vram_total)}",
            _yes(gpu.bf16),
            _yes(gpu.igpu),
            gpu.override or ("-" if gpu.supported else "unsupported"),
            _yes(gpu.native),
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
    """List AMD GPUs from KFD and DRM sysfs: gfx target, VRAM, bf16, and the override a ROCm release needs."""
    version = rocm_version or default_rocm_version()
    gpus = read_sysfs(sysfs_root, version)
    if not gpus:
        raise RadeonlabError(f"no AMD GPU found under {sysfs_root} (no KFD GPU node in [sys/]class/kfd)")
    if as_json:
        click.echo(json.dumps([gpu.to_dict() for gpu in gpus], indent=2))
        return
    Console().print(_table(gpus, version))
    arch = cards.rocm_arch_list(gpus)
    if arch:
        click.echo(f"PYTORCH_ROCM_ARCH={arch}")
