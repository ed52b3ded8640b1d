# ruff: noqa: E501 - AMD's instructions are quoted verbatim, one command per line
"""roles/rocm's pure logic: (distribution fact, data, GPUs) in -> sources line, key, pin, packages out, for
every distribution x stream x layout, compared with AMD's published instructions (quoted, with source)."""

from __future__ import annotations

import re

import pytest
from pyinfra.api.exceptions import DeployError

from radeonlab.roles.python_stack.defaults import PYTORCH_ROCM_PAIRING, torch_pairing
from radeonlab.roles.rocm import releases, repos
from radeonlab.roles.rocm.defaults import DEFAULTS


def fact(name: str, major: int, minor: int, codename: str) -> dict:
    """pyinfra's LinuxDistribution fact as it parses /etc/os-release."""
    return {"name": name, "major": major, "minor": minor, "release_meta": {"VERSION_CODENAME": codename}}


def data(**kv: object) -> dict:
    """The role's defaults on ROCm 10.0, the release whose install selector AMD published (quoted below);
    the default release (10.1) differs only in the version (tests/unit/test_amd_world.py compares them)."""
    return {**DEFAULTS, "rocm_version": "10.0", **kv}


KEY = "signed-by=/etc/apt/keyrings/rocm.gpg"
CORE_KEY = "signed-by=/etc/apt/keyrings/amdrocm.gpg"
DISTROS = {  # os-release -> AMD's Core SDK directory, the legacy suite (None: AMD never served it)
    "ubuntu2204": (fact("Ubuntu", 22, 4, "jammy"), "jammy"),
    "ubuntu2404": (fact("Ubuntu", 24, 4, "noble"), "noble"),
    "ubuntu2604": (fact("Ubuntu", 26, 4, "resolute"), None),
    "debian12": (fact("Debian", 12, 0, "bookworm"), "jammy"),  # AMD publishes no Debian legacy suite
    "debian13": (fact("Debian", 13, 0, "trixie"), "noble"),
}

# AMD's install selector for ROCm 10.0 (ROCm/rocm-docs docs/install/include/200-install.rst @0c31064a),
# Ubuntu 24.04, "all GPUs" and "Radeon" alike (the same for ubuntu2604, ubuntu2204, debian13, debian12):
#   wget https://stable.repo.amd.com/rocm/gpg/packages.gpg -O - | \
#       gpg --dearmor | sudo tee /etc/apt/keyrings/amdrocm.gpg > /dev/null
#   sudo tee /etc/apt/sources.list.d/amdrocm-stable.sources << EOF
#   X-Repo-Id: amdrocm-stable
#   Types: deb
#   URIs: https://stable.repo.amd.com/rocm/core/packages/ubuntu2404/
#   Suites: stable
#   Components: main
#   Architectures: amd64
#   Signed-By: /etc/apt/keyrings/amdrocm.gpg
#   Enabled: yes
#   EOF
#   sudo apt install amdrocm10.0-gfx1100      (one per exact target)      sudo apt install amdrocm10.0  (all)
# The role writes the same source as a one-line entry: URI, suite, component, architecture and keyring.
AMD_10_0 = {
    "key": "https://stable.repo.amd.com/rocm/gpg/packages.gpg",
    "uri": "https://stable.repo.amd.com/rocm/core/packages/{distro}/",
}
# The per-family repository: AMD's 7.13 selector (hanzoai/ROCm, a fork of ROCm/ROCm,
# docs/install/include/200-install.rst @354e0c70), "Radeon":
#   wget https://repo.amd.com/rocm/packages/gpg/rocm.gpg -O - | \
#       gpg --dearmor | sudo tee /etc/apt/keyrings/amdrocm.gpg > /dev/null
#   deb [arch=amd64 signed-by=/etc/apt/keyrings/amdrocm.gpg] https://repo.amd.com/rocm/packages/ubuntu2404 stable main
AMD_FAMILY = {
    "key": "https://repo.amd.com/rocm/packages/gpg/rocm.gpg",
    "uri": "https://repo.amd.com/rocm/packages/{distro}",
}
AMD_SOURCES = {"multi-arch": AMD_10_0, "family": AMD_FAMILY}
ORIGINS = {"multi-arch": "stable.repo.amd.com", "family": "repo.amd.com"}  # the host, assumed as Origin
# The legacy stream (ROCm/rocm-install-on-linux native-install/ubuntu, docs/notes/rocm-facts.md):
#   deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/7.2.4 noble main
#   deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/graphics/7.2.4/ubuntu noble main
#   /etc/apt/preferences.d/rocm-pin-600: Package: * / Pin: release o=repo.radeon.com / Pin-Priority: 600
LEGACY_LINES = [
    "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/7.2.4 {suite} main",
    "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/graphics/7.2.4/ubuntu {suite} main",
]  # fmt: skip
GPUS = ["gfx1100", "gfx1201"]  # a mixed host: RX 7900 XTX + RX 9070 XT
PACKAGES = {
    "multi-arch": ["amdrocm10.0-gfx1100", "amdrocm10.0-gfx1201"],
    "family": ["amdrocm10.0-gfx110x", "amdrocm10.0-gfx120x"],
}


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("layout", ["multi-arch", "family"])
def test_core_sdk_every_distro_and_layout(distro: str, layout: str) -> None:
    codename = repos.check_supported("ws1", repos.distro_from_fact(DISTROS[distro][0]))
    d = data(rocm_coresdk_layout=layout)
    repos.check_request(d, codename)  # served: no error
    source = repos.apt_source(d, codename)  # what the role writes
    amd = AMD_SOURCES[layout]
    ((line,),) = [source.lines]
    m = re.fullmatch(r"deb \[arch=(\S+) signed-by=(\S+)\] (\S+) (\S+) (\S+)", line)
    assert m is not None, line
    arch, keyring, uri, suite, component = m.groups()
    assert (arch, keyring, suite, component) == ("amd64", "/etc/apt/keyrings/amdrocm.gpg", "stable", "main")
    assert uri.rstrip("/") == amd["uri"].format(distro=distro).rstrip("/"), uri
    assert (source.key_url, source.keyring) == (amd["key"], keyring)
    assert repos.coresdk_packages(d, GPUS) == PACKAGES[layout]
    assert (source.list_path, source.pin_path) == (
        "/etc/apt/sources.list.d/amdrocm.list",
        "/etc/apt/preferences.d/amdrocm-pin-600",
    )
    assert source.pin == f"Package: *\nPin: release o={ORIGINS[layout]}\nPin-Priority: 600\n"
    assert repos.version_file(d) == "/opt/rocm/core-10.0/.info/version"
    assert repos.ld_paths(d) == ["/opt/rocm/lib"]


@pytest.mark.parametrize("distro", DISTROS)
def test_legacy_every_distro(distro: str) -> None:
    fact_, suite = DISTROS[distro]
    codename = repos.check_supported("ws1", repos.distro_from_fact(fact_))
    d = data(rocm_stream="legacy", rocm_version="7.2.4")
    if suite is None:
        with pytest.raises(ValueError, match="has no packages for resolute") as e:
            repos.check_request(d, codename)
        assert "\n" not in str(e.value)
        return
    repos.check_request(d, codename)
    assert repos.legacy_sources(d, codename) == [line.format(suite=suite) for line in LEGACY_LINES]
    assert d["rocm_keyring"] == "/etc/apt/keyrings/rocm.gpg"
    assert repos.pin(d["rocm_origin"]) == "Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n"
    assert repos.stream_files("legacy")["pin"] == "/etc/apt/preferences.d/rocm-pin-600"
    assert repos.legacy_packages(d) == ["rocm-hip-runtime", "rocminfo", "rocm-smi-lib"]
    assert repos.version_file(d) == "/opt/rocm/.info/version"
    assert repos.ld_paths(d) == ["/opt/rocm/lib", "/opt/rocm/lib64"]


def test_the_default_is_the_release_tables_and_amds_newest_installs() -> None:
    assert (DEFAULTS["rocm_stream"], DEFAULTS["rocm_version"]) == ("coresdk", releases.DEFAULT_RELEASE.series)
    assert releases.NEWEST_PRODUCTION == "10.1.0"
    assert DEFAULTS["rocm_coresdk_layout"] == "multi-arch"
    newest = data(rocm_version="10.1")
    repos.check_request(newest, "noble")
    assert repos.coresdk_packages(newest, ["gfx1100"]) == ["amdrocm10.1-gfx1100"]
    assert repos.apt_source(newest, "noble").lines == (
        f"deb [arch=amd64 {CORE_KEY}] https://stable.repo.amd.com/rocm/core/packages/ubuntu2404 stable main",
    )


@pytest.mark.parametrize(
    ("version", "release"),
    [("10.1", "10.1.0"), ("10.1.0", "10.1.0"), ("10.0", "10.0.0"), ("7.14", "7.14.1"), ("7.14.0", "7.14.0"),
     ("7.14.1", "7.14.1"), ("10.0.9", None), ("10.7", None), ("7.2.4", None)],
)  # fmt: skip
def test_rocm_version_as_amd_writes_it(version: str, release: str | None) -> None:
    found = releases.core_sdk_release(version)
    assert (found.version if found else None) == release


# AMD keeps 7.14.x at its legacy multi-arch repository, not mirrored into the 10.x one (ROCm/TheRock
# docs/packaging/legacy_multi_arch_releases.md @b9fdc4f1):
#   https://repo.amd.com/rocm/packages-multi-arch/<distro>/ stable main, key .../packages-multi-arch/gpg/rocm.gpg
@pytest.mark.parametrize("version", ["7.14", "7.14.0", "7.14.1"])
def test_7_14_comes_from_amds_legacy_multi_arch_repository(version: str) -> None:
    d = data(rocm_version=version)
    repos.check_request(d, "noble")
    source = repos.apt_source(d, "noble")
    assert source.lines == (
        f"deb [arch=amd64 {CORE_KEY}] https://repo.amd.com/rocm/packages-multi-arch/ubuntu2404 stable main",
    )
    assert source.key_url == "https://repo.amd.com/rocm/packages-multi-arch/gpg/rocm.gpg"
    assert source.pin == "Package: *\nPin: release o=repo.amd.com\nPin-Priority: 600\n"
    assert repos.coresdk_packages(d, ["gfx1151"]) == ["amdrocm7.14-gfx1151"]
    assert repos.version_file(d) == "/opt/rocm/core-7.14/.info/version"


def test_all_targets_on_request_or_when_a_target_has_no_package() -> None:
    assert repos.coresdk_packages(data(rocm_coresdk_all_targets=True), GPUS) == ["amdrocm10.0"]
    # AMD's per-target list has no gfx1031 (RX 6700 XT): the all-targets package serves it
    assert repos.coresdk_packages(data(), ["gfx1031"]) == ["amdrocm10.0"]
    assert repos.coresdk_packages(data(rocm_coresdk_layout="family"), ["gfx1031"]) == ["amdrocm10.0-gfx103x"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"rocm_version": "10.7"}, "AMD published no ROCm Core SDK 10.7"),
        ({"rocm_version": "10.0.9"}, "AMD published no ROCm Core SDK 10.0.9"),
        ({"rocm_stream": "legacy", "rocm_version": "7.3"}, "not a legacy-stream release"),
        ({"rocm_stream": "legacy", "rocm_version": "10.0"}, "not a legacy-stream release"),
        ({"rocm_stream": "rock"}, "rocm_stream must be"),
        ({"rocm_coresdk_layout": "flat"}, "rocm_coresdk_layout must be"),
    ],
)
def test_bad_inputs_are_one_line(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        repos.check_request(data(**settings), "noble")
    assert "\n" not in str(e.value)


def test_family_layout_refuses_a_gpu_it_has_no_family_for() -> None:
    with pytest.raises(ValueError, match="serve no gfx1010"):
        repos.coresdk_packages(data(rocm_coresdk_layout="family"), ["gfx1010"])


def test_sandbox_urls_are_only_data() -> None:
    d = data(rocm_coresdk_multiarch_repo_url="http://127.0.0.1:8000/amd/rocm/packages-multi-arch/")
    line = (
        f"deb [arch=amd64 {CORE_KEY}] http://127.0.0.1:8000/amd/rocm/packages-multi-arch/debian12 stable main"
    )
    assert repos.coresdk_sources(d, "bookworm") == [line]


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


def test_a_dot_zero_release_is_published_without_the_zero() -> None:
    assert repos.version_dir("7.2.0") == "7.2"
    lines = repos.legacy_sources(data(rocm_stream="legacy", rocm_version="7.2.0"), "jammy")
    assert lines[0].endswith("/rocm/apt/7.2 jammy main")
    assert len(repos.legacy_sources(data(rocm_stream="legacy", rocm_version="6.4.1"), "noble")) == 1


def test_a_switch_removes_the_other_stream_and_other_releases() -> None:
    installed = ["rocm-core", "rocminfo", "hsa-rocr", "rocm-hip-runtime", "amdrocm10.0-gfx1100",
                 "amdrocm10.0-simulated-rocm-core", "amdrocm7.14-gfx1100", "amdrocm-core7.14-gfx1100",
                 "amdrocm-runtime", "python3", "rocket"]  # fmt: skip
    to_core = repos.leftover_packages(data(), installed)
    assert to_core == ["amdrocm-core7.14-gfx1100", "amdrocm7.14-gfx1100", "hsa-rocr", "rocm-core",
                       "rocm-hip-runtime", "rocminfo"]  # fmt: skip
    to_legacy = repos.leftover_packages(data(rocm_stream="legacy", rocm_version="7.2.4"), installed)
    assert to_legacy == ["amdrocm-core7.14-gfx1100", "amdrocm-runtime", "amdrocm10.0-gfx1100",
                         "amdrocm10.0-simulated-rocm-core", "amdrocm7.14-gfx1100"]  # fmt: skip


def test_driver_repository_per_rocm_series() -> None:
    d = data(rocm_stream="legacy", rocm_version="7.2.4")
    assert repos.driver_sources(d, "noble") == [
        f"deb [arch=amd64 {KEY}] https://repo.radeon.com/amdgpu/30.30/ubuntu noble main"
    ]
    assert repos.driver_sources(data(), "resolute")[0].endswith("/amdgpu/31.50/ubuntu resolute main")
    assert repos.driver_version(data(rocm_version="7.1")) == "30.20"
    with pytest.raises(ValueError):
        repos.driver_sources(data(rocm_version="7.14"), "noble")
    # AMD's documents give no driver number for 10.1 (the default): 10.0's, the newest they give, is chosen
    assert repos.driver_sources(dict(DEFAULTS), "noble")[0].endswith("/amdgpu/31.50/ubuntu noble main")
    assert repos.driver_version({**DEFAULTS, "rocm_amdgpu_version": "31.60"}) == "31.60"


def test_torch_pairing_for_both_sources() -> None:
    from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK

    amd = torch_pairing("amd")
    assert repos.torch_pairing_problem(DEFAULTS["rocm_version"], STACK["pytorch_version"], amd) is None
    assert repos.torch_pairing_problem("7.14", "2.12.0", amd) is None
    assert (
        repos.torch_pairing_problem("7.14", "2.13.0", amd)
        == "torch 2.13.0 is built for ROCm 10.0, not ROCm 7.14"
    )
    assert repos.torch_pairing_problem("10.1", "2.14.0", amd) is None
    assert repos.torch_pairing_problem("10.1.0", "2.14.0", amd) is None
    assert repos.torch_pairing_problem("7.14.1", "2.12.0", amd) is None
    pt = PYTORCH_ROCM_PAIRING
    assert repos.torch_pairing_problem("7.2.4", "2.13.0", pt) is None
    assert (
        repos.torch_pairing_problem("7.14", "2.14.0", pt) is None
        and repos.torch_pairing_problem("7.2", "2.14.0", pt) is None
    )
    assert (
        repos.torch_pairing_problem("7.1.1", "2.13.0", pt)
        == "torch 2.13.0 is built for ROCm 7.2, not ROCm 7.1.1"
    )
    assert "no known ROCm pairing" in repos.torch_pairing_problem("7.2.4", "3.0.0", pt)
