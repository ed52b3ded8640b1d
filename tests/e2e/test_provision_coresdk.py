"""End to end: the new default (ROCm Core SDK 10.0, multi-arch layout, AMD's torch wheels with device extras)
on SIMULATED workstations, the download.pytorch.org source one setting away, a Strix Halo APU, and a switch
between streams on a provisioned host.

The hosts are the session's provisioned ones (tests/support/provisioned.py: provisioned once, with
tests/e2e/test_provision.py's, in the same runs); the AMD repository and wheel index are the sandbox's
SIMULATED
ones (radeonlab/sandbox/aptrepo.py, wheels.py), reached only through the product's settings.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from tests.support.provisioned import Provisioned, Run, exports, run_deploy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

PROFILE = "etc/profile.d/radeonlab-gpu.sh"
VENV = "/home/lab/radeonlab/venv"
AOTRITON = {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}
# host (tests/support/provisioned.py: card and data) -> exports expected in /etc/profile.d/radeonlab-gpu.sh
EXPECTED: dict[str, dict[str, str]] = {
    "prov-rx7900xtx": {"PYTORCH_ROCM_ARCH": "gfx1100", **AOTRITON},
    # AMD's wheels carry gfx1031 code: no override
    "prov-rx6700xt": {"PYTORCH_ROCM_ARCH": "gfx1031"},
    # download.pytorch.org's rocm7.2 wheels do not: 10.3.0, and the card runs as gfx1030
    "prov-6700xt-pt": {"PYTORCH_ROCM_ARCH": "gfx1030", "HSA_OVERRIDE_GFX_VERSION": "10.3.0"},
    "prov-strixhalo": {"PYTORCH_ROCM_ARCH": "gfx1151", **AOTRITON},
}
LEGACY = {"rocm_stream": "legacy", "rocm_version": "7.2.4", "pytorch_source": "pytorch"}
PT = {"pytorch_source": "pytorch"}


@dataclass
class Lab:
    sandbox: Sandbox
    hosts: dict[str, SandboxHost]
    first: Run
    second: Run


@pytest.fixture(scope="module")
def lab(provisioned: Provisioned) -> Lab:
    """The session's provisioned hosts (tests/support/provisioned.py: provisioned once for both modules)."""
    hosts = {h.name: h for h in provisioned.every_host}
    assert set(EXPECTED) <= set(hosts), sorted(hosts)
    return Lab(provisioned.sandbox, hosts, provisioned.first, provisioned.second)


def installed(h: SandboxHost) -> set[str]:
    out = h.exec("dpkg-query -W -f '${Package} ${Status}\\n'").stdout
    return {line.split()[0] for line in out.splitlines() if line.endswith("installed")}


def pip_versions(h: SandboxHost) -> dict[str, str]:
    out = h.exec(f"{VENV}/bin/python -m pip list --format json", user="lab").stdout
    return {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(out)}


def resolve(h: SandboxHost, path: str) -> str:
    """Where a path leads inside the host (update-alternatives links are absolute: /etc/alternatives/...)."""
    return h.exec(f"readlink -f {path}").stdout.strip()


def linker_rocm_paths(h: SandboxHost) -> list[str]:
    """The ROCm folders every /etc/ld.so.conf.d file puts on the linker path (comments left out)."""
    out = h.exec("cat /etc/ld.so.conf.d/*.conf").stdout.splitlines()
    return [line.strip() for line in out if line.strip().startswith("/") and "rocm" in line]


def rocm_sources(h: SandboxHost) -> list[str]:
    return sorted(
        f"{d}/{p.name}"
        for d in ("etc/apt/sources.list.d", "etc/apt/preferences.d")
        for p in (h.root / d).iterdir()
        if "rocm" in p.name
    )


def test_7900xtx_gets_the_multi_arch_repo_its_target_package_and_torch_extra(lab: Lab) -> None:
    h = lab.hosts["prov-rx7900xtx"]
    lines = (h.root / "etc/apt/sources.list.d/amdrocm.list").read_text()
    assert "/amd/rocm/packages-multi-arch/debian12 stable main" in lines, lines
    assert "signed-by=/etc/apt/keyrings/amdrocm.gpg" in lines
    assert "Pin: release o=repo.amd.com" in (h.root / "etc/apt/preferences.d/amdrocm-pin-600").read_text()
    assert "amdrocm10.1-gfx1100" in installed(h)
    versions = pip_versions(h)
    assert versions["torch"] == "2.14.0+rocm10.1.0" and "rocm-sdk-device-gfx1100" in versions, versions
    assert (h.root / "opt/rocm/core-10.1/.info/version").read_text().strip() == "10.1.0"
    assert resolve(h, "/opt/rocm/bin") == "/opt/rocm/core-10.1/bin"
    assert rocm_sources(h) == ["etc/apt/preferences.d/amdrocm-pin-600", "etc/apt/sources.list.d/amdrocm.list"]


def test_profile_per_host_and_torch_source(lab: Lab) -> None:
    for name, want in EXPECTED.items():
        text = (lab.hosts[name].root / PROFILE).read_text()
        assert exports(text) == want, (name, text)
    amd = (lab.hosts["prov-rx6700xt"].root / PROFILE).read_text()
    assert "AMD's multi-arch wheels carry gfx1031 code: no override" in amd, amd
    pt = (lab.hosts["prov-6700xt-pt"].root / PROFILE).read_text()
    assert "download.pytorch.org's ROCm wheels carry no gfx1031 code" in pt, pt


def test_pytorch_source_is_one_setting_away(lab: Lab) -> None:
    h = lab.hosts["prov-6700xt-pt"]
    versions = pip_versions(h)
    assert not any(n.startswith("rocm-sdk-device-") for n in versions), versions  # no AMD extras
    # the stand-in index's torch is taken by `torch==2.14.0`: a ROCm build's local label matches the pin
    assert versions["torch"].startswith("2.14.0+"), versions
    # the system ROCm stays the default Core SDK; amdrocm10.1 for every target (no per-target gfx1031 package)
    assert "amdrocm10.1" in installed(h)


def test_strix_halo_is_a_training_gpu_with_its_unified_memory(lab: Lab) -> None:
    h = lab.hosts["prov-strixhalo"]
    record = json.loads((h.root / "etc/radeonlab/host.json").read_text())
    gpu = record["gpus"][0]
    assert gpu["gfx"] == "gfx1151" and gpu["igpu"] is True
    assert gpu["usable_memory"] == 536870912 + 67148152832 and gpu["override"] is None, gpu
    assert "amdrocm10.1-gfx1151" in installed(h)
    assert "rocm-sdk-device-gfx1151" in pip_versions(h)


def test_switching_streams_leaves_one_source_one_pin_one_rocm(lab: Lab) -> None:
    h = lab.hosts["prov-rx7900xtx"]
    try:
        h.set_data(**LEGACY)
        run = run_deploy(lab.sandbox, [h])
        assert run.returncode == 0, run.stderr[-5000:]
        assert rocm_sources(h) == ["etc/apt/preferences.d/rocm-pin-600", "etc/apt/sources.list.d/rocm.list"]
        assert not any(p.startswith("amdrocm") for p in installed(h))
        assert resolve(h, "/opt/rocm") == "/opt/rocm-7.2.4"
        assert not (h.root / "opt/rocm-7.2.4/core-10.1").exists()
        assert linker_rocm_paths(h) == ["/opt/rocm/lib", "/opt/rocm/lib64"]
    finally:
        h.drop_data(*LEGACY)
    back = run_deploy(lab.sandbox, [h])
    assert back.returncode == 0, back.stderr[-5000:]
    assert rocm_sources(h) == ["etc/apt/preferences.d/amdrocm-pin-600", "etc/apt/sources.list.d/amdrocm.list"]
    packages = installed(h)
    assert "amdrocm10.1-gfx1100" in packages and "rocm-core" not in packages and "rocminfo" not in packages
    assert not (h.root / "opt/rocm-7.2.4").exists()
    assert linker_rocm_paths(h) == ["/opt/rocm/lib"]
    assert resolve(h, "/opt/rocm/lib") == "/opt/rocm/core-10.1/lib"
    assert run_deploy(lab.sandbox, [h]).changed_ops(h.name) == []


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"rocm_version": "10.7"}, "AMD published no ROCm Core SDK 10.7"),
        ({"rocm_stream": "legacy", "rocm_version": "10.0"}, "ROCm 10.0 is not a legacy-stream release"),
        ({"pytorch_version": "2.15.0"}, "torch 2.15.0 has no known ROCm pairing"),
        ({"pytorch_version": "2.13.0"}, "torch 2.13.0 is built for ROCm 10.0, not ROCm 10.1"),
    ],
)
def test_bad_inputs_are_refused_in_one_line_before_any_change(lab: Lab, data: dict, said: str) -> None:
    h = lab.sandbox.create_host("cs-bad", card="rx7900xtx", data=data)
    try:
        before = sorted(str(p) for p in (h.root / "etc/apt").rglob("*"))
        run = run_deploy(lab.sandbox, [h])
        assert run.returncode != 0
        lines = [line for line in (run.stdout + run.stderr).splitlines() if f"cs-bad: {said}" in line]
        assert len(lines) >= 1, run.stderr[-3000:]
        assert sorted(str(p) for p in (h.root / "etc/apt").rglob("*")) == before  # nothing written
        assert not (h.root / "home/lab/radeonlab").exists()
    finally:
        lab.sandbox.destroy_host(h.name)


def test_the_previous_release_and_7_14_1_are_one_setting_away(lab: Lab) -> None:
    """rocm_version as AMD writes it: 10.0.0 (the release before AMD's newest, the default) from the 10.x
    repository, then 7.14.1 from AMD's legacy multi-arch repository (the sandbox serves all from one
    SIMULATED pool; the settings name each). torch from download.pytorch.org's index (its lock is the
    pytorch-source variant's: no second resolution)."""
    h = lab.sandbox.create_host("cs-100", card="rx7900xtx", data={"rocm_version": "10.0.0", **PT})
    try:
        run = run_deploy(lab.sandbox, [h])
        assert run.returncode == 0, run.stderr[-5000:]
        changed = run.changed_ops(h.name)
        assert any("Install ROCm 10.0.0 packages (amdrocm10.0-gfx1100)" in op for op in changed), changed
        assert "amdrocm10.0-gfx1100" in installed(h)
        assert (h.root / "opt/rocm/core-10.0/.info/version").read_text().strip() == "10.0.0"
        assert resolve(h, "/opt/rocm/lib") == "/opt/rocm/core-10.0/lib"
        h.set_data(rocm_version="7.14.1")
        run = run_deploy(lab.sandbox, [h])
        assert run.returncode == 0, run.stderr[-5000:]
        lines = (h.root / "etc/apt/sources.list.d/amdrocm.list").read_text()
        # rocm_coresdk_legacy_multiarch_repo_url, pointed by the sandbox at its SIMULATED packages-multi-arch
        assert "/amd/rocm/packages-multi-arch/debian12 stable main" in lines and "ROCm 7.14.1" in lines, lines
        packages = installed(h)
        assert "amdrocm7.14-gfx1100" in packages and not any(p.startswith("amdrocm10.") for p in packages)
        assert resolve(h, "/opt/rocm/lib") == "/opt/rocm/core-7.14/lib"
    finally:
        lab.sandbox.destroy_host(h.name)
