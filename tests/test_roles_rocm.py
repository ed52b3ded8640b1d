"""roles/rocm's pure logic: (distribution fact, data) in -> sources lines, pin, packages out."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import DeployError
from radeonlab.roles.python_stack.defaults import PYTORCH_ROCM_PAIRING
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm.defaults import DEFAULTS


def fact(name: str, major: int, minor: int, codename: str) -> dict:
    """pyinfra's LinuxDistribution fact as it parses /etc/os-release."""
    return {"name": name, "major": major, "minor": minor, "release_meta": {"VERSION_CODENAME": codename}}


def data(**kv: object) -> dict:
    return {**DEFAULTS, **kv}


KEY = "signed-by=/etc/apt/keyrings/rocm.gpg"
CORE_KEY = "signed-by=/etc/apt/keyrings/amdrocm.gpg"


@pytest.mark.parametrize(
    ("distro", "suite", "core_dir"),
    [
        (fact("Ubuntu", 22, 4, "jammy"), "jammy", "ubuntu2204"),
        (fact("Ubuntu", 24, 4, "noble"), "noble", "ubuntu2404"),
        (fact("Debian", 12, 0, "bookworm"), "jammy", "debian12"),  # AMD publishes no Debian suite
    ],
)
def test_sources_lines_for_both_streams(distro: dict, suite: str, core_dir: str) -> None:
    codename = repos.check_supported("ws1", repos.distro_from_fact(distro))
    assert repos.legacy_sources(data(), codename) == [
        f"deb [arch=amd64 {KEY}] https://repo.radeon.com/rocm/apt/7.2.4 {suite} main",
        f"deb [arch=amd64 {KEY}] https://repo.radeon.com/graphics/7.2.4/ubuntu {suite} main",
    ]
    assert repos.coresdk_sources(data(rocm_version="7.12"), codename) == [
        f"deb [arch=amd64 {CORE_KEY}] https://repo.amd.com/rocm/packages/{core_dir} stable main"
    ]


def test_a_dot_zero_release_is_published_without_the_zero() -> None:
    assert repos.version_dir("7.2.0") == "7.2"
    assert repos.version_dir("7.2.4") == "7.2.4"
    lines = repos.legacy_sources(data(rocm_version="7.2.0"), "jammy")
    assert lines[0].endswith("/rocm/apt/7.2 jammy main")
    assert "/graphics/7.2/ubuntu jammy main" in lines[1]


def test_no_graphics_line_before_7_0() -> None:
    assert len(repos.legacy_sources(data(rocm_version="6.4.1"), "noble")) == 1


def test_sandbox_urls_are_only_data() -> None:
    lines = repos.legacy_sources(
        data(rocm_repo_url="http://127.0.0.1:8000/amd/rocm/apt/", rocm_graphics_repo_url="http://x/graphics"),
        "noble",
    )
    assert lines[0] == f"deb [arch=amd64 {KEY}] http://127.0.0.1:8000/amd/rocm/apt/7.2.4 noble main"


@pytest.mark.parametrize(
    "distro",
    [
        fact("Ubuntu", 20, 4, "focal"),
        fact("Debian", 11, 0, "bullseye"),
        fact("CentOS", 9, 0, ""),
        {"name": None},
    ],
)
def test_unsupported_distribution_raises_naming_the_host(distro: dict) -> None:
    with pytest.raises(DeployError) as e:
        repos.check_supported("ws7", repos.distro_from_fact(distro))
    message = str(e.value)
    assert message.startswith("ws7: ") and "not supported" in message and "\n" not in message


def test_pin_names_the_origin() -> None:
    assert repos.pin("repo.radeon.com") == "Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n"
    assert "o=repo.amd.com" in repos.pin("repo.amd.com")


def test_packages_minimal_full_and_per_family() -> None:
    assert repos.legacy_packages(data()) == ["rocm-hip-runtime", "rocminfo", "rocm-smi-lib"]
    assert repos.legacy_packages(data(rocm_packages_full=True)) == ["rocm"]
    got = repos.coresdk_packages(
        data(rocm_version="7.12"), ["gfx1100", "gfx1101", "gfx1201", "gfx1031", None]
    )
    assert got == ["amdrocm7.12-gfx103x", "amdrocm7.12-gfx110x", "amdrocm7.12-gfx120x"]


def test_driver_repository_per_rocm_series() -> None:
    assert repos.driver_sources(data(), "noble") == [
        f"deb [arch=amd64 {KEY}] https://repo.radeon.com/amdgpu/30.30/ubuntu noble main"
    ]
    assert repos.driver_version(data(rocm_version="7.0.2")) == "30.10"
    assert repos.driver_version(data(rocm_version="7.1")) == "30.20"
    with pytest.raises(ValueError):
        repos.driver_sources(data(rocm_version="7.12"), "noble")


def test_default_rocm_pairs_with_the_pinned_torch() -> None:
    from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK

    assert (
        repos.torch_pairing_problem(DEFAULTS["rocm_version"], STACK["pytorch_version"], PYTORCH_ROCM_PAIRING)
        is None
    )
    assert repos.torch_pairing_problem("7.1.1", "2.13.0", PYTORCH_ROCM_PAIRING) == (
        "torch 2.13.0 is built for ROCm 7.2, not ROCm 7.1.1"
    )
    assert repos.torch_pairing_problem("6.2.4", "2.6.0", PYTORCH_ROCM_PAIRING) is None
    assert repos.torch_pairing_problem("6.2.1", "2.6.0", PYTORCH_ROCM_PAIRING) is not None
    assert "no known ROCm pairing" in repos.torch_pairing_problem("7.2.4", "3.0.0", PYTORCH_ROCM_PAIRING)
