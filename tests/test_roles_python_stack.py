"""roles/python_stack's pure logic: installed versions in -> pip steps out; Python choice; paths."""

from __future__ import annotations

import pytest
from radeonlab.roles.python_stack import plan
from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.roles.python_stack.facts import InstalledDistributions

PT = {**DEFAULTS, "pytorch_source": "pytorch"}  # download.pytorch.org, one setting away


def everything_installed(
    torch: str = "2.13.0+rocm7.2", audio: str = "2.13.0+rocm7.2"
) -> dict[str, str | None]:
    got = {plan.normalize(r.split("==")[0]): r.split("==")[1] for r in DEFAULTS["python_stack_requirements"]}
    return {**got, "torch": torch, "torchaudio": audio, "llamafactory": DEFAULTS["llamafactory_version"]}


def test_fresh_venv_needs_three_steps_in_order() -> None:
    steps = plan.pip_steps(PT, "7.2.4", {})
    assert [s.packages[0] for s in steps] == ["torch==2.13.0", "transformers==4.57.6", "llamafactory==0.9.5"]
    assert steps[0].packages == ["torch==2.13.0", "torchaudio"]
    assert steps[0].pip_args == ["--index-url", "https://download.pytorch.org/whl/rocm7.2"]
    assert steps[2].pip_args[:1] == ["--no-deps"]


def test_amd_wheels_one_device_extra_per_target_as_amd_writes_it() -> None:
    # AMD (rocm-facts.md, "Since 7.2.4"): pip install --index-url https://stable.repo.amd.com/rocm/whl-next/
    #   "torch[device-gfx1201]==2.13.0+rocm10.0.0"; TheRock RELEASES.md: "torch[device-gfx942,device-gfx950]"
    step = plan.pip_steps(DEFAULTS, "10.0", {}, ["gfx1201", "gfx1100"])[0]
    assert step.packages == ["torch[device-gfx1100,device-gfx1201]==2.13.0+rocm10.0.0", "torchaudio==2.11.*"]
    assert step.pip_args == ["--index-url", "https://stable.repo.amd.com/rocm/whl-next/"]
    assert "rocm-sdk-device-gfx1100 missing (device extra)" in step.reasons
    with_vision = {**DEFAULTS, "pytorch_extra_packages": ["torchvision", "torchaudio"]}
    assert plan.pip_steps(with_vision, "10.0", {}, ["gfx1151"])[0].packages == [
        "torch[device-gfx1151]==2.13.0+rocm10.0.0",
        "torchvision[device-gfx1151]==0.28.*",
        "torchaudio==2.11.*",
    ]
    seven = {**DEFAULTS, "pytorch_version": "2.12.0"}
    step = plan.pip_steps(seven, "7.14", {}, ["gfx1151"])[0]
    assert step.packages[0] == "torch[device-gfx1151]==2.12.0+rocm7.14.0"
    assert step.pip_args == ["--index-url", "https://repo.amd.com/rocm/whl-multi-arch/"]


def test_amd_wheels_installed_with_their_device_packages_change_nothing() -> None:
    done = {
        **everything_installed("2.13.0+rocm10.0.0", "2.11.0+rocm10.0.0"),
        "rocm-sdk-device-gfx1100": "10.0.0",
    }
    assert plan.pip_steps(DEFAULTS, "10.0", done, ["gfx1100"]) == []
    # a second card on the host: its device package is missing, torch is installed again with both extras
    step = plan.pip_steps(DEFAULTS, "10.0", done, ["gfx1100", "gfx1031"])[0]
    assert step.reasons == ["rocm-sdk-device-gfx1031 missing (device extra)"]
    # a download.pytorch.org build is not AMD's
    other = {**done, "torch": "2.13.0+rocm7.2"}
    assert plan.pip_steps(DEFAULTS, "10.0", other, ["gfx1100"])[0].reasons == [
        "torch 2.13.0+rocm7.2 != 2.13.0+rocm10.0.0"
    ]
    assert "rocm-sdk-device-gfx1100" in plan.watched_names(DEFAULTS, ["gfx1100"])


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
        plan.pip_steps(data, rocm, {}, targets)
    assert "\n" not in str(e.value)


def test_rocm_local_version_matches_the_pin_so_nothing_runs() -> None:
    assert plan.pip_steps(PT, "7.2.4", everything_installed()) == []
    assert plan.pip_steps(PT, "7.2.4", everything_installed("2.13.0+cpu")) == []


def test_only_what_differs_runs() -> None:
    installed = {**everything_installed(), "peft": "0.17.0"}
    steps = plan.pip_steps(PT, "7.2.4", installed)
    assert len(steps) == 1 and steps[0].reasons == ["peft 0.17.0 != 0.18.1"]
    installed = {**everything_installed(), "torch": "2.12.0+rocm7.2"}
    assert plan.pip_steps(PT, "7.2.4", installed)[0].reasons == ["torch 2.12.0+rocm7.2 != 2.13.0"]


def test_index_from_data_and_find_links() -> None:
    data = {**PT, "pytorch_index_url": "http://127.0.0.1:9/pypi/simple", "pytorch_find_links": ["/srv/w"]}
    step = plan.pip_steps(data, "7.2.4", {})[0]
    assert step.pip_args == ["--index-url", "http://127.0.0.1:9/pypi/simple", "--find-links", "/srv/w"]
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


def test_no_extras_by_default_and_no_step() -> None:
    assert DEFAULTS["python_stack_extras"] == []
    assert plan.extras_step(DEFAULTS, everything_installed(), "/v/c.txt") is None


def test_extras_install_their_pins_from_the_stack_index_with_the_stack_as_constraints() -> None:
    data = {
        **with_extras("tensorboard", "Galore_Torch"),
        "python_stack_index_url": "http://cache:8765/simple/",
    }
    constraints = "/home/lab/radeonlab/venv/radeonlab-constraints.txt"
    step = plan.extras_step(data, everything_installed(), constraints)
    assert step is not None
    assert step.packages == ["tensorboard==2.21.0", "galore-torch==1.0"]
    assert step.pip_args == [
        "--index-url", "http://cache:8765/simple/", "-c", constraints,
    ]  # fmt: skip
    assert step.reasons == ["tensorboard missing", "galore-torch missing"]
    text = plan.constraints_text(data)
    assert "torch==2.13.0\n" in text and "transformers==4.57.6\n" in text and "llamafactory==0.9.5\n" in text


def test_installed_extras_are_left_alone_and_a_wrong_version_is_reinstalled() -> None:
    data = with_extras("tensorboard", "wandb")
    installed = {**everything_installed(), "tensorboard": "2.21.0", "wandb": "0.30.0"}
    step = plan.extras_step(data, installed, "/c")
    assert (
        step is not None and step.packages == ["wandb==0.31.0"] and step.reasons == ["wandb 0.30.0 != 0.31.0"]
    )
    installed["wandb"] = "0.31.0"
    assert plan.extras_step(data, installed, "/c") is None
    assert {"tensorboard", "wandb"} <= set(plan.watched_names(data))


def test_an_extra_without_a_pinned_version_is_a_one_line_error() -> None:
    with pytest.raises(
        ValueError, match=r"'flash-attn' has no pinned version in python_stack_extras_versions"
    ):
        plan.extras_pins(with_extras("tensorboard", "flash-attn"))
    with pytest.raises(ValueError, match="no pinned version"):
        plan.watched_names(with_extras("nope"))
