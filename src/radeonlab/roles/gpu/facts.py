"""pyinfra facts for the GPU role."""

from __future__ import annotations

from pyinfra.api import FactBase
from typing_extensions import override

from radeonlab.roles.gpu import cards, pci, sysfs


class RadeonGpus(FactBase[list[dict[str, object]]]):
    """
    Returns the host's AMD GPUs from KFD topology and DRM sysfs, in KFD node order (CPU nodes left out),
    with what the given ROCm version needs for each:

    .. code:: python

        [
            {
                "node": 1,
                "rocr_index": 0,
                "card": "card0",
                "pci_slot": "0000:03:00.0",
                "gfx": "gfx1100",
                "gfx_target_version": 110000,
                "device_id": 29772,
                "revision": 200,
                "name": "AMD Radeon RX 7900 XTX",
                "family": "RDNA3",
                "vram_total": 25753026560,
                "igpu": False,
                "bf16": True,
                "native": True,
                "override": None,
                "supported": True,
                ...
            },
        ]

    Returns ``[]`` on a host without KFD (no output). ``sysfs_root`` reads a sysfs tree somewhere else
    (the sandbox's recorded cards).
    """

    default = list

    @override
    def command(self, sysfs_root: str = "/", rocm_version: str = cards.FALLBACK_ROCM_VERSION) -> str:
        # process() only receives the output: keep the version it needs (pyinfra's Uptime fact does the same).
        self._rocm_version = str(rocm_version)  # the pyinfra CLI passes "6.2" as a float
        return sysfs.dump_command(sysfs_root)

    @override
    def process(self, output: list[str]) -> list[dict[str, object]]:
        rocm_version = getattr(self, "_rocm_version", cards.FALLBACK_ROCM_VERSION)
        return [gpu.to_dict() for gpu in sysfs.parse_dump(output, rocm_version)]


class AmdPciGpus(FactBase[list[dict[str, object]]]):
    """
    Returns the host's AMD display devices from the PCI bus (``/sys/bus/pci/devices``), driven or not:

    .. code:: python

        [{"pci_slot": "0000:03:00.0", "device_id": 29772, "revision": 200,
          "name": "AMD Radeon RX 7900 XTX", "apu": False, "driver": None}]

    ``driver`` is the bound kernel driver (None: the running kernel does not drive the card, so KFD does not
    list it). ``sysfs_root`` as for `RadeonGpus`.
    """

    default = list

    @override
    def command(self, sysfs_root: str = "/") -> str:
        return pci.dump_command(sysfs_root)

    @override
    def process(self, output: list[str]) -> list[dict[str, object]]:
        return [gpu.to_dict() for gpu in pci.parse_dump(output)]
