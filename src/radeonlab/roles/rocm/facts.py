"""Facts the ROCm role reads: parse only, never change anything."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class RocmInstalledVersion(FactBase):
    """The installed ROCm release as /opt/rocm/.info/version says it ("7.2.4-97"), or None."""

    def command(self, path: str = "/opt/rocm/.info/version") -> str:
        # Prints nothing (exit 0) when ROCm is not installed.
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = "\n".join(output).strip()
        return text or None


class SecureBootState(FactBase):
    """Whether UEFI Secure Boot is on: True, False, or None when neither source answers (BIOS boot, no
    efivarfs). `mokutil --sb-state` prints "SecureBoot enabled"/"SecureBoot disabled"; without mokutil the
    SecureBoot-<GUID> EFI variable is read: 4 bytes of attributes, then the value (1 = on)."""

    def command(self) -> str:
        return (
            "command -v mokutil >/dev/null 2>&1 && mokutil --sb-state 2>/dev/null; "
            "for f in /sys/firmware/efi/efivars/SecureBoot-*; do "
            '[ -r "$f" ] && echo "efivar $(od -An -tu1 -j4 -N1 "$f" | tr -d \' \')"; '
            "done; true"
        )

    def process(self, output: list[str]) -> bool | None:
        for line in output:
            text = line.strip().lower()
            if text.startswith("secureboot "):
                return text.endswith("enabled")
            if text.startswith("efivar "):
                return text.split()[-1] == "1"
        return None
