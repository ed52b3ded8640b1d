"""The Ansible anchor's generated inventory and the host comparison: no sandbox, no Ansible run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from radeonlab.contract.records import HostRecord
from radeonlab.deploy.stack import torch_build
from radeonlab.roles.gpu_env.plan import gpu_env, training_targets
from radeonlab.roles.python_stack import plan as stack_plan
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.roles.rocm.defaults import SUPPORTED_DISTROS
from tests.bench import ansible_inventory as ai
from tests.bench.equivalence import Difference, differences, role_files, unexplained
from tests.unit.test_roles_gpu_env import GIB, MIN_UNIFIED, MIN_VRAM, XTX, gpu

SANDBOX_DATA = {  # what radeonlab.sandbox's apt repo and wheel index set (aptrepo/wheels .settings())
    "rocm_repo_url": "http://127.0.0.1:9/amd/rocm/apt",
    "rocm_key_url": "http://127.0.0.1:9/amd/rocm/rocm.gpg.key",
    "rocm_graphics_repo_url": "http://127.0.0.1:9/amd/graphics",
    "rocm_coresdk_repo_url": "http://127.0.0.1:9/amd/rocm/packages",
    "rocm_coresdk_multiarch_repo_url": "http://127.0.0.1:9/amd/rocm/packages-multi-arch",
    "rocm_coresdk_key_url": "http://127.0.0.1:9/amd/rocm/packages/gpg/rocm.gpg",
    "rocm_coresdk_family_key_url": "http://127.0.0.1:9/amd/rocm/packages/gpg/rocm.gpg",
    "rocm_coresdk_origin": "repo.amd.com",
    "pytorch_index_url": "http://127.0.0.1:9/pypi/simple",
    "python_stack_index_url": "http://127.0.0.1:9/pypi/simple",
}
ENTRY = {
    "name": "ws1",
    "ssh_hostname": "127.0.77.1",
    "ssh_port": 2201,
    "ssh_user": "lab",
    "ssh_key": "/k/id_ed25519",
    "ssh_known_hosts_file": "/k/known_hosts",
    "card": "rx7900xtx",
    "data": {**SANDBOX_DATA, "sandbox_only_key": 1},
}


def test_host_data_wins_over_the_roles_defaults_and_only_role_keys_are_taken() -> None:
    data = ai.settings(ENTRY["data"])
    assert data["rocm_repo_url"] == SANDBOX_DATA["rocm_repo_url"]
    assert data["rocm_version"] == ROCM_DEFAULTS["rocm_version"]
    assert "sandbox_only_key" not in data
    assert set(data) == set(ai.ROLE_DEFAULTS)


def test_sources_and_pin_are_the_rocm_roles_own_for_each_codename() -> None:
    data = ai.settings(ENTRY["data"])  # the default stream: the Core SDK, multi-arch layout
    rocm = ai.rocm_sources(data)
    assert set(rocm["sources"]) == set(SUPPORTED_DISTROS.values())
    for codename in SUPPORTED_DISTROS.values():
        assert rocm["sources"][codename] == list(repos.apt_source(data, codename).lines)
    assert rocm["sources"]["bookworm"] == [
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/amdrocm.gpg] "
        "http://127.0.0.1:9/amd/rocm/packages-multi-arch/debian12 stable main"
    ]
    assert rocm["pin"] == "Package: *\nPin: release o=repo.amd.com\nPin-Priority: 600\n"
    assert (rocm["keyring"], rocm["key_url"]) == (
        "/etc/apt/keyrings/amdrocm.gpg",
        SANDBOX_DATA["rocm_coresdk_key_url"],
    )
    assert (rocm["list_path"], rocm["pin_path"]) == (
        "/etc/apt/sources.list.d/amdrocm.list",
        "/etc/apt/preferences.d/amdrocm-pin-600",
    )
    assert rocm["comment"] == f"ROCm {data['rocm_version']} (coresdk stream, multi-arch layout)"
    assert rocm["ld_paths"] == ["/opt/rocm/lib"]
    assert rocm["version_file"] == f"/opt/rocm/core-{data['rocm_version']}/.info/version"


def test_the_legacy_stream_is_a_data_change_and_skips_what_it_never_served() -> None:
    data = ai.settings({**ENTRY["data"], "rocm_stream": "legacy", "rocm_version": "7.2.4"})
    rocm = ai.rocm_sources(data)
    assert "resolute" not in rocm["sources"]  # AMD never published 7.2.x for Ubuntu 26.04
    assert rocm["sources"]["bookworm"] == repos.legacy_sources(data, "bookworm")
    assert rocm["sources"]["bookworm"][0] == (
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] "
        "http://127.0.0.1:9/amd/rocm/apt/7.2.4 jammy main"
    )
    assert rocm["pin"] == "Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n"
    assert rocm["ld_paths"] == ["/opt/rocm/lib", "/opt/rocm/lib64"]
    assert role_files(data)[:3] == [
        "/etc/apt/keyrings/rocm.gpg",
        "/etc/apt/sources.list.d/rocm.list",
        "/etc/apt/preferences.d/rocm-pin-600",
    ]


def test_the_family_layout_and_refusals_come_from_the_role() -> None:
    data = ai.settings({**ENTRY["data"], "rocm_coresdk_layout": "family"})
    assert ai.rocm_sources(data)["sources"]["bookworm"] == [
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/amdrocm.gpg] "
        "http://127.0.0.1:9/amd/rocm/packages/debian12 stable main"
    ]
    with pytest.raises(ValueError, match="rocm_stream"):
        ai.rocm_sources({**data, "rocm_stream": "nightly"})
    with pytest.raises(ValueError, match="no ROCm Core SDK 7.11"):
        ai.rocm_sources({**data, "rocm_version": "7.11"})


def _filters() -> dict[str, Any]:
    """The playbook's filter plugin, loaded as Ansible loads it (a file, not a package)."""
    path = ai.PLAYBOOK_DIR / "filter_plugins" / "radeonlab.py"
    spec = importlib.util.spec_from_file_location("radeonlab_anchor_filters", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


FILTERS = _filters()
SETTINGS = ai.settings({**SANDBOX_DATA, "python_stack_allow_cpu_torch": True})
CARDS = [XTX, gpu(1, "gfx1031", "AMD Radeon RX 6700 XT", 12 * GIB)]
GPU_FACT = [g.to_dict() for g in CARDS]  # the RadeonGpus fact's value, as the playbook holds it


def test_every_filter_the_playbook_uses_exists() -> None:
    used = set(re.findall(r"\|\s*(radeonlab_\w+)", ai.PLAYBOOK.read_text()))
    assert len(used) >= 9 and used <= set(FILTERS), used - set(FILTERS)


def test_the_sandbox_hosts_cpu_torch_setting_reaches_the_playbook() -> None:
    assert SETTINGS["python_stack_allow_cpu_torch"] is True
    assert ai.settings(SANDBOX_DATA)["python_stack_allow_cpu_torch"] is False


def test_targets_gpu_env_and_pip_steps_are_the_roles_for_the_hosts_torch_build() -> None:
    build = torch_build(SETTINGS.get)
    targets = FILTERS["radeonlab_training_targets"](GPU_FACT, SETTINGS)
    assert targets == training_targets(CARDS, build, MIN_VRAM, MIN_UNIFIED) == ["gfx1031", "gfx1100"]
    env = gpu_env(CARDS, build, MIN_VRAM, MIN_UNIFIED, True)
    got = FILTERS["radeonlab_gpu_env"](GPU_FACT, SETTINGS)
    assert (got["notes"], got["comments"], got["exports"]) == (env.notes, env.comments, env.exports)
    assert got["training"] == 2 and "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" in got["exports"]
    off = FILTERS["radeonlab_gpu_env"](GPU_FACT, {**SETTINGS, "gpu_env_aotriton_experimental": False})
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" not in off["exports"]
    steps = FILTERS["radeonlab_pip_steps"](SETTINGS, targets)
    request = stack_plan.torch_request(SETTINGS, str(SETTINGS["rocm_version"]), targets)
    assert steps[0]["packages"] == request.requirements  # the role's torch, with its device extras
    assert any("gfx1031" in p for p in steps[0]["packages"]), steps[0]  # AMD's device extra per target
    assert steps[1]["packages"] == STACK_DEFAULTS["python_stack_requirements"]
    assert steps[-1]["packages"] == ["llamafactory==0.9.5"] and "--no-deps" in steps[-1]["pip_args"]


CPU_REPORT = {"torch": "2.13.0+cpu", "cpu_build": True, "cuda_available": False, "devices": []}


def _context(settings: dict[str, Any], old_record: str = "") -> dict[str, Any]:
    return {
        "settings": settings,
        "host": "ws1",
        "user": "lab",
        "home": "/home/lab",
        "venv": "/home/lab/radeonlab/venv",
        "jobs_dir": "/home/lab/radeonlab/jobs",
        "model_cache": "/home/lab/radeonlab/models",
        "rocm_installed": "",
        "systemd": False,
        "gpus": GPU_FACT,
        "old_record": old_record,
    }


def test_the_host_record_is_the_verify_roles_schema_and_no_op_logic() -> None:
    state = ["fingerprint line", "saved="]
    plan = FILTERS["radeonlab_verify_plan"](state, _context(SETTINGS))
    assert plan["needs_check"] is True
    written = FILTERS["radeonlab_host_record"]([json.dumps(CPU_REPORT)], _context(SETTINGS), plan["inputs"])
    record = json.loads(written["text"])
    assert set(record) == {f.name for f in dataclasses.fields(HostRecord)}
    assert record["model_cache"] == "/home/lab/radeonlab/models" and record["problem"] is None
    assert record["torch"]["source"] == "amd" and record["torch"]["cpu_allowed"] is True
    assert record["rocm"]["installed"] is None and written["problem"] is None
    # Saved check with the same inputs and the record already on the host: the check is not run again.
    saved = "saved=" + written["check_state"].strip()
    again = FILTERS["radeonlab_verify_plan"](["fingerprint line", saved], _context(SETTINGS, written["text"]))
    assert again == {"inputs": plan["inputs"], "needs_check": False}
    recheck = {**SETTINGS, "verify_recheck": True}
    assert FILTERS["radeonlab_verify_plan"](["fingerprint line", saved], _context(recheck, written["text"]))[
        "needs_check"
    ]
    # Without python_stack_allow_cpu_torch a CPU torch is a problem, and the playbook fails the host on it.
    strict = ai.settings(SANDBOX_DATA)
    failed = FILTERS["radeonlab_host_record"]([json.dumps(CPU_REPORT)], _context(strict), plan["inputs"])
    assert "CPU build" in failed["problem"] and json.loads(failed["text"])["problem"] == failed["problem"]


def test_the_inventory_connects_as_pyinfra_does(tmp_path: Path) -> None:
    (tmp_path / "inventory.json").write_text(json.dumps({"hosts": [ENTRY, {**ENTRY, "name": "ws2"}]}))
    path = ai.write_inventory(tmp_path, tmp_path / "work", ["ws1"])
    inv = yaml.safe_load(path.read_text())["all"]
    assert list(inv["hosts"]) == ["ws1"]
    host = inv["hosts"]["ws1"]
    assert (host["ansible_host"], host["ansible_port"], host["ansible_user"]) == ("127.0.77.1", 2201, "lab")
    assert "StrictHostKeyChecking=yes" in host["ansible_ssh_common_args"]
    assert "UserKnownHostsFile=/k/known_hosts" in host["ansible_ssh_common_args"]
    assert host["radeonlab"]["python_stack_index_url"] == SANDBOX_DATA["python_stack_index_url"]
    with pytest.raises(ValueError, match="ws9"):
        ai.write_inventory(tmp_path, tmp_path / "work", ["ws9"])


def test_every_file_the_playbook_renders_is_a_roles_file() -> None:
    playbook = ai.PLAYBOOK.read_text()
    used = re.findall(r"\{\{ templates \}\}/([\w/.-]+)", playbook)
    assert len(used) >= 6, used
    for rel in used:
        assert (ai.ROLES_DIR / rel).is_file(), rel


def test_the_recap_parser_reads_each_hosts_counts() -> None:
    out = (
        "TASK [x] ***\nok: [ws1]\n\nPLAY RECAP *********\n"
        "ws1                        : ok=30   changed=2    unreachable=0    failed=0    skipped=5    "
        "rescued=0    ignored=0   \n"
        "ws2                        : ok=3    changed=0    unreachable=1    failed=0    skipped=0    "
        "rescued=0    ignored=0   \n"
    )
    recap = ai.parse_recap(out)
    assert recap["ws1"]["changed"] == 2 and recap["ws2"]["unreachable"] == 1
    assert ai.PlaybookRun(0, 1.0, out, recap=recap).changed() == {"ws1": 2, "ws2": 0}


def test_differences_and_the_accepted_list() -> None:
    ours = {"file /a": "x", "package curl": "1 ii", "pip torch": "2.13.0+cpu"}
    theirs = {"file /a": "y", "package curl": "1 ii", "package python3-apt": "2.6.0 ii"}
    found = differences(ours, theirs)
    assert found == [
        Difference("file /a", "x", "y"),
        Difference("package python3-apt", None, "2.6.0 ii"),
        Difference("pip torch", "2.13.0+cpu", None),
    ]
    extra, stale = unexplained(found, {"package python3-apt": "why", "package gone": "why"})
    assert [d.key for d in extra] == ["file /a", "pip torch"] and stale == ["package gone"]
