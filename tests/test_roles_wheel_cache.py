"""roles/wheel_cache without hosts: which host is the cache, the URL hosts install from, the pip downloads,
and the index builder run locally on a folder of (empty, test-made) wheel files."""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK
from radeonlab.roles.python_stack.plan import PythonChoice
from radeonlab.roles.wheel_cache import plan
from radeonlab.roles.wheel_cache.defaults import DEFAULTS

BUILD_INDEX = Path(plan.__file__).with_name("build_index.py")


def test_cache_host_from_setting_then_group() -> None:
    groups = {"wheel_cache": ["ws3", "ws4"], "all": ["ws1", "ws3", "ws4"]}
    assert plan.cache_host_name(DEFAULTS, groups) == "ws3"
    assert plan.cache_host_name({**DEFAULTS, "wheel_cache_host": "ws1"}, groups) == "ws1"
    assert plan.cache_host_name(DEFAULTS, {"all": ["ws1"]}) is None


def test_url_composed_from_the_cache_hosts_address_unless_given() -> None:
    assert plan.cache_url(DEFAULTS, "ws3", {"ssh_hostname": "10.0.0.3"}) == "http://10.0.0.3:8765/simple/"
    assert plan.cache_url(DEFAULTS, "ws3", {}) == "http://ws3:8765/simple/"
    given = {**DEFAULTS, "wheel_cache_url": "http://mirror.lan/simple/"}
    assert plan.cache_url(given, "ws3", {"ssh_hostname": "10.0.0.3"}) == "http://mirror.lan/simple/"
    sources = plan.python_stack_sources("http://c:1/simple/")
    assert sources == {
        "pytorch_index_url": "http://c:1/simple/",
        "python_stack_index_url": "http://c:1/simple/",
        "pytorch_find_links": [],
    }


def test_python_version_follows_what_python_stack_trains_with() -> None:
    assert plan.python_version(DEFAULTS, PythonChoice("python3", False), "3.12.3") == "3.12"
    assert plan.python_version(DEFAULTS, PythonChoice("python3.11", True), "3.10.12") == "3.11"
    assert (
        plan.python_version(
            {**DEFAULTS, "wheel_cache_python_version": "3.13"}, PythonChoice("python3", False), "3.12.3"
        )
        == "3.13"
    )


PT = {**STACK, "pytorch_source": "pytorch"}


def test_amd_wheels_fetch_every_lab_target_device_package_once() -> None:
    upstream = plan.Upstream.from_stack(STACK, "10.0", ["gfx1100", "gfx1031", "gfx1100"])
    torch, reqs, _ = (shlex.split(c) for c in plan.download_commands(STACK, upstream, "/c", "3.11"))
    assert "torch[device-gfx1031,device-gfx1100]==2.13.0+rocm10.0.0" in torch, torch
    assert torch[torch.index("--index-url") + 1] == "https://stable.repo.amd.com/rocm/whl-next/"
    assert "torch==2.13.0+rocm10.0.0" in reqs  # pinned, without extras, for the rest
    base = plan.inputs_digest(STACK, upstream, "3.11")
    assert base != plan.inputs_digest(STACK, plan.Upstream.from_stack(STACK, "10.0", ["gfx1100"]), "3.11")


def test_downloads_take_torch_from_the_torch_index_and_pin_it_for_the_rest() -> None:
    STACK = PT  # noqa: N806 - download.pytorch.org, as before
    upstream = plan.Upstream.from_stack(STACK, "7.2.4")
    assert upstream.torch_index_url == "https://download.pytorch.org/whl/rocm7.2"
    torch, reqs, lf = (shlex.split(c) for c in plan.download_commands(STACK, upstream, "/c", "3.11"))
    assert torch[torch.index("--index-url") + 1] == upstream.torch_index_url
    assert "torch==2.13.0" in torch and "torchaudio" in torch
    # the requirements see the downloaded torch and may not pull another one from PyPI
    assert reqs[reqs.index("--find-links") + 1] == "/c/files" and "torch==2.13.0" in reqs
    assert reqs[reqs.index("--index-url") + 1] == "https://pypi.org/simple"
    assert "--no-deps" in lf and "llamafactory==0.9.5" in lf
    for cmd in (torch, reqs, lf):
        assert cmd[0] == "/c/.pip-venv/bin/pip" and "--only-binary=:all:" in cmd
        assert cmd[cmd.index("--python-version") + 1] == "3.11"


def test_digest_changes_with_pins_and_sources() -> None:
    STACK = PT  # noqa: N806
    upstream = plan.Upstream.from_stack(STACK, "7.2.4")
    base = plan.inputs_digest(STACK, upstream, "3.11")
    assert base == plan.inputs_digest(dict(STACK), upstream, "3.11")
    assert base != plan.inputs_digest({**STACK, "pytorch_version": "2.12.0"}, upstream, "3.11")
    assert base != plan.inputs_digest(STACK, plan.Upstream.from_stack(STACK, "7.1.0"), "3.11")
    assert base != plan.inputs_digest(STACK, upstream, "3.12")


def test_the_cache_fetches_every_hosts_extras_beside_the_pinned_stack() -> None:
    STACK = PT  # noqa: N806 - download.pytorch.org: three downloads before the extras
    upstream = plan.Upstream.from_stack(STACK, "7.2.4")
    extras = plan.lab_extras(STACK, [["tensorboard"], [], ["wandb", "TensorBoard"]])
    assert extras == ["tensorboard==2.21.0", "wandb==0.31.0"]  # the union, each once, at its pin
    commands = [shlex.split(c) for c in plan.download_commands(STACK, upstream, "/c", "3.11", extras)]
    assert len(commands) == 4
    reqs, more = commands[1], commands[3]
    assert more[: len(reqs)] == reqs  # same index, the downloaded files as --find-links, torch pinned
    assert more[len(reqs) :] == extras
    assert len(plan.download_commands(STACK, upstream, "/c", "3.11")) == 3  # no extras: no 4th download
    base = plan.inputs_digest(STACK, upstream, "3.11")
    assert plan.inputs_digest(STACK, upstream, "3.11", []) == base  # a lab without extras keeps its digest
    assert plan.inputs_digest(STACK, upstream, "3.11", extras) != base  # a new extra: download it


def test_an_unpinned_extra_on_any_host_is_refused() -> None:
    with pytest.raises(ValueError, match="'flash-attn' has no pinned version"):
        plan.lab_extras(STACK, [["tensorboard"], ["flash-attn"]])


def test_index_builder_writes_pep503_pages_with_hashes(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    wheels = {"torch-2.13.0+rocm7.2-cp311-cp311-linux_x86_64.whl": b"t", "PyYAML-6.0.4-cp311-x.whl": b"y"}
    for name, body in wheels.items():
        (files / name).write_bytes(body)
    (tmp_path / "simple" / "gone").mkdir(parents=True)  # a project no longer cached
    for _ in range(2):  # idempotent
        subprocess.run([sys.executable, str(BUILD_INDEX), str(tmp_path)], check=True, capture_output=True)
    torch_page = (tmp_path / "simple/torch/index.html").read_text()
    digest = hashlib.sha256(b"t").hexdigest()
    assert (
        f'href="../../files/torch-2.13.0+rocm7.2-cp311-cp311-linux_x86_64.whl#sha256={digest}"' in torch_page
    )
    assert (tmp_path / "simple/pyyaml/index.html").exists()
    assert not (tmp_path / "simple/gone").exists()
    assert '<a href="pyyaml/">' in (tmp_path / "simple/index.html").read_text()
