"""A signed apt repository shaped like AMD's, holding SIMULATED stand-in ROCm packages, under <www>/amd/.

The tree mirrors AMD's URL layout so the product changes only its base URLs:
  rocm/apt/<ver>/dists/{jammy,noble}/...  rocm/rocm.gpg.key (ASCII)     -- legacy stream, repo.radeon.com
  graphics/<ver>/ubuntu/dists/...  amdgpu/<x>/ubuntu/dists/...            -- same key, same origin
  rocm/packages/<distro>/dists/stable/...  rocm/packages/gpg/rocm.gpg    -- Core SDK, per-family layout
  rocm/packages-multi-arch/<distro>/dists/stable/...                      -- Core SDK, multi-arch layout
  (distros ubuntu2204/2404/2604, debian12/13; every Core SDK series of amdworld/releases.yaml side by side)
The Core SDK's distros and meta package names are AMD's (amdworld/coresdk-packages.yaml, read by amddata.py),
never the product's tables: a product mistake about AMD's package names then fails its tests. Both layouts
serve the metas of both (per-family and per-target) for every series: AMD's documents list per-family packages
for 7.13 and per-target ones for 7.14.x and 10.0 only, so serving all of them everywhere is this test bed's
SIMULATED choice.
Release files name AMD's origins (so the product's apt pins apply) and a Label saying they are simulated.
They are signed with a throwaway key generated in a private GNUPGHOME under the state directory (never the
machine's keyring). Built with dpkg-deb and gpg; the indexes are written here (no apt-utils needed).
"""

from __future__ import annotations

import atexit
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from radeonlab.sandbox import amddata, config
from radeonlab.sandbox.standins import catalog

STAMP = "built.json"
HASHES = (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"))


@dataclass(frozen=True)
class AptRepoInfo:
    """Where the built repository is and what signs it."""

    www: Path  # the served root; the repository is www/amd
    fingerprint: str
    rocm_version: str
    coresdk_versions: tuple[str, ...]
    build_seconds: float  # 0.0 when the existing tree was reused

    @property
    def root(self) -> Path:
        return self.www / "amd"

    @property
    def rocm_dir(self) -> str:
        return config.rocm_dir_name(self.rocm_version)

    @property
    def armored_key(self) -> Path:
        return self.root / "rocm" / "rocm.gpg.key"

    @property
    def binary_key(self) -> Path:
        """The same public key unarmored: usable directly as an apt signed-by keyring."""
        return self.root / "rocm" / "packages" / "gpg" / "rocm.gpg"

    def settings(self, base_url: str) -> dict[str, str]:
        """Product settings pointing the ROCm role at this repository served from base_url (the www root)."""
        amd = f"{base_url.rstrip('/')}/amd"
        return {
            "rocm_repo_url": f"{amd}/rocm/apt",
            "rocm_key_url": f"{amd}/rocm/rocm.gpg.key",
            "rocm_graphics_repo_url": f"{amd}/graphics",
            "rocm_amdgpu_repo_url": f"{amd}/amdgpu",
            "rocm_coresdk_repo_url": f"{amd}/rocm/packages",
            "rocm_coresdk_multiarch_repo_url": f"{amd}/rocm/packages-multi-arch",
            # 7.14.x: AMD's legacy multi-arch repository; here the same pool serves every release
            "rocm_coresdk_legacy_multiarch_repo_url": f"{amd}/rocm/packages-multi-arch",
            "rocm_coresdk_legacy_multiarch_key_url": f"{amd}/rocm/packages/gpg/rocm.gpg",
            "rocm_coresdk_key_url": f"{amd}/rocm/packages/gpg/rocm.gpg",
            "rocm_coresdk_family_key_url": f"{amd}/rocm/packages/gpg/rocm.gpg",
            "rocm_coresdk_origin": config.APT_ORIGIN_CORESDK,  # its Release files' Origin (loopback host)
        }


def build_repo(
    state_dir: Path = config.STATE_DIR,
    rocm_version: str = config.ROCM_VERSION,
    coresdk_versions: tuple[str, ...] = config.CORESDK_VERSIONS,
) -> AptRepoInfo:
    """Build (or reuse, when its inputs are unchanged) the repository under config.www_dir(state_dir)/amd."""
    work = config.aptrepo_dir(state_dir)
    www = config.www_dir(state_dir)
    fingerprint = _ensure_key(work / "gnupg")
    inputs = _inputs_digest(rocm_version, coresdk_versions, fingerprint)
    stamp = www / "amd" / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()).get("inputs") == inputs:
        return AptRepoInfo(www, fingerprint, rocm_version, coresdk_versions, 0.0)

    started = time.monotonic()
    www.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="amd.", dir=www))  # same filesystem: the swap is a rename
    try:
        _build_tree(staging, work / "gnupg", fingerprint, rocm_version, coresdk_versions)
        (staging / STAMP).write_text(json.dumps({"inputs": inputs, "fingerprint": fingerprint}) + "\n")
        staging.chmod(0o755)
        old = www / "amd"
        if old.exists():
            retired = Path(tempfile.mkdtemp(prefix="amd.old.", dir=www))
            old.rename(retired / "amd")
            staging.rename(old)
            shutil.rmtree(retired)
        else:
            staging.rename(old)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _stop_agent(work / "gnupg")
    return AptRepoInfo(www, fingerprint, rocm_version, coresdk_versions, time.monotonic() - started)


def _inputs_digest(rocm_version: str, coresdk_versions: tuple[str, ...], fingerprint: str) -> str:
    """Everything the tree depends on: this code, the stand-in payloads and recordings, the config data and
    AMD's facts (amdworld/*.yaml: a changed package list is a changed tree, so the stamp must change)."""
    digest = hashlib.sha256()
    sources = [
        Path(__file__),
        Path(config.__file__),
        Path(amddata.__file__),
        *sorted(amddata.AMDWORLD.glob("*.yaml")),
        *sorted(catalog.HERE.rglob("*")),
    ]
    for path in sources:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    digest.update(f"{rocm_version}|{','.join(coresdk_versions)}|{fingerprint}".encode())
    return digest.hexdigest()


# --- signing key ---------------------------------------------------------------------------------------


# gpg-agent's sockets live in the home directory where the machine has no /run/user/<uid>, and a socket's
# path must fit in 108 bytes (sun_path): a state dir deep under pytest's temporary folders (a worker's
# popen-gwN/) passes that and gpg stops with exit 2. gpg is given a short symlink to the home instead.
_SHORT_HOMES: dict[Path, str] = {}


def _home_arg(home: Path) -> str:
    if home not in _SHORT_HOMES:
        link = Path(tempfile.mkdtemp(prefix="rl-gpg-")) / "h"
        link.symlink_to(home.resolve())
        atexit.register(shutil.rmtree, link.parent, True)
        _SHORT_HOMES[home] = str(link)
    return _SHORT_HOMES[home]


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    command = ["gpg", "--homedir", _home_arg(home), "--batch", "--no-tty", "--quiet", *args]
    return subprocess.run(command, input=stdin, check=True, capture_output=True).stdout


def _ensure_key(home: Path) -> str:
    """Fingerprint of the throwaway signing key, generated once (no passphrase) and kept with the state
    so that hosts which already trust it keep verifying after a rebuild."""
    if not (home / "fingerprint").is_file():
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        home.chmod(0o700)
        _gpg(home, "--passphrase", "", "--quick-gen-key", config.APT_KEY_UID, "ed25519", "sign", "never")
        listing = _gpg(home, "--with-colons", "--list-secret-keys").decode()
        fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        (home / "fingerprint").write_text(fingerprint + "\n")
        _stop_agent(home)
    return (home / "fingerprint").read_text().strip()


def _stop_agent(home: Path) -> None:
    """gpg starts an agent for secret-key operations: end it so nothing outlives the build."""
    if home.is_dir():
        subprocess.run(["gpgconf", "--homedir", _home_arg(home), "--kill", "gpg-agent"], capture_output=True)


def _sign(home: Path, fingerprint: str, release: Path) -> None:
    common = ("--local-user", fingerprint, "--digest-algo", "SHA512", "--yes")
    _gpg(home, *common, "--clearsign", "--output", str(release.with_name("InRelease")), str(release))
    _gpg(
        home,
        *common,
        "--armor",
        "--detach-sign",
        "--output",
        str(release.with_name("Release.gpg")),
        str(release),
    )


# --- packages and indexes ------------------------------------------------------------------------------


def _build_deb(pkg: catalog.Standin, pool: Path) -> Path:
    """dpkg-deb a stand-in into pool/main/<initial>/<name>/ as AMD's pools are laid out."""
    version_in_name = pkg.version.split(":", 1)[-1]  # the epoch is not part of a .deb file name
    out = pool / "main" / pkg.name[0] / pkg.name / f"{pkg.name}_{version_in_name}_{pkg.architecture}.deb"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deb.") as tmp:
        stage = Path(tmp)
        stage.chmod(0o755)  # becomes the package's "./" entry: mkdtemp's 0700 must not reach a host's /
        size = 0
        for target, (content, mode) in pkg.files.items():
            path = stage / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
            size += len(content)
        control = stage / "DEBIAN"
        control.mkdir()
        (control / "control").write_text(pkg.control(installed_kb=max(1, size // 1024)))
        for name, text in pkg.scripts.items():
            (control / name).write_text(text)
            (control / name).chmod(0o755)
        env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600"}  # reproducible member timestamps
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(stage), str(out)],
            check=True,
            capture_output=True,
            env=env,
        )
    return out


def _stanza(pkg: catalog.Standin, deb: Path, repo_root: Path) -> str:
    data = deb.read_bytes()
    control = pkg.control(installed_kb=max(1, sum(len(c) for c, _ in pkg.files.values()) // 1024))
    extra = {
        "Filename": deb.relative_to(repo_root).as_posix(),
        "Size": str(len(data)),
        "MD5sum": hashlib.md5(data).hexdigest(),
        "SHA1": hashlib.sha1(data).hexdigest(),
        "SHA256": hashlib.sha256(data).hexdigest(),
    }
    description_at = control.index("Description:")
    head = control[:description_at] + "".join(f"{k}: {v}\n" for k, v in extra.items())
    return head + control[description_at:]


def _write_dist(repo_root: Path, dist: str, stanzas: list[str], origin: str, suite: str) -> Path:
    """dists/<dist>/main/binary-amd64/Packages(.gz) and the unsigned Release over them."""
    dist_dir = repo_root / "dists" / dist
    binary = dist_dir / config.APT_COMPONENT / f"binary-{config.APT_ARCH}"
    binary.mkdir(parents=True, exist_ok=True)
    packages = "\n".join(stanzas).encode()
    (binary / "Packages").write_bytes(packages)
    (binary / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    indexes = sorted(p for p in binary.iterdir())
    lines = [
        f"Origin: {origin}",
        f"Label: {config.APT_LABEL}",
        f"Suite: {suite}",
        f"Codename: {dist}",
        f"Date: {formatdate(usegmt=True)}",
        f"Architectures: {config.APT_ARCH}",
        f"Components: {config.APT_COMPONENT}",
        "Description: radeonlab SIMULATED stand-in packages with ROCm's names, for the sandbox only",
    ]
    for field, algorithm in HASHES:
        lines.append(f"{field}:")
        for path in indexes:
            data = path.read_bytes()
            digest = hashlib.new(algorithm, data).hexdigest()
            lines.append(f" {digest} {len(data):>8} {path.relative_to(dist_dir).as_posix()}")
    release = dist_dir / "Release"
    release.write_text("\n".join(lines) + "\n")
    return release


def _repository(
    repo_root: Path, dists: dict[str, list[catalog.Standin]], origin: str, suite: str | None
) -> list[Path]:
    """One apt repository (one sources.list base URL) with a pool shared by its dists; returns Releases."""
    releases = []
    for dist, packages in dists.items():
        debs = [_build_deb(pkg, repo_root / "pool") for pkg in packages]
        stanzas = [_stanza(pkg, deb, repo_root) for pkg, deb in zip(packages, debs, strict=True)]
        releases.append(_write_dist(repo_root, dist, stanzas, origin, suite or dist))
    return releases


def _build_tree(
    amd: Path, gnupg: Path, fingerprint: str, rocm_version: str, coresdk_versions: tuple[str, ...]
) -> None:
    ver_dir = config.rocm_dir_name(rocm_version)
    suffix = config.LEGACY_DIST_SUFFIX
    legacy_origin, sdk_origin = config.APT_ORIGIN_LEGACY, config.APT_ORIGIN_CORESDK
    jobs = [
        (
            amd / "rocm" / "apt" / ver_dir,
            {d: catalog.legacy_standins(rocm_version, suffix[d]) for d in config.LEGACY_CODENAMES},
            legacy_origin,
            None,
        ),
        # graphics: from ROCm 7.0 a second line; here a valid, empty index
        (
            amd / "graphics" / ver_dir / "ubuntu",
            {d: [] for d in config.LEGACY_CODENAMES},
            legacy_origin,
            None,
        ),
        (
            amd / "amdgpu" / config.AMDGPU_DRIVER_VERSION / "ubuntu",
            {d: catalog.amdgpu_standins(suffix[d]) for d in config.LEGACY_CODENAMES},
            legacy_origin,
            None,
        ),
    ]
    # The Core SDK: both releases in one pool per layout; built once, then hard-linked into every distro
    # directory (each directory is its own apt repository with its own pool, as AMD's are).
    families, targets = amddata.coresdk_families(), amddata.coresdk_targets()
    sdk = [p for v in coresdk_versions for p in catalog.coresdk_standins(v, families, targets)]
    first = amd / "rocm" / config.CORESDK_LAYOUT_DIRS["multi-arch"] / config.CORESDK_DISTROS[0]
    with ThreadPoolExecutor(max_workers=4) as pool:
        debs = list(pool.map(lambda pkg: _build_deb(pkg, first / "pool"), sdk))
    for layout_dir in config.CORESDK_LAYOUT_DIRS.values():
        for distro in config.CORESDK_DISTROS:
            root = amd / "rocm" / layout_dir / distro
            stanzas = []
            for pkg, deb in zip(sdk, debs, strict=True):
                target = root / deb.relative_to(first)
                if target != deb:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.link(deb, target)
                stanzas.append(_stanza(pkg, target, root))
            jobs_release = _write_dist(root, config.CORESDK_SUITE, stanzas, sdk_origin, config.CORESDK_SUITE)
            _sign(gnupg, fingerprint, jobs_release)
    # dpkg-deb and gpg are separate processes: a few threads overlap them
    with ThreadPoolExecutor(max_workers=4) as pool:
        releases = [r for rs in pool.map(lambda job: _repository(*job), jobs) for r in rs]
    for release in releases:  # one agent, serially: gpg-agent dislikes concurrent first contact
        _sign(gnupg, fingerprint, release)
    key_dir = amd / "rocm" / "packages" / "gpg"
    key_dir.mkdir(parents=True, exist_ok=True)
    (amd / "rocm" / "rocm.gpg.key").write_bytes(_gpg(gnupg, "--armor", "--export", fingerprint))
    (key_dir / "rocm.gpg").write_bytes(_gpg(gnupg, "--export", fingerprint))
    for path in amd.rglob("*"):  # served to everyone; mkdtemp made the root 0700
        path.chmod(0o755 if path.is_dir() else 0o644)
