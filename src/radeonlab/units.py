"""How memory sizes and GPU readings read for people: one formatter for the CLI's tables and lines and the
dashboard's page, so both say the same thing about the same card.

Memory is in GiB (2**30 bytes): amdgpu's mem_info_vram_* and amd-smi count VRAM in binary units, and a card
sold as "24 GB" has 24 GiB (the RX 7900 XTX's 24560 MiB read as 25.8 decimal GB, which looked like a bigger
card). A reading a source did not report is "unknown", never a number and never a bare "?".
"""

from __future__ import annotations

from radeonlab.contract.records import GIB

UNKNOWN = "unknown"


def gib(n: int | None) -> str:
    """Bytes as GiB with one decimal ("1.5"), "?" when unknown (one side of a used/total pair)."""
    return f"{n / GIB:.1f}" if n is not None else "?"


def vram_text(used: int | None, total: int | None) -> str:
    """ "1.5/24.0 GiB"; "unknown" when the source reported neither."""
    if used is None and total is None:
        return UNKNOWN
    return f"{gib(used)}/{gib(total)} GiB"


def percent_text(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.0f}%"


def watts_text(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.0f} W"


def celsius_text(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.0f} °C"
