"""SIMULATED Ubuntu 24.04 for a sandbox host: what AMD's kernel/driver path installs from Ubuntu's archive.

Sandbox hosts are Debian 12 chroots on this machine's kernel: no systemd, no kernel packages of their own.
AMD lists no Debian for Radeon (roles/rocm/driver.py stops there), so the end-to-end test of that path gives
one host an Ubuntu 24.04 identity, test bed only:
- /etc/os-release of Ubuntu 24.04 (noble), with a RADEONLAB_SIMULATED field saying what the host really is;
- a signed apt repository, <www>/ubuntu-simulated (dists/noble), of SIMULATED stand-ins with the names the
  product installs: the kernel metapackages (linux-generic-hwe-24.04, linux-oem-24.04a) and
  linux-headers-<uname -r> / linux-modules-extra-<uname -r> for the kernel the host runs (this machine's).
  They install only a marker file under /usr/share/radeonlab-simulated/: no kernel, no headers, no module.
AMD's amdgpu-dkms stand-in comes from the SIMULATED AMD repository (aptrepo.py); the reboot is the host's
SIMULATED `reboot` (host_init.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from radeonlab.sandbox import aptrepo, config
from radeonlab.sandbox.standins import catalog

DIST = "noble"
DIR = "ubuntu-simulated"
KEYRING = "/etc/apt/keyrings/radeonlab-simulated-ubuntu.gpg"
LIST = "/etc/apt/sources.list.d/radeonlab-simulated-ubuntu.list"
KERNEL_METAPACKAGES = ("linux-generic-hwe-24.04", "linux-oem-24.04a")
OS_RELEASE = """\
PRETTY_NAME="Ubuntu 24.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.4 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=noble
RADEONLAB_SIMULATED="a Debian 12 sandbox host presenting itself as Ubuntu 24.04 (test bed only)"
"""


def standins(kernel_release: str) -> list[catalog.Standin]:
    """The stand-ins, each leaving /usr/share/radeonlab-simulated/<name> (what tests look for)."""
    names = [*KERNEL_METAPACKAGES, f"linux-headers-{kernel_release}", f"linux-modules-extra-{kernel_release}"]
    return [
        catalog.Standin(
            name,
            "1.0-0radeonlab1",
            f"{name}: Ubuntu kernel package",
            files={
                f"/usr/share/radeonlab-simulated/{name}": (
                    f"{name}: {catalog.SIMULATED_NOTE}\nNothing of a kernel is installed.\n".encode(),
                    0o644,
                )
            },
            architecture="all",
            section="kernel",
        )
        for name in names
    ]


def build(state_dir: Path = config.STATE_DIR, kernel_release: str | None = None) -> Path:
    """Build (or reuse) <www>/ubuntu-simulated for `kernel_release` (default: this machine's `uname -r`);
    signed with the SIMULATED AMD repository's throwaway key. Returns the repository's root."""
    kernel_release = kernel_release or os.uname().release
    work = config.aptrepo_dir(state_dir)
    fingerprint = aptrepo._ensure_key(work / "gnupg")
    root = config.www_dir(state_dir) / DIR
    digest = hashlib.sha256(Path(__file__).read_bytes() + Path(catalog.__file__).read_bytes())
    inputs = digest.hexdigest() + "|" + kernel_release + "|" + fingerprint
    stamp = root / aptrepo.STAMP
    if stamp.is_file() and json.loads(stamp.read_text()).get("inputs") == inputs:
        return root
    shutil.rmtree(root, ignore_errors=True)
    try:
        for release in aptrepo._repository(root, {DIST: standins(kernel_release)}, "Ubuntu", DIST):
            aptrepo._sign(work / "gnupg", fingerprint, release)
        (root / "key.gpg").write_bytes(aptrepo._gpg(work / "gnupg", "--export", fingerprint))
    finally:
        aptrepo._stop_agent(work / "gnupg")
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    stamp.write_text(json.dumps({"inputs": inputs}) + "\n")
    return root


def present_as_ubuntu_2404(host_root: Path, repo_root: Path, base_url: str) -> None:
    """Give the host at `host_root` (seen from this machine) the Ubuntu 24.04 identity and the SIMULATED
    archive's apt source. Test bed only."""
    os_release = host_root / "etc/os-release"
    if os_release.is_symlink() or os_release.exists():
        os_release.unlink()
    os_release.write_text(OS_RELEASE)
    keyring = host_root / KEYRING.lstrip("/")
    keyring.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(repo_root / "key.gpg", keyring)
    keyring.chmod(0o644)
    (host_root / LIST.lstrip("/")).write_text(
        f"# SIMULATED Ubuntu archive (radeonlab sandbox)\n"
        f"deb [signed-by={KEYRING}] {base_url.rstrip('/')}/{DIR} {DIST} main\n"
    )
