"""The base root filesystem every sandbox host is layered on: built once, cached under CACHE_DIR/base.

Debian minbase (`debootstrap`) from the machine's own apt mirror, plus BASE_PACKAGES, the machine's extra
CA certificates, the `render` group a real Ubuntu has, and the login user with passwordless sudo. Package
scripts cannot start daemons (policy-rc.d exits 101), apt keeps no caches (each host's overlay stays
small), and no SSH host key is left: every host gets its own.

The build is atomic (built in base.tmp, then renamed) and guarded by a file lock, so concurrent test
sessions build it once. A marker records the recipe; a changed package list or recipe rebuilds the base.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from radeonlab.sandbox import config
from radeonlab.sandbox.host import SandboxError

MARKER = ".radeonlab-base.json"

# No package caches kept (like Docker's debian images): otherwise ~80 MB per host on its first apt run.
APT_NO_CACHE = """\
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT::Keep-Downloaded-Packages "false";
Binary::apt::APT::Keep-Downloaded-Packages "false";
Acquire::Languages "none";
Acquire::GzipIndexes "true";
"""


class BaseBuildError(RuntimeError):
    """The base rootfs could not be built (the message says what to do)."""


def base_dir(cache_dir: Path = config.CACHE_DIR) -> Path:
    return cache_dir / "base"


def recipe(packages: list[str] | None = None) -> dict:
    """What the marker records: a different recipe means a different base."""
    return {
        "recipe_version": config.BASE_RECIPE_VERSION,
        "suite": config.BASE_SUITE,
        "variant": config.BASE_VARIANT,
        "packages": sorted(packages if packages is not None else config.BASE_PACKAGES),
        "user": config.HOST_USER,
        "render_group": config.RENDER_GROUP,
    }


def machine_mirror(sources: Path = config.MACHINE_APT_SOURCES) -> str:
    """The first `URIs:` of the machine's deb822 sources: the Debian mirror this machine is set up to reach
    (radeonlab names none of its own). None there: one line saying so."""
    try:
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and len(line.split()) > 1:
                return line.split()[1]
    except OSError:
        pass
    why = "the sandbox builds its hosts from the mirror this machine's apt uses"
    raise SandboxError(f"no Debian mirror in {sources} (`URIs:`): {why}")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise BaseBuildError(f"{what} failed (exit {done.returncode}); last lines of {log}:\n{tail}")


def in_chroot(root: Path, script: str, log: Path, what: str) -> None:
    """Run a shell script chrooted in `root`, inside throwaway mount+pid namespaces.

    /proc, /dev/pts and /dev/shm are mounted only inside the namespace: when the script ends they vanish
    with it, so nothing needs unmounting and nothing leaks onto the machine.
    """
    setup = (
        'r=$1; shift; mount -t proc proc "$r/proc"; '
        'mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$r/dev/pts"; '
        'mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"; '
        f'exec chroot "$r" /usr/bin/env -i PATH={config.HOST_PATH} HOME=/root LANG=C.UTF-8 '
        'DEBIAN_FRONTEND=noninteractive /bin/sh -ec "$1"'
    )
    cmd = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "--"]
    _run([*cmd, "/bin/sh", "-c", setup, "sh", str(root), script], log, what)


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1]
        # an overlay using `path` as its lower layer counts too: a host still runs on it
        if target == str(path) or target.startswith(prefix) or f"lowerdir={path}" in line:
            mounts.append(target)
    return mounts


def _build(tmp: Path, want: dict, cache_dir: Path, say: Callable[[str], None]) -> None:
    if shutil.which("debootstrap") is None:
        raise BaseBuildError(
            "debootstrap is not installed: apt-get install -y debootstrap (.ci/run does this)"
        )
    if _mounts_under(tmp):
        raise BaseBuildError(f"mounts remain under {tmp}; refusing to delete it")
    shutil.rmtree(tmp, ignore_errors=True)
    log = cache_dir / "base-build.log"
    log.write_text("")
    mirror = machine_mirror()
    t0 = time.monotonic()
    say(f"debootstrap {want['variant']} {want['suite']} from {mirror} (log: {log})")
    debs = cache_dir / "debootstrap-debs"
    debs.mkdir(parents=True, exist_ok=True)
    # private mount namespace: the /proc and /sys debootstrap mounts in the target vanish with it
    debootstrap = ["debootstrap", f"--variant={want['variant']}", f"--cache-dir={debs}", want["suite"]]
    _run(
        ["unshare", "--mount", "--propagation", "private", "--", *debootstrap, str(tmp), mirror],
        log,
        "debootstrap",
    )
    say(f"debootstrap done in {time.monotonic() - t0:.1f}s")
    t1 = time.monotonic()
    if config.MACHINE_APT_SOURCES.is_file():  # same suites as the machine (incl. -updates, -security)
        (tmp / "etc/apt/sources.list").unlink(missing_ok=True)
        shutil.copy(config.MACHINE_APT_SOURCES, tmp / "etc/apt/sources.list.d/")
    policy = tmp / "usr/sbin/policy-rc.d"
    # package scripts never start daemons: they would bind the machine's ports
    policy.write_text(
        "#!/bin/sh\n# radeonlab sandbox host: never start daemons from package scripts\nexit 101\n"
    )
    policy.chmod(0o755)
    (tmp / "etc/apt/apt.conf.d/90radeonlab-sandbox").write_text(APT_NO_CACHE)
    ca_dest = tmp / "usr/local/share/ca-certificates"
    ca_dest.mkdir(parents=True, exist_ok=True)
    for crt in sorted(config.MACHINE_CA_DIR.glob("*.crt")):
        shutil.copy(crt, ca_dest / crt.name)
    shutil.copy("/etc/resolv.conf", tmp / "etc/resolv.conf")
    user = want["user"]
    script = f"""
apt-get update -q
apt-get install -y -q --no-install-recommends {" ".join(want["packages"])}
apt-get clean
update-ca-certificates
getent group {want["render_group"]} >/dev/null || groupadd --system {want["render_group"]}
id -u {user} >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo {user}
usermod -p '*' {user}
echo '{user} ALL=(ALL:ALL) NOPASSWD:ALL' > /etc/sudoers.d/90-{user}
chmod 440 /etc/sudoers.d/90-{user}
"""
    in_chroot(tmp, script, log, "installing base packages")
    for key in (tmp / "etc/ssh").glob("ssh_host_*"):  # every host gets its own key
        key.unlink()
    (tmp / MARKER).write_text(json.dumps(want, indent=1) + "\n")
    say(f"base packages installed in {time.monotonic() - t1:.1f}s")


def ensure_base(
    cache_dir: Path = config.CACHE_DIR,
    packages: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Return the cached base rootfs, building it first if it is missing or was built from another recipe."""
    base = base_dir(cache_dir)
    want = recipe(packages)
    with _locked(cache_dir / "base.lock"):
        try:
            if json.loads((base / MARKER).read_text()) == want:
                return base
        except (OSError, ValueError):
            pass
        tmp = base.with_name("base.tmp")
        t0 = time.monotonic()
        _build(tmp, want, cache_dir, say)
        if base.exists():
            # a running host may still use the old base as its overlay's lower layer: keep it if so
            old = base.with_name(f"base.old.{int(time.time())}")
            base.rename(old)
            if _mounts_under(old):
                say(f"previous base kept at {old} (hosts still use it)")
            else:
                shutil.rmtree(old)
        tmp.rename(base)
        say(f"base ready at {base} in {time.monotonic() - t0:.1f}s")
    return base
