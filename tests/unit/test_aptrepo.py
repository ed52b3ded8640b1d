"""The SIMULATED AMD-shaped apt repository: apt itself verifies it (and rejects it when tampered with), the
stand-in tools print recorded real outputs, and the loopback web server serves it.

Unit tests run apt-get with a private configuration (never the machine's sources, keyrings or state).
The sandbox test installs from the repository inside a sandbox host.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from radeonlab.sandbox import amddata, aptrepo, config
from radeonlab.sandbox.aptrepo import AptRepoInfo, build_repo
from radeonlab.sandbox.standins import catalog
from radeonlab.sandbox.web import serve, spawn

RECORDED = catalog.RECORDED
PIN_600 = "Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> AptRepoInfo:
    return build_repo(tmp_path_factory.mktemp("state"))


@pytest.fixture(scope="module")
def web(repo: AptRepoInfo):
    with serve(repo.www) as server:
        yield server


def _sources(repo: AptRepoInfo, base_url: str) -> str:
    """Every repository of the tree, as the product would write its sources lines."""
    s = repo.settings(base_url)
    key = f"[arch=amd64 signed-by={repo.binary_key}]"
    lines = [f"deb {key} {s['rocm_repo_url']}/{repo.rocm_dir} {d} main" for d in config.LEGACY_CODENAMES]
    lines += [f"deb {key} {s['rocm_graphics_repo_url']}/{repo.rocm_dir}/ubuntu jammy main"]
    lines += [f"deb {key} {s['rocm_amdgpu_repo_url']}/{config.AMDGPU_DRIVER_VERSION}/ubuntu noble main"]
    lines += [f"deb {key} {s['rocm_coresdk_repo_url']}/{d} stable main" for d in config.CORESDK_DISTROS]
    lines += [
        f"deb {key} {s['rocm_coresdk_multiarch_repo_url']}/{d} stable main" for d in config.CORESDK_DISTROS
    ]
    return "\n".join(lines) + "\n"


class PrivateApt:
    """apt-get / apt-cache confined to a temp directory: own sources, preferences, state, cache, no keys."""

    def __init__(self, root: Path, sources: str, preferences: str = "") -> None:
        self.root = root
        for sub in (
            "state/lists/partial",
            "cache/archives/partial",
            "apt.conf.d",
            "preferences.d",
            "trusted.d",
        ):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "status").write_text("")
        (root / "apt.conf").write_text("")
        (root / "sources.list").write_text(sources)
        (root / "preferences").write_text(preferences)
        options = {
            "Dir::Etc::main": root / "apt.conf",
            "Dir::Etc::parts": root / "apt.conf.d",
            "Dir::Etc::sourcelist": root / "sources.list",
            "Dir::Etc::sourceparts": "-",
            "Dir::Etc::preferences": root / "preferences",
            "Dir::Etc::preferencesparts": root / "preferences.d",
            "Dir::Etc::trusted": "/dev/null",
            "Dir::Etc::trustedparts": root / "trusted.d",
            "Dir::State": root / "state",
            "Dir::State::status": root / "status",
            "Dir::Cache": root / "cache",
            "APT::Sandbox::User": "root",  # the temp dir is not readable by _apt
            "Debug::NoLocking": "1",
        }
        self.options = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
        self.env = {**os.environ, "APT_CONFIG": str(root / "apt.conf"), "LC_ALL": "C"}

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([tool, *self.options, *args], capture_output=True, text=True, env=self.env)


def test_layout_mirrors_amd(repo: AptRepoInfo) -> None:
    amd = repo.root
    for dist in config.LEGACY_CODENAMES:
        for name in ("Release", "InRelease", "Release.gpg", "main/binary-amd64/Packages.gz"):
            assert (amd / "rocm/apt" / repo.rocm_dir / "dists" / dist / name).is_file()
            assert (amd / "graphics" / repo.rocm_dir / "ubuntu/dists" / dist / name).is_file()
            assert (amd / "amdgpu" / config.AMDGPU_DRIVER_VERSION / "ubuntu/dists" / dist / name).is_file()
    assert set(config.CORESDK_DISTROS) == {"ubuntu2204", "ubuntu2404", "ubuntu2604", "debian12", "debian13"}
    for distro in config.CORESDK_DISTROS:
        assert (amd / "rocm/packages" / distro / "dists/stable/InRelease").is_file()
        assert (amd / "rocm/packages-multi-arch" / distro / "dists/stable/InRelease").is_file()
    multi = (amd / "rocm/packages-multi-arch/ubuntu2604/dists/stable/main/binary-amd64/Packages").read_text()
    for name in (
        "amdrocm10.0",
        "amdrocm10.0-gfx1100",
        "amdrocm10.0-gfx1151",
        "amdrocm7.14-gfx1201",
        "amdrocm10.0-gfx110x",
    ):
        assert f"Package: {name}\n" in multi, name
    assert repo.armored_key.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert not repo.binary_key.read_bytes().startswith(b"-----")  # binary, as AMD publishes rocm.gpg
    legacy = (amd / "rocm/apt" / repo.rocm_dir / "dists/noble/Release").read_text()
    assert "Origin: repo.radeon.com\n" in legacy and "SIMULATED" in legacy
    sdk = (amd / "rocm/packages/ubuntu2404/dists/stable/Release").read_text()
    assert "Origin: repo.amd.com\n" in sdk and "Suite: stable\n" in sdk
    packages = (amd / "rocm/apt" / repo.rocm_dir / "dists/noble/main/binary-amd64/Packages").read_text()
    assert "Package: rocminfo\nVersion: 1.0.0.70204-1~24.04\n" in packages
    assert packages.count("(SIMULATED stand-in)\n") == len(
        catalog.legacy_standins(repo.rocm_version, "~24.04")
    )


def test_core_sdk_metas_are_amds_list_not_the_products(repo: AptRepoInfo) -> None:
    """The Core SDK's meta packages come from amdworld/coresdk-packages.yaml (AMD's install selector): every
    per-target and per-family name, a family's Description naming the targets AMD's selector sends to it."""
    sandbox = Path(aptrepo.__file__).parent
    for module in ("aptrepo.py", "config.py", "amddata.py", "standins/catalog.py"):
        assert "radeonlab.roles" not in (sandbox / module).read_text(), module
    assert amddata.coresdk_distros() == config.CORESDK_DISTROS
    families, targets = amddata.coresdk_families(), amddata.coresdk_targets()
    assert families["gfx110x"] == ("gfx1100", "gfx1101", "gfx1102", "gfx1103") and "gfx1153" in targets
    for layout in config.CORESDK_LAYOUT_DIRS.values():
        index = repo.root / "rocm" / layout / "debian12/dists/stable/main/binary-amd64/Packages"
        packages = index.read_text()
        served = set(re.findall(r"^Package: (amdrocm10\.1-gfx\w+)$", packages, re.M))
        assert served == {f"amdrocm10.1-{n}" for n in (*families, *targets)}
        assert "Description: ROCm Core SDK for gfx94x (gfx942) (SIMULATED stand-in)\n" in packages
        assert "ROCm Core SDK for gfx110x (gfx1100, gfx1101, gfx1102, gfx1103) (SIMULATED" in packages


def test_the_stamp_changes_with_amds_package_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository is rebuilt (its stamp differs) when AMD's data changes, not only when code does."""
    before = aptrepo._inputs_digest("7.2.4", ("10.1",), "f")
    world = tmp_path / "amdworld"
    shutil.copytree(amddata.AMDWORLD, world)
    path = world / "coresdk-packages.yaml"
    path.write_text(path.read_text().replace("gfx103x: [gfx1030]", "gfx103x: [gfx1030, gfx1031]"))
    monkeypatch.setattr(amddata, "AMDWORLD", world)
    assert aptrepo._inputs_digest("7.2.4", ("10.1",), "f") != before


def test_dot_zero_release_directory() -> None:
    assert config.rocm_dir_name("7.2.0") == "7.2"
    assert config.rocm_dir_name("7.2.4") == "7.2.4"
    assert config.rocm_dir_name("7.10.0") == "7.10"


def test_rebuild_is_skipped_when_inputs_are_unchanged(repo: AptRepoInfo, tmp_path: Path) -> None:
    release = repo.root / "rocm/apt" / repo.rocm_dir / "dists/jammy/InRelease"
    before = release.stat().st_mtime_ns
    again = build_repo(repo.www.parent)
    assert again.build_seconds == 0.0 and again.fingerprint == repo.fingerprint
    assert release.stat().st_mtime_ns == before


def test_apt_update_verifies_every_repository(repo: AptRepoInfo, web, tmp_path: Path) -> None:
    apt = PrivateApt(tmp_path, _sources(repo, web.url), preferences=PIN_600)
    update = apt.run("apt-get", "update")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "W:" not in update.stderr and "E:" not in update.stderr, update.stderr
    policy = apt.run("apt-cache", "policy", "rocminfo", "amdgpu-dkms", "amdrocm10.0-gfx110x")
    assert policy.returncode == 0, policy.stderr
    assert (
        "Candidate: 1.0.0.70204-1~24.04" in policy.stdout
    )  # noble's build wins: same upstream, ~24.04 > ~22.04
    assert " 600 http://" in policy.stdout  # the product's o=repo.radeon.com pin applies to the legacy stream
    assert "o=repo.amd.com" in apt.run("apt-cache", "policy").stdout
    # the metas resolve to their stand-ins (python3, rocm-core's one outside dependency, is on this machine)
    sdk_meta = "amdrocm10.0-gfx1100"
    plan = apt.run(
        "apt-get",
        "-s",
        "-o",
        "Dir::State::status=/var/lib/dpkg/status",
        "install",
        "rocm",
        "amdgpu-dkms",
        sdk_meta,
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    for name in (
        "rocm-core",
        "hsa-rocr",
        "hip-runtime-amd",
        "rocminfo",
        "rocm-smi-lib",
        "rocm-hip-runtime",
        "amdrocm10.0-simulated-rocminfo",
        sdk_meta,
        "amdgpu-dkms",
    ):
        assert f"Inst {name} " in plan.stdout, plan.stdout


def _tamper(path: Path, needle: bytes) -> None:
    """Change one byte inside the first occurrence of needle."""
    data = bytearray(path.read_bytes())
    at = data.index(needle)
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("target", "complaint"),
    [("InRelease", "BADSIG"), ("Release without InRelease", "BADSIG"), ("Packages", "Hash Sum mismatch")],
)
def test_apt_update_rejects_a_tampered_repository(
    repo: AptRepoInfo, tmp_path: Path, target: str, complaint: str
) -> None:
    www = tmp_path / "www"
    shutil.copytree(repo.www / "amd", www / "amd")
    dist = www / "amd/rocm/apt" / repo.rocm_dir / "dists/jammy"
    if target == "InRelease":
        _tamper(dist / "InRelease", b"Codename: jammy")
    elif target == "Release without InRelease":
        (dist / "InRelease").unlink()
        _tamper(dist / "Release", b"Codename: jammy")
    else:  # one byte of each index (apt fetches the .gz): same size, other hashes than the signed ones
        gz = dist / "main/binary-amd64/Packages.gz"
        _tamper(gz, gz.read_bytes()[len(gz.read_bytes()) // 2 :][:1])
        _tamper(dist / "main/binary-amd64/Packages", b"Package: rocminfo")
    with serve(www) as server:
        s = repo.settings(server.url)
        sources = f"deb [signed-by={repo.binary_key}] {s['rocm_repo_url']}/{repo.rocm_dir} jammy main\n"
        apt = PrivateApt(tmp_path / "apt", sources)
        update = apt.run("apt-get", "update")
    assert update.returncode != 0, update.stdout + update.stderr
    assert "E:" in update.stderr
    assert complaint in update.stdout + update.stderr, update.stdout + update.stderr
    assert apt.run("apt-cache", "policy", "rocminfo").stdout == ""  # nothing from the rejected index


def _extract(repo: AptRepoInfo, dest: Path, *names: str) -> Path:
    """dpkg-deb -x the noble builds of the named stand-ins into dest; returns the install prefix."""
    pool = repo.root / "rocm/apt" / repo.rocm_dir / "pool/main"
    for name in names:
        (deb,) = pool.glob(f"{name[0]}/{name}/{name}_*~24.04_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest / f"opt/rocm-{repo.rocm_version}"


def test_hipconfig_prints_the_hip_version_of_that_rocm(repo: AptRepoInfo, tmp_path: Path) -> None:
    prefix = _extract(repo, tmp_path, "rocm-core", "hip-runtime-amd")
    out = subprocess.run([prefix / "bin/hipconfig", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == config.HIP_VERSION[repo.rocm_version] == "7.2.53211-97f5574fe2"
    assert (prefix / ".info/version").read_text() == "7.2.4\n"


def test_rocminfo_without_dev_kfd_prints_the_recorded_error(repo: AptRepoInfo, tmp_path: Path) -> None:
    if Path("/dev/kfd").exists():
        pytest.skip("this machine has a real /dev/kfd")
    prefix = _extract(repo, tmp_path, "rocm-core", "rocminfo")
    out = subprocess.run([prefix / "bin/rocminfo"], capture_output=True, text=True)
    assert out.returncode != 0
    assert (
        out.stdout == (RECORDED / "errors/rocminfo_kfd_no-such-file_in-container_AS-POSTED.txt").read_text()
    )


def _standin(
    repo: AptRepoInfo, tmp_path: Path, kfd_nodes: dict[int, str], kfd_device: Path, tool: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run a stand-in tool's function from the extracted packages against a KFD tree of our making."""
    prefix = _extract(repo, tmp_path / "root", "rocm-core", "rocminfo", "rocm-smi-lib")
    nodes = tmp_path / "nodes"
    for index, properties in kfd_nodes.items():
        (nodes / str(index)).mkdir(parents=True)
        (nodes / str(index) / "properties").write_text(properties)
    code = (
        "import sys; from pathlib import Path\n"
        f"sys.path.insert(0, {str(prefix / 'libexec/radeonlab-simulated')!r})\n"
        "import standin\n"
        f"standin.KFD_NODES = Path({str(nodes)!r}); standin.KFD_DEVICE = Path({str(kfd_device)!r})\n"
        f"sys.exit(standin.{tool}({list(args)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


CPU_NODE = "cpu_cores_count 8\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\n"


def _gpu_node(target: int, device_id: int) -> str:
    head = "cpu_cores_count 0\nsimd_count 192\n"
    return f"{head}gfx_target_version {target}\nvendor_id 4098\ndevice_id {device_id}\n"


@pytest.mark.parametrize(
    ("target", "device_id", "recording"),
    [
        (110000, 0x744C, "rx7900xtx_gfx1100_rocm6.2.2.txt"),
        (110000, 0x7448, "w7900_gfx1100_rocm6.0.0.txt"),
        (120001, 0x7550, "rx9070xt_gfx1201_rocm7.1.1.txt"),
    ],
)
def test_rocminfo_prints_the_recording_of_the_simulated_card(
    repo: AptRepoInfo, tmp_path: Path, target: int, device_id: int, recording: str
) -> None:
    out = _standin(
        repo, tmp_path, {0: CPU_NODE, 1: _gpu_node(target, device_id)}, Path("/dev/null"), "rocminfo"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == (RECORDED / "rocminfo" / recording).read_text()


def test_rocminfo_has_no_output_for_an_unrecorded_card(repo: AptRepoInfo, tmp_path: Path) -> None:
    out = _standin(repo, tmp_path, {0: CPU_NODE, 1: _gpu_node(100301, 0x73DF)}, Path("/dev/null"), "rocminfo")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == "simulated rocminfo: no recorded output for gfx1031\n"


def test_rocminfo_without_a_gpu_node_invents_nothing(repo: AptRepoInfo, tmp_path: Path) -> None:
    out = _standin(repo, tmp_path, {0: CPU_NODE}, Path("/dev/null"), "rocminfo")
    assert out.returncode == 1 and out.stdout == "" and "no recorded output" in out.stderr


def test_rocm_smi_prints_recordings_for_recorded_arguments_only(repo: AptRepoInfo, tmp_path: Path) -> None:
    nodes = {0: CPU_NODE, 1: _gpu_node(120001, 0x7550)}
    out = _standin(repo, tmp_path, nodes, Path("/dev/null"), "rocm_smi", "--showproductname")
    assert out.returncode == 0
    recorded = (RECORDED / "rocm-smi/rx9070xt_rocm7.13_showproductname_EXCERPT.txt").read_text()
    assert out.stdout == recorded.split("\n", 1)[1]  # without the author's "$ rocm-smi ..." prompt line
    assert "GFX Version:    gfx1201" in out.stdout
    shutil.rmtree(tmp_path / "nodes")
    other = _standin(repo, tmp_path, nodes, Path("/dev/null"), "rocm_smi", "--showtemp")
    assert other.returncode == 1 and other.stdout == "" and "no recorded output" in other.stderr


def test_web_serves_concurrently_and_quietly(repo: AptRepoInfo, capfd: pytest.CaptureFixture[str]) -> None:
    key = "amd/rocm/rocm.gpg.key"
    with serve(repo.www) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with ThreadPoolExecutor(max_workers=8) as pool:
            bodies = list(pool.map(lambda _: urllib.request.urlopen(f"{server.url}/{key}").read(), range(16)))
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{server.url}/amd/missing")
    assert set(bodies) == {(repo.www / key).read_bytes()}
    assert capfd.readouterr().err == ""  # no access log lines
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{server.url}/{key}", timeout=2)  # stopped: the port is closed


def test_web_subprocess_serves_and_ends_with_its_parent_pipe(repo: AptRepoInfo) -> None:
    with spawn(repo.www) as web:
        assert urllib.request.urlopen(f"{web.url}/amd/rocm/rocm.gpg.key").read().startswith(b"-----BEGIN")
        pid = web.pid
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_web_refuses_non_loopback_addresses(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="127.0.0.0/8"):
        serve(tmp_path, address="0.0.0.0")


# --- inside a sandbox host ------------------------------------------------------------------------------

FETCH = (  # minbase has no curl/wget; the product's role fetches the key its own way
    "python3 -c 'import sys, urllib.request as u; sys.stdout.buffer.write(u.urlopen(sys.argv[1]).read())'"
)
# Only the ROCm list: the test neither waits for nor depends on the Debian mirror.
ROCM_ONLY = "-o Dir::Etc::sourcelist=/etc/apt/sources.list.d/rocm.list -o Dir::Etc::sourceparts=- "


def _setup_rocm_apt(host, settings: dict[str, str], rocm_dir: str) -> None:
    """What the product's ROCm role does on a legacy-stream host: dearmored key, sources line, 600 pin."""
    host.exec(
        "set -e; mkdir -p /etc/apt/keyrings; "
        f"{FETCH} {settings['rocm_key_url']} | gpg --dearmor > /etc/apt/keyrings/rocm.gpg; "
        f"echo 'deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] {settings['rocm_repo_url']}/{rocm_dir} "
        "jammy main' > /etc/apt/sources.list.d/rocm.list; "
        f"printf '{PIN_600}' > /etc/apt/preferences.d/rocm-pin-600"
    )


def _apt_get(host, args: str):
    return host.exec(f"DEBIAN_FRONTEND=noninteractive apt-get {ROCM_ONLY}{args}", check=False, timeout=300)


@pytest.mark.sandbox
def test_sandbox_host_installs_rocminfo_that_reports_its_card(sandbox, make_host, tmp_path: Path) -> None:
    repo = build_repo(sandbox.www_dir.parent)
    host = make_host(card="rx7900xtx")
    # a tampered copy, served on its own port: the genuine key must reject it
    tampered = tmp_path / "www"
    shutil.copytree(repo.root, tampered / "amd")
    _tamper(tampered / "amd/rocm/apt" / repo.rocm_dir / "dists/jammy/InRelease", b"Codename: jammy")
    with serve(tampered) as bad:
        _setup_rocm_apt(host, repo.settings(bad.url), repo.rocm_dir)
        update = _apt_get(host, "update")
    assert update.returncode != 0 and "BADSIG" in update.stdout + update.stderr, update.stdout + update.stderr

    with serve(repo.www) as web:
        _setup_rocm_apt(host, repo.settings(web.url), repo.rocm_dir)
        update = _apt_get(host, "update")
        assert update.returncode == 0 and "W:" not in update.stderr, update.stdout + update.stderr
        policy = host.exec("apt-cache policy rocminfo").stdout
        assert "600 http://" in policy, policy  # the o=repo.radeon.com pin matched the Release's Origin
        install = _apt_get(host, "install -y rocminfo")
        assert install.returncode == 0, install.stdout + install.stderr
    assert host.exec("readlink -f /opt/rocm").stdout.strip() == f"/opt/rocm-{repo.rocm_version}"
    assert host.exec("cat /opt/rocm/.info/version").stdout == f"{repo.rocm_version}\n"
    rocminfo = host.exec("/opt/rocm/bin/rocminfo")
    assert "  Name:                    gfx1100" in rocminfo.stdout
    assert "Marketing Name:          Radeon RX 7900 XTX" in rocminfo.stdout
    host.set_card("rx9070xt")  # the same install answers for whatever card the host now has
    assert "  Name:                    gfx1201" in host.exec("/opt/rocm/bin/rocminfo").stdout


def test_the_signing_key_is_made_under_a_state_dir_too_deep_for_gpg_agents_socket(tmp_path: Path) -> None:
    """gpg-agent's socket goes in the home directory and its path must fit in 108 bytes: a state dir deep in
    pytest's worker folders (or a user's long RADEONLAB_SANDBOX_DIR) made gpg stop with exit 2. The key is
    still made there, and signing with it works."""
    home = tmp_path / ("d" * 60) / "aptrepo" / "gnupg"
    assert len(f"{home}/S.gpg-agent.browser") > 108
    fingerprint = aptrepo._ensure_key(home)
    release = tmp_path / "Release"
    release.write_text("Origin: radeonlab SIMULATED\n")
    try:
        aptrepo._sign(home, fingerprint, release)
    finally:
        aptrepo._stop_agent(home)
    assert re.fullmatch(r"[0-9A-F]{40}", fingerprint) and (home / "pubring.kbx").is_file()
    assert (tmp_path / "Release.gpg").is_file() and (tmp_path / "InRelease").is_file()
