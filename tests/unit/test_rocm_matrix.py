# ruff: noqa: E501 - the expected warning texts are kept whole, one case per line
"""roles/rocm/matrix.py: AMD's support matrix for Radeon and Ryzen APUs and the rule (one warning naming the
matrix for a host outside it, nothing for a listed one). Inputs are what pyinfra's LinuxDistribution fact and
`uname -r` give on real hosts (kernel release strings as Ubuntu's HWE/OEM/GA kernels print them)."""

from __future__ import annotations

import pytest

from radeonlab.roles.rocm import matrix


@pytest.mark.parametrize(
    ("distro", "major", "minor", "uname", "targets"),
    [
        ("Ubuntu", 24, 4, "6.17.0-14-generic", ["gfx1100"]),  # 24.04.4 HWE 6.17, Radeon
        ("Ubuntu", 24, 4, "7.0.0-10-generic", ["gfx1201"]),  # 24.04.5 HWE 7.0 (10.1 notes)
        ("Ubuntu", 22, 4, "6.8.0-90-generic", ["gfx1100"]),  # 22.04.5 HWE 6.8
        ("Ubuntu", 26, 4, "7.0.0-5-generic", ["gfx1151"]),  # 26.04 GA, Strix Halo
        ("Ubuntu", 24, 4, "6.17.0-1028-oem", ["gfx1151"]),  # APU on 24.04 with the OEM kernel
        ("RedHat", 9, 8, "5.14.0-570.el9.x86_64", ["gfx1100"]),  # listed (the role refuses RHEL elsewhere)
    ],
)
def test_listed_hosts_get_no_warning(distro: str, major: int, minor: int, uname: str, targets: list) -> None:
    assert matrix.matrix_warning(distro, major, minor, uname, targets) is None


@pytest.mark.parametrize(
    ("distro", "major", "minor", "uname", "targets", "said"),
    [
        ("Debian", 12, 8, "6.1.0-28-amd64", ["gfx1100"], "Debian 12: AMD lists Debian only for Instinct parts, not for Radeon"),
        ("Debian", 13, 1, "6.12.38+deb13-amd64", ["gfx1151"], "Debian 13: AMD lists Debian only for Instinct parts, not for Ryzen APUs"),
        ("Ubuntu", 24, 4, "6.8.0-50-generic", ["gfx1100"], "Ubuntu 24.04 with kernel 6.8: AMD lists it with HWE 6.17 or HWE 7.0 for Radeon"),
        ("Ubuntu", 24, 4, "6.8.0-50-generic", ["gfx1151"], "Ubuntu 24.04 with kernel 6.8: AMD lists it with OEM 6.17 for Ryzen APUs"),
        ("Ubuntu", 22, 4, "6.8.0-90-generic", ["gfx1151"], "Ubuntu 22.04 is not listed for Ryzen APUs"),
        ("Ubuntu", 20, 4, "5.15.0-1-generic", ["gfx1100"], "Ubuntu 20.04 is not listed for Radeon"),
    ],
)  # fmt: skip
def test_a_host_outside_the_matrix_gets_one_line_naming_it(
    distro: str, major: int, minor: int, uname: str, targets: list, said: str
) -> None:
    warning = matrix.matrix_warning(distro, major, minor, uname, targets)
    assert warning is not None and said in warning, warning
    assert "\n" not in warning and warning.count(matrix.MATRIX_NAME) == 1
    assert "provisioning anyway" in warning


def test_an_apu_kernel_for_the_wrong_part_is_named_for_that_part_only() -> None:
    # 6.17 generic (HWE) is listed for Radeon on 24.04 but APUs need AMD's OEM 6.17: same series, so the rule
    # (kernel series) accepts it: the OEM/HWE flavour is not told apart by `uname -r`'s numbers alone.
    assert matrix.matrix_warning("Ubuntu", 24, 4, "6.17.0-14-generic", ["gfx1151"]) is None
    # a host with both parts: one warning, each part named
    both = matrix.matrix_warning("Debian", 12, 8, "6.1.0-28-amd64", ["gfx1100", "gfx1151"])
    assert both is not None and "for Radeon" in both and "for Ryzen APUs" in both


def test_parts_and_kernel_series() -> None:
    assert matrix.parts(["gfx1100", "gfx1151", None]) == ["radeon", "ryzen"]
    assert matrix.parts([]) == ["radeon"]
    assert matrix.kernel_series("6.17.0-1028-oem") == "6.17"
    assert matrix.kernel_series("6.12.38+deb13-amd64") == "6.12"
    assert matrix.kernel_series(None) == ""
