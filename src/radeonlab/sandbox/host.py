"""One sandbox workstation (SIMULATED): its namespaces, its sshd, its card, commands run inside it.

The set of hosts, their addresses, keys and inventory are radeonlab/sandbox/hosts.py's; this module is one
host's life: start (setsid unshare + chroot or pivot_root + the simulated init), stop, sshd off/on, a
simulated reboot, a card swap, and `exec` for tests' inspection. See hosts.py's docstring for the whole API.
Why this module is long: a host's start has two roots (chroot, or pivot_root for a container host whose
rootless Podman needs a user namespace) and one teardown for both; split, each half would read the other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from radeonlab.sandbox import config, simcards


class Sandbox(Protocol):
    """What a host needs of its sandbox (radeonlab/sandbox/hosts.py Sandbox), named here so that this module
    does not import the one that imports it."""

    hosts_dir: Path
    key: Path
    known_hosts: Path
    common_data: dict[str, Any]

    def write_inventory(self) -> Path: ...


INIT_SOURCE = Path(__file__).with_name("host_init.py")

# The host's `reboot`, SIMULATED: a real one would restart the machine through systemd; this asks the
# simulated init (PID 1) for a reboot with SIGINT (the signal a real init gets for ctrl-alt-del).
REBOOT_STANDIN = """#!/bin/sh
# SIMULATED reboot (radeonlab sandbox): the host's init ends every process and starts sshd again.
exec kill -INT 1
"""

# The namespace's setup, run by `sh` inside the new namespaces before it becomes the host's init.
# The simulated card tree goes over /sys/class after the machine's sysfs is mounted read-only.
START_SCRIPT = f"""
r=$1 name=$2 sysclass=$3 syspci=$4 boot=$5 pivot=$6
if [ -n "$pivot" ]; then mount --bind "$r" "$r"; fi  # pivot_root needs the new root to be a mount point
mount -t proc -o nosuid,nodev,noexec proc "$r/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$r/sys"
mount --bind "$sysclass" "$r/sys/class"
mount -o remount,bind,ro "$r/sys/class"
if [ -d "$syspci" ] && [ -d "$r/sys/bus/pci/devices" ]; then
  mount --bind "$syspci" "$r/sys/bus/pci/devices"; mount -o remount,bind,ro "$r/sys/bus/pci/devices"
fi
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$r/run"
mkdir -p "$r/run/sshd" "$r/run/lock"; chmod 1777 "$r/run/lock"
if [ -d "$boot" ]; then  # SIMULATED: the card's trees once a driver drives it, for the simulated reboot
  mkdir -p "$r{config.BOOT_DRIVEN_PATH}"
  mount --bind "$boot" "$r{config.BOOT_DRIVEN_PATH}"; mount -o remount,bind,ro "$r{config.BOOT_DRIVEN_PATH}"
fi
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$r/dev/pts"
mount --bind "$r/dev/pts/ptmx" "$r/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
if [ -n "$pivot" ]; then  # as a real host (systemd) has it: rootless Podman's --ipc=host binds it
  mkdir -p "$r/dev/mqueue"; mount -t mqueue -o nosuid,nodev,noexec mqueue "$r/dev/mqueue"
fi
hostname "$name"
if [ -n "$pivot" ]; then cd "$r"; pivot_root . .; umount -l .; r=/; fi
exec chroot "$r" /usr/bin/env -i PATH={config.HOST_PATH} LANG=C.UTF-8 \\
  /usr/bin/python3 -u {config.HOST_INIT_PATH}
"""
# A host whose training user runs rootless Podman (radeonlab_runtime: container) gets its rootfs as the root
# mount of its mount namespace (pivot_root) instead of a chroot: the kernel refuses a chrooted process a new
# user namespace (clone: EPERM), which rootless Podman needs. Its processes' /proc/PID/root then reads "/"
# from this machine, so pids_rooted_in also compares the root directory itself (device and inode).
PIVOT_DATA = ("radeonlab_runtime", "container")

SSHD_CONFIG = """\
ListenAddress {address}:{port}
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
PidFile /run/sshd.pid
MaxStartups 50:30:100
MaxSessions 50
"""

# Popen handles of hosts started by this process, so their unshare processes are reaped (no zombies).
_CHILDREN: dict[int, subprocess.Popen] = {}


class SandboxError(RuntimeError):
    """A sandbox host could not be created, started or removed cleanly."""


def _port_open(address: str, port: int, timeout: float = 0.2) -> bool:
    with socket.socket() as s:
        s.settimeout(timeout)
        return s.connect_ex((address, port)) == 0


def _port_free(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pids_rooted_in(path: Path) -> list[int]:
    """Processes whose root directory is `path` or below it (anything still running in a host): by the
    root's path (a chroot), or by the root directory itself, `path` or a host's root folder under it
    (<path>/root, <path>/*/root: a pivot_root host, whose root reads "/" from here)."""
    prefix = str(path).rstrip("/")
    roots = set()
    for candidate in (path, path / "root", *path.glob("*/root")):
        with contextlib.suppress(OSError):
            st = candidate.stat()
            roots.add((st.st_dev, st.st_ino))
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            root = os.readlink(proc / "root")
        except OSError:
            continue
        inside = root == prefix or root.startswith(prefix + "/")
        if not inside and root == "/" and roots:
            with contextlib.suppress(OSError):
                st = (proc / "root").stat()
                inside = (st.st_dev, st.st_ino) in roots and (st.st_dev, st.st_ino) != _OWN_ROOT
        if inside and _alive(int(proc.name)):
            found.append(int(proc.name))
    return found


_OWN_ROOT = (os.stat("/").st_dev, os.stat("/").st_ino)


def mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/")
    targets = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    return [t for t in targets if t == prefix or t.startswith(prefix + "/")]


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.rename(path)


def _passwd_ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == user:
            return int(f[2]), int(f[3])
    raise SandboxError(f"user {user} missing from {root}/etc/passwd")


class SandboxHost:
    """One simulated workstation (see the module docstring for the API)."""

    def __init__(
        self,
        sandbox: Sandbox,
        name: str,
        number: int,
        card: str | None,
        data: dict | None = None,
        driven: bool = True,
    ):
        self.sandbox = sandbox
        self.name = name
        self.number = number
        self.card = card
        self.driven = driven  # False: the card is on PCI only, until the SIMULATED driver and a reboot
        self.data: dict[str, Any] = dict(data or {})
        self.address = f"{config.HOST_ADDRESS_PREFIX}{number}"
        self.port = config.HOST_PORT_BASE + number
        self.user = config.HOST_USER
        self.dir = sandbox.hosts_dir / name
        self.root = self.dir / "root"
        self.sysclass = self.dir / "sysclass"

    # --- state on disk ---
    @property
    def _pid_file(self) -> Path:
        return self.dir / "ns.pid"

    @property
    def pid(self) -> int | None:
        """The host's `unshare` process (outside the host's PID namespace), if running."""
        try:
            pid = int(self._pid_file.read_text())
        except (OSError, ValueError):
            return None
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "unshare" and _alive(pid):
                return pid
        except OSError:
            pass
        return None

    @property
    def init_pid(self) -> int | None:
        """PID (as the machine sees it) of the host's init, PID 1 inside the host."""
        pid = self.pid
        if pid is None:
            return None
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def is_running(self) -> bool:
        return self.pid is not None

    def save(self) -> None:
        record = {
            "name": self.name,
            "number": self.number,
            "card": self.card,
            "driven": self.driven,
            "data": self.data,
        }
        _write_atomic(self.dir / "host.json", json.dumps(record, indent=1) + "\n")

    @property
    def host_key_line(self) -> str:
        return " ".join((self.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2])

    # --- lifecycle ---
    def start(self, timeout: float = config.SSHD_START_TIMEOUT) -> None:
        """Start the host's namespaces and init; return once sshd accepts connections."""
        if self.is_running():
            return
        if not self.driven and (self.root / simcards.SIMULATED_DKMS_MARKER).exists():
            self.set_card(self.card)  # a cold boot after the SIMULATED amdgpu-dkms: the card is driven
        if not _port_free(self.address, self.port):
            raise SandboxError(f"{self.name}: {self.address}:{self.port} is already in use")
        cmd = [
            "setsid",
            "unshare",
            "--mount",
            "--uts",
            "--ipc",
            "--pid",
            "--fork",
            "--kill-child",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-ec",
            START_SCRIPT,
            "sh",
            str(self.root),
            self.name,
            str(self.sysclass),
            str(self.dir / "syspci"),
            str(self.dir / simcards.BOOT_DRIVEN),
            "1" if self.data.get(PIVOT_DATA[0]) == PIVOT_DATA[1] else "",
        ]
        with open(self.dir / "console.log", "ab") as console:  # the child keeps its own copy of the fd
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=console)
        _CHILDREN[proc.pid] = proc
        self._pid_file.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + timeout
        while not _port_open(self.address, self.port):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = (self.dir / "console.log").read_text(errors="replace")[-2000:]
                raise SandboxError(f"{self.name}: sshd did not come up on {self.address}:{self.port}:\n{log}")
            time.sleep(0.02)

    def stop(self, timeout: float = config.HOST_STOP_TIMEOUT) -> None:
        """End every process of the host (its namespace mounts go with them); the disk stays."""
        pid = self.pid
        if pid is not None:
            # --kill-child: the namespace's init gets SIGKILL, so the kernel ends the whole PID namespace
            os.kill(pid, signal.SIGKILL)
            child = _CHILDREN.pop(pid, None)
            if child is not None:
                child.wait()
        self._pid_file.unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        while (left := pids_rooted_in(self.root)) and time.monotonic() < deadline:
            time.sleep(0.02)
        for stray in left:  # something chrooted in by hand, outside the PID namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(stray, signal.SIGKILL)
        if left:
            time.sleep(0.2)
            if still := pids_rooted_in(self.root):
                raise SandboxError(f"{self.name}: processes {still} survive in {self.root}")

    def restart(self) -> None:
        """A simulated reboot: every process ends, the host starts again on the same disk."""
        self.stop()
        self.start()

    def make_idle(self) -> None:
        """Reachable (started, sshd answering) and idle: every process of the login user ends, so jobs an
        earlier user of the host left running read as failed ("process gone") and free their GPU locks."""
        if not self.is_running():
            self.start()
        else:
            self.start_sshd()  # a fault test may have left sshd stopped
        self.exec(["pkill", "-KILL", "-u", self.user], check=False)

    def _signal_init(self, sig: int) -> None:
        init = self.init_pid
        if init is None:
            raise SandboxError(f"{self.name} is not running")
        os.kill(init, sig)

    def stop_sshd(self, timeout: float = config.SSHD_START_TIMEOUT) -> None:
        """Make the host unreachable over SSH while its other processes (jobs) keep running."""
        self._signal_init(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while _port_open(self.address, self.port):
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: sshd still answers")
            time.sleep(0.02)

    def start_sshd(self, timeout: float = config.SSHD_START_TIMEOUT) -> None:
        self._signal_init(signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while not _port_open(self.address, self.port):
            if time.monotonic() > deadline:
                raise SandboxError(f"{self.name}: sshd did not come back")
            time.sleep(0.02)

    # --- inside the host ---
    def exec(
        self,
        cmd: str | list[str],
        user: str | None = None,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = 120,
    ) -> subprocess.CompletedProcess:
        """Run `cmd` (a shell string or an argv) inside the host's namespaces and root, as root or `user`.

        For tests' inspection: it does not go through SSH. Returns text stdout/stderr.
        """
        init = self.init_pid
        if init is None:
            raise SandboxError(f"{self.name} is not running")
        script = cmd if isinstance(cmd, str) else " ".join(_quote(a) for a in cmd)
        inner = ["/bin/sh", "-c", script] if user is None else ["runuser", "-l", user, "-c", script]
        argv = [
            "nsenter",
            "-t",
            str(init),
            "-m",
            "-u",
            "-i",
            "-p",
            "-r",
            "-w",
            "--",
            "/usr/bin/env",
            "-i",
            f"PATH={config.HOST_PATH}",
            "HOME=/root",
            "LANG=C.UTF-8",
            *inner,
        ]
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise SandboxError(f"{self.name}: {script!r} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def set_card(self, card: str | None, driven: bool = True) -> None:
        """Swap the simulated card (None: no AMD GPU); visible at once, running or not. driven=False: the
        card is on the PCI bus but no kernel driver drives it (no KFD, no DRM card, no /dev nodes) until the
        SIMULATED amdgpu-dkms is installed and the host reboots (its `reboot`, host_init.py); the trees for
        that reboot are mounted when the host starts, so restart() a running host after driven=False."""
        simcards.write_card_state(self.dir, card, driven)
        simcards.install_device_nodes(self.root, card if driven else None)
        self.card = card
        self.driven = driven
        self.save()
        self.sandbox.write_inventory()

    def set_data(self, **kv: Any) -> None:
        self.data.update(kv)
        self.save()
        self.sandbox.write_inventory()

    def drop_data(self, *keys: str) -> None:
        """Take keys out of the host's inventory data (as if never set: a later deploy sees the defaults)."""
        for key in keys:
            self.data.pop(key, None)
        self.save()
        self.sandbox.write_inventory()

    def inventory_entry(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ssh_hostname": self.address,
            "ssh_port": self.port,
            "ssh_user": self.user,
            "ssh_key": str(self.sandbox.key),
            "ssh_known_hosts_file": str(self.sandbox.known_hosts),
            "card": self.card,
            "data": {**self.sandbox.common_data, **self.data},
        }

    def connect(self, **kwargs: Any):  # -> fabric.Connection (imported lazily: fabric is slow to import)
        """A fabric Connection as the lab user: our key only, known_hosts only, unknown keys rejected."""
        import paramiko
        from fabric import Config, Connection

        conn = Connection(
            self.address,
            user=self.user,
            port=self.port,
            connect_kwargs={
                "key_filename": str(self.sandbox.key),
                "allow_agent": False,
                "look_for_keys": False,
            },
            # no ~/.ssh/config; no stdin forwarding (non-interactive, and pytest captures stdin)
            config=Config(overrides={"load_ssh_configs": False, "run": {"in_stream": False}}),
            **kwargs,
        )
        conn.client.load_host_keys(str(self.sandbox.known_hosts))
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return conn


def _quote(arg: str) -> str:
    return shlex.quote(arg)
