"""GPU readings on a host: VRAM used/total, temperatures, power, GPU busy %.

Three sources, parsed into the same GpuReading (stdlib only: this module runs on the host's python3):
- amd-smi (`amd-smi metric --json`): the tool ROCm keeps (ROCm 10.1 no longer builds ROCm SMI,
docs/notes/rocm-facts.md).
  Two JSON shapes seen: a list of GPU objects (older amd-smi) and {"gpu_data": [...]} (AMD-SMI 26.x);
  values are {"value": n, "unit": "MB"} or "N/A". `read_local_gpus()` uses it when present, else sysfs.
- drm sysfs (mem_info_vram_*, hwmon temp*_input / power1_*): always there with amdgpu, no ROCm needed,
  fast. `read_gpus()` reads them for every AMD card, keyed by KFD node, so they map onto the host
  record's GPU indexes; the job stream reads it every few seconds (amd-smi takes about a second a call).
- rocm-smi output (--json, the "GPU[i] : key: value" text, and the concise table of plain `rocm-smi`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MILLI, MICRO = 1e-3, 1e-6  # hwmon units: millidegrees Celsius, microwatts
# rocm-smi key -> GpuReading field. Keys vary by ROCm release; all seen in the recorded outputs.
ROCM_SMI_KEYS: dict[str, str] = {
    "VRAM Total Memory (B)": "vram_total",
    "VRAM Total Used Memory (B)": "vram_used",
    "Temperature (Sensor edge) (C)": "temp_edge_c",
    "Temperature (Sensor junction) (C)": "temp_junction_c",
    "Temperature (Sensor memory) (C)": "temp_mem_c",
    "Average Graphics Package Power (W)": "power_w",
    "Current Socket Graphics Package Power (W)": "power_w",
    "GPU Memory Allocated (VRAM%)": "vram_percent",
    "GPU memory use (%)": "vram_percent",
}
HWMON_TEMP_LABELS: dict[str, str] = {
    "edge": "temp_edge_c",
    "junction": "temp_junction_c",
    "mem": "temp_mem_c",
}


@dataclass
class GpuReading:
    """One GPU's readings; None where the source does not report a value."""

    index: int
    vram_used: int | None = None
    vram_total: int | None = None
    temp_edge_c: float | None = None
    temp_junction_c: float | None = None
    temp_mem_c: float | None = None
    power_w: float | None = None
    vram_percent: float | None = None
    busy_percent: float | None = None  # GPU busy: sysfs gpu_busy_percent, amd-smi usage.gfx_activity
    device_id: int | None = None  # PCI id (sysfs only): is the card still the one the host record describes?
    revision: int | None = None
    source: str = ""

    @property
    def temp_c(self) -> float | None:
        """The temperature to show: edge (what every card has), else junction."""
        return self.temp_edge_c if self.temp_edge_c is not None else self.temp_junction_c

    @property
    def vram_fraction(self) -> float | None:
        """VRAM used / total (0..1), from bytes when known, else from rocm-smi's percentage."""
        if self.vram_used is not None and self.vram_total:
            return self.vram_used / self.vram_total
        return self.vram_percent / 100 if self.vram_percent is not None else None


def _number(text: str) -> float | None:
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", str(text))
    return float(m.group(1)) if m else None  # "N/A", "N/A (Secondary die)" -> None


def _apply(reading: GpuReading, key: str, value: str) -> None:
    name = ROCM_SMI_KEYS.get(key.strip())
    if name is None:
        return
    number = _number(value)
    if number is None or getattr(reading, name) is not None:
        return  # first value wins: "Average" power comes before other power lines
    setattr(reading, name, int(number) if name.startswith("vram_") and name != "vram_percent" else number)


def parse_rocm_smi_json(text: str) -> list[GpuReading]:
    """rocm-smi ... --json: {"card0": {...}, "system": {...}}; warnings before the JSON are skipped."""
    start = text.find("{")
    data = json.loads(text[start:]) if start >= 0 else {}
    out = []
    for card, values in data.items():
        m = re.fullmatch(r"card(\d+)", card)
        if m and isinstance(values, dict):
            reading = GpuReading(index=int(m.group(1)), source="rocm-smi-json")
            for key, value in values.items():
                _apply(reading, key, str(value))
            out.append(reading)
    return sorted(out, key=lambda r: r.index)


def parse_rocm_smi_text(text: str) -> list[GpuReading]:
    """rocm-smi's per-GPU text ("GPU[0]\\t\\t: VRAM Total Memory (B): 536870912"), else its concise table."""
    cards: dict[int, GpuReading] = {}
    for line in text.splitlines():
        m = re.match(r"\s*GPU\[(\d+)\]\s*:\s*(.*)$", line)
        if m and ":" in m.group(2):
            key, value = m.group(2).rsplit(":", 1)
            reading = cards.setdefault(int(m.group(1)), GpuReading(int(m.group(1)), source="rocm-smi-text"))
            _apply(reading, key, value)
    return sorted(cards.values(), key=lambda r: r.index) if cards else parse_rocm_smi_concise(text)


def parse_rocm_smi_concise(text: str) -> list[GpuReading]:
    """Plain `rocm-smi` (three table layouts seen: ROCm 3-5, 6.x, 7.x): temp, average power, VRAM%."""
    out = []
    in_table = False  # only rows under a header with "Temp" (other tables, e.g. --showhw, look alike)
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in ("GPU", "Device"):
            in_table = "Temp" in words
        if not in_table or not words or not words[0].isdigit() or len(words) < 6:
            continue
        temp = next((w for w in words if re.fullmatch(r"\d+(?:\.\d+)?(?:°C|c)", w)), None)
        power = next((w for w in words if re.fullmatch(r"\d+(?:\.\d+)?W", w)), None)
        vram_pct = words[-2] if words[-2].endswith("%") else None
        out.append(
            GpuReading(
                index=int(words[0]),
                temp_edge_c=_number(temp) if temp else None,
                power_w=_number(power) if power else None,
                vram_percent=_number(vram_pct) if vram_pct else None,
                source="rocm-smi-concise",
            )
        )
    return out


def parse_sysfs_values(index: int, values: Mapping[str, str]) -> GpuReading:
    """One card from its drm device files: {"mem_info_vram_used": "...", "hwmon/temp1_input": "...", ...}."""
    clean = {k: v.replace("\0", "").strip() for k, v in values.items()}
    reading = GpuReading(index=index, source="sysfs")
    for field in ("vram_used", "vram_total"):
        value = _number(clean.get(f"mem_info_{field}", ""))
        setattr(reading, field, int(value) if value is not None else None)
    reading.busy_percent = _number(clean.get("gpu_busy_percent", ""))
    for field, key in (("device_id", "device"), ("revision", "revision")):
        with contextlib.suppress(KeyError, ValueError):  # absent or unreadable: unknown
            setattr(reading, field, int(clean[key], 16))  # sysfs prints "0x744c"
    for key, text in clean.items():
        m = re.fullmatch(r"hwmon/temp(\d+)_input", key)
        millidegrees = _number(text) if m else None
        if m and millidegrees is not None:
            label = clean.get(f"hwmon/temp{m.group(1)}_label", "edge" if m.group(1) == "1" else "")
            if label in HWMON_TEMP_LABELS:
                setattr(reading, HWMON_TEMP_LABELS[label], millidegrees * MILLI)
    # power1_average on older kernels/cards, power1_input on newer ones (and APUs report both)
    microwatts = _number(clean.get("hwmon/power1_average") or clean.get("hwmon/power1_input") or "")
    reading.power_w = microwatts * MICRO if microwatts is not None else None
    return reading


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().replace(b"\0", b"").decode(errors="replace").strip()
    except OSError:
        return None


def sysfs_cards(sysfs_root: str = "/sys") -> tuple[dict[int, dict[str, str]], dict[int, int]]:
    """Every AMD card's drm device values by render minor, and the KFD node of each render minor."""
    root = sysfs_root.rstrip("/") or "/"
    cards: dict[int, dict[str, str]] = {}
    for dev in sorted(glob.glob(os.path.join(root, "class/drm/renderD*/device"))):
        if _read(os.path.join(dev, "vendor")) != "0x1002":
            continue
        minor = int(os.path.basename(os.path.dirname(dev))[len("renderD") :])
        values: dict[str, str] = {}
        names = ["device", "revision", "mem_info_vram_total", "mem_info_vram_used", "gpu_busy_percent"]
        for name in names:
            if (text := _read(os.path.join(dev, name))) is not None:
                values[name] = text
        for path in glob.glob(os.path.join(dev, "hwmon/hwmon*/*")):
            name = os.path.basename(path)
            wanted = re.fullmatch(r"temp\d+_(input|label)|power1_(average|input)", name)
            if wanted and (text := _read(path)) is not None:
                values[f"hwmon/{name}"] = text
        cards[minor] = values
    node_of_minor: dict[int, int] = {}
    for props in glob.glob(os.path.join(root, "class/kfd/kfd/topology/nodes/*/properties")):
        text = _read(props) or ""
        m = re.search(r"^drm_render_minor (\d+)$", text, re.M)
        if m and m.group(1) != "0":
            node_of_minor[int(m.group(1))] = int(os.path.basename(os.path.dirname(props)))
    return cards, node_of_minor


def read_gpus(host_gpus: Sequence[Mapping[str, Any]] = (), sysfs_root: str = "/sys") -> list[GpuReading]:
    """This host's GPU readings from drm sysfs, indexed like the host record's "gpus" (by KFD node).

    Cards the host record does not list are left out when a host record is given; without one, cards are
    numbered in render-minor order."""
    cards, node_of_minor = sysfs_cards(sysfs_root)
    if not host_gpus:
        return [parse_sysfs_values(i, cards[m]) for i, m in enumerate(sorted(cards))]
    index_of_node = {int(g["node"]): int(g["index"]) for g in host_gpus if g.get("node") is not None}
    out = [
        parse_sysfs_values(index_of_node[node_of_minor[m]], values)
        for m, values in cards.items()
        if node_of_minor.get(m) in index_of_node
    ]
    return sorted(out, key=lambda r: r.index)


# amd-smi JSON -> GpuReading: (path in one GPU's object, field, bytes per unit where a size)
AMD_SMI_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
AMD_SMI_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("mem_usage", "used_vram"), "vram_used"),
    (("mem_usage", "total_vram"), "vram_total"),
    (("usage", "gfx_activity"), "busy_percent"),
    (("temperature", "edge"), "temp_edge_c"),
    (("temperature", "hotspot"), "temp_junction_c"),
    (("temperature", "mem"), "temp_mem_c"),
    (("power", "socket_power"), "power_w"),
)


def _amd_smi_value(node: object) -> tuple[float, str] | None:
    value, unit = (node.get("value"), str(node.get("unit") or "")) if isinstance(node, dict) else (node, "")
    number = _number(str(value)) if value is not None else None
    return None if number is None else (number, unit)


def parse_amd_smi_json(text: str) -> list[GpuReading]:
    """`amd-smi metric --json` (either shape; warnings printed before the JSON are skipped) -> readings
    indexed by amd-smi's "gpu" number. Sizes become bytes ("MB" is AMD-SMI's MiB); "N/A" is None."""
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    data = json.loads(text[start:]) if start >= 0 else []
    items = data.get("gpu_data", []) if isinstance(data, dict) else data
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("gpu"), int):
            continue
        reading = GpuReading(index=item["gpu"], source="amd-smi")
        for path, name in AMD_SMI_FIELDS:
            node: object = item
            for key in path:
                node = node.get(key) if isinstance(node, dict) else None
            found = _amd_smi_value(node)
            if found is None:
                continue
            number, unit = found
            if name.startswith("vram_"):
                setattr(reading, name, int(number * AMD_SMI_UNITS.get(unit, 2**20)))
            else:
                setattr(reading, name, number)
        out.append(reading)
    return sorted(out, key=lambda r: r.index)


AMD_SMI_ARGV = ("amd-smi", "metric", "--json")


def read_local_gpus(
    sysfs_root: str = "/sys",
    host_gpus: Sequence[Mapping[str, object]] = (),
    amd_smi: str | None = None,
    timeout: float = 10.0,
) -> list[GpuReading]:
    """This host's GPU readings: from amd-smi when it is installed and answers, else from sysfs (always
    there with amdgpu). `amd_smi`: the tool's path (default: found on PATH or under /opt/rocm/bin).

    amd-smi numbers GPUs its own way; without a host record the indexes are amd-smi's. Where amd-smi
    reports no busy % or VRAM (older releases), sysfs fills them in.
    """
    import shutil
    import subprocess

    sysfs = read_gpus(host_gpus, sysfs_root)
    tool = amd_smi or shutil.which(AMD_SMI_ARGV[0]) or shutil.which(AMD_SMI_ARGV[0], path="/opt/rocm/bin")
    if not tool:
        return sysfs
    try:
        done = subprocess.run(
            [tool, *AMD_SMI_ARGV[1:]], capture_output=True, text=True, timeout=timeout, check=False
        )
        readings = parse_amd_smi_json(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        readings = []
    if not readings:
        return sysfs
    by_index = {r.index: r for r in sysfs}
    for reading in readings:
        fallback = by_index.get(reading.index)
        if fallback is not None:
            for name in ("busy_percent", "vram_used", "vram_total", "device_id", "revision"):
                if getattr(reading, name) is None:
                    setattr(reading, name, getattr(fallback, name))
    return readings
