"""roles/python_stack's pure logic: which torch from which index; the extras' pins; Python; paths."""

from __future__ import annotations

import pytest

from radeonlab.roles.python_stack import plan
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.roles.python_stack.facts import InstalledDistributions

PT = {**DEFAULTS, "pytorch_source": "pytorch"}  # download.pytorch.org, one setting away


def test_the_pytorch_source_asks_for_its_torch_and_torchaudio_unpinned_builds() -> None:
    request = plan.torch_request(PT, "7.2.4", [])
    assert request.requirements == ["torch==2.14.0", "torchaudio"] and request.device_packages == []
    assert plan.torch_index_url(PT, "7.2.4") == "https://download.pytorch.org/whl/rocm7.2"


def test_amd_wheels_one_device_extra_per_target_as_amd_writes_it() -> None:
    # AMD (docs/notes/rocm-facts.md, "Since 7.2.4"): pip install --index-url https://stable.repo.amd.com/rocm/whl-next/
    #   "torch[device-gfx1201]==2.13.0+rocm10.0.0"; TheRock RELEASES.md: "torch[device-gfx942,device-gfx950]"
    ten = {**DEFAULTS, "pytorch_version": "2.13.0"}  # ROCm 10.0 with the torch AMD pairs it with
    request = plan.torch_request(ten, "10.0", ["gfx1201", "gfx1100"])
    assert request.requirements == [
        "torch[device-gfx1100,device-gfx1201]==2.13.0+rocm10.0.0",
        "torchaudio==2.11.*",
    ]
    # AMD: torch[device-T] pulls amd-torch-device-T, which pulls rocm-sdk-device-T (TheRock RELEASES.md)
    assert request.device_packages == [
        "amd-torch-device-gfx1100",
        "rocm-sdk-device-gfx1100",
        "amd-torch-device-gfx1201",
        "rocm-sdk-device-gfx1201",
    ]
    assert plan.torch_index_url(ten, "10.0") == "https://stable.repo.amd.com/rocm/whl-next/"
    with_vision = {**ten, "pytorch_extra_packages": ["torchvision", "torchaudio"]}
    assert plan.torch_request(with_vision, "10.0", ["gfx1151"]).requirements == [
        "torch[device-gfx1151]==2.13.0+rocm10.0.0",
        "torchvision[device-gfx1151]==0.28.*",
        "torchaudio==2.11.*",
    ]
    seven = {**DEFAULTS, "pytorch_version": "2.12.0"}
    assert plan.torch_request(seven, "7.14.0", ["gfx1151"]).requirements[0] == (
        "torch[device-gfx1151]==2.12.0+rocm7.14.0"
    )
    # a series names its newest patch (7.14.1), each patch its own local label
    assert plan.torch_request(seven, "7.14", ["gfx1151"]).local == "rocm7.14.1"
    assert plan.torch_index_url(seven, "7.14") == "https://repo.amd.com/rocm/whl-multi-arch/"
    # AMD's newest production release as its matrix pairs it (torch 2.14, torchvision 0.29, torchaudio 2.11)
    newest = {**with_vision, "pytorch_version": "2.14.0"}
    assert plan.torch_request(newest, "10.1", ["gfx1100"]).requirements == [
        "torch[device-gfx1100]==2.14.0+rocm10.1.0",
        "torchvision[device-gfx1100]==0.29.*",
        "torchaudio==2.11.*",
    ]
    assert plan.torch_index_url(newest, "10.1.0") == "https://stable.repo.amd.com/rocm/whl-next/"


@pytest.mark.parametrize(
    ("data", "rocm", "targets", "message"),
    [
        (DEFAULTS, "10.0", ["gfx1013"], "AMD's wheel index has no device extra for gfx1013"),
        (DEFAULTS, "7.2.4", ["gfx1100"], "AMD publishes no multi-arch torch wheels for ROCm 7.2.4"),
        (
            {**DEFAULTS, "pytorch_version": "2.14.0"},
            "10.0",
            ["gfx1100"],
            "wheels are torch 2.13.0, not 2.14.0",
        ),
    ],
)
def test_what_the_amd_index_cannot_serve_is_one_line(
    data: dict, rocm: str, targets: list, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as e:
        plan.torch_request(data, rocm, targets)
    assert "\n" not in str(e.value)


def test_index_from_data_or_from_the_source() -> None:
    data = {**PT, "pytorch_index_url": "http://127.0.0.1:9/pypi/simple"}
    assert plan.torch_index_url(data, "7.2.4") == "http://127.0.0.1:9/pypi/simple"
    assert plan.torch_index_url(PT, "7.1.1") == "https://download.pytorch.org/whl/rocm7.1"
    # beside a Core SDK, download.pytorch.org's index is the one its torch release is built for
    assert plan.torch_index_url(PT, "10.0") == "https://download.pytorch.org/whl/rocm7.2"
    assert plan.torch_index_url(
        {**PT, "pytorch_version": "2.14.0", "pytorch_rocm_series": "7.14"}, "10.0"
    ) == ("https://download.pytorch.org/whl/rocm7.14")


@pytest.mark.parametrize(
    ("distro", "python3", "expected"),
    [
        ("Ubuntu", "3.10.12", plan.PythonChoice("python3.11", True)),  # 22.04: deadsnakes
        ("Ubuntu", "3.12.3", plan.PythonChoice("python3", False)),
        ("Debian", "3.11.2", plan.PythonChoice("python3", False)),
    ],
)
def test_python_choice(distro: str, python3: str, expected: plan.PythonChoice) -> None:
    assert plan.choose_python(distro, python3, DEFAULTS) == expected


def test_no_python_source_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="needs >= 3.11"):
        plan.choose_python("Debian", "3.9.2", DEFAULTS)


def test_paths_and_user() -> None:
    assert plan.expand_home("~/radeonlab/venv", "/home/lab") == "/home/lab/radeonlab/venv"
    assert plan.expand_home("/opt/venv", "/home/lab") == "/opt/venv"
    assert plan.training_user("", "lab") == "lab" and plan.training_user("trainer", "lab") == "trainer"


def test_installed_distributions_fact_parses_json_and_missing_venv() -> None:
    fact = InstalledDistributions()
    assert fact.process(['{"torch": "2.13.0+rocm7.2", "peft": null}']) == {
        "torch": "2.13.0+rocm7.2",
        "peft": None,
    }
    assert fact.process([]) == {}
    assert "import importlib.metadata" in fact.command(python="/home/lab/v/bin/python", names=["torch"])


def test_why_the_torch_step_is_not_pyinfras_pip_packages() -> None:
    """pyinfra 3.10's pip.packages parses requirements as PEP 508 and drops extras: AMD's device extra would
    be lost (seen on sandbox hosts: torch installed, rocm-sdk-device-gfx1100 not). The role runs its own
    pip command for a step with extras; if this starts failing, pyinfra keeps extras and could be used."""
    from pyinfra.operations.util.packaging import PkgInfo

    assert (
        PkgInfo.from_pep508("torch[device-gfx1100]==2.13.0+rocm10.0.0").inst_vers
        == "torch==2.13.0+rocm10.0.0"
    )


# --- python_stack_extras ---------------------------------------------------------------------------------
def with_extras(*names: str) -> dict:
    return {**DEFAULTS, "python_stack_extras": list(names)}


def test_no_extras_by_default_and_extras_at_their_pins() -> None:
    assert DEFAULTS["python_stack_extras"] == [] and plan.extras_pins(DEFAULTS) == []
    assert plan.extras_pins(with_extras("tensorboard", "Galore_Torch")) == [
        "tensorboard==2.21.0",
        "galore-torch==1.0",
    ]


def test_an_extra_without_a_pinned_version_is_a_one_line_error() -> None:
    with pytest.raises(
        ValueError, match=r"'flash-attn' has no pinned version in python_stack_extras_versions"
    ):
        plan.extras_pins(with_extras("tensorboard", "flash-attn"))
