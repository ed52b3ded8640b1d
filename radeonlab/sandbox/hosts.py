"""Sandbox workstations: real Debian hosts reachable over real SSH on loopback, one machine, no GPU.

Each host is an overlayfs over the cached base rootfs (radeonlab/sandbox/rootfs.py; `cp -a` when overlayfs is
unavailable), run in its own mount/UTS/IPC/PID namespaces (`setsid unshare ... --kill-child`) and chroot,
with its own hostname, ed25519 host key, a SIMULATED init as PID 1 (host_init.py) that runs sshd on
HOST_ADDRESS_PREFIX+N : HOST_PORT_BASE+N, a SIMULATED Radeon card (simcards.py: a sysfs tree bind-mounted
over /sys/class and stand-in /dev/kfd, /dev/dri nodes), and the user HOST_USER (key login, passwordless
sudo). The network namespace is the machine's, so hosts reach the mirrors and the loopback servers.

API (used by tests/conftest.py's `sandbox` / `make_host` fixtures and the aptrepo/wheels helpers):

    sbx = Sandbox(state_dir)          # default config.STATE_DIR; reloads hosts already in state_dir
    sbx.key, sbx.known_hosts          # client private key; known_hosts holding every host's real key
    sbx.inventory_file                # <state>/inventory.json, rewritten on every change (see below)
    sbx.www_dir                       # config.www_dir(state): what the loopback web server serves
    sbx.set_common_data(**kv)         # host data given to every host (apt repo URL, wheel index URL...)
    h = sbx.create_host("ws1", card="rx7900xtx", data={...})   # created and started, sshd answering
    sbx.create_hosts(2, cards=["rx7900xtx", "rx6700xt"])       # names ws1, ws2, ...
    sbx.hosts["ws1"] / sbx.host("ws1")
    sbx.destroy_host("ws1"); sbx.destroy_all()                  # raises if anything is left behind
    sbx.leftovers()                   # mounts under the state dir + processes rooted there ([] = clean)

    h.name, h.address, h.port, h.user, h.card, h.data, h.root (the host's / seen from the machine)
    h.exec("cmd", user=None|"lab", check=True) -> CompletedProcess   # inside the host's namespaces
    h.set_card("rx9070xt" | None)     # swap the simulated card live (sysfs rewritten, /dev nodes redone)
    h.set_data(**kv)                  # extra inventory host data for this host
    h.stop_sshd(); h.start_sshd()     # host unreachable over SSH; its processes (jobs) keep running
    h.stop(); h.start()               # whole host off/on (all its processes end); the disk is kept
    h.restart()                       # simulated reboot: stop + start, same disk
    h.connect() -> fabric.Connection  # strict host-key checking with sbx.known_hosts, key auth only
    h.inventory_entry() -> dict

inventory.json: {"hosts": [{"name", "ssh_hostname", "ssh_port", "ssh_user", "ssh_key",
"ssh_known_hosts_file", "card", "data": {common data | host data}}]}; inventories/sandbox.py reads it.

Addresses are leased machine-wide (config.LEASE_DIR) so concurrent sandboxes never collide.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from radeonlab.sandbox import config, rootfs, simcards

INIT_SOURCE = Path(__file__).with_name("host_init.py")

# The namespace's setup, run by `sh` inside the new namespaces before it becomes the host's init.
# The simulated card tree goes over /sys/class after the machine's sysfs is mounted read-only.
START_SCRIPT = f"""
r=$1 name=$2 sysclass=$3
mount -t proc -o nosuid,nodev,noexec proc "$r/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$r/sys"
mount --bind "$sysclass" "$r/sys/class"
mount -o remount,bind,ro "$r/sys/class"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$r/run"
mkdir -p "$r/run/sshd" "$r/run/lock"; chmod 1777 "$r/run/lock"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$r/dev/pts"
mount --bind "$r/dev/pts/ptmx" "$r/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
hostname "$name"
exec chroot "$r" /usr/bin/env -i PATH={config.HOST_PATH} LANG=C.UTF-8 \\
  /usr/bin/python3 -u {config.HOST_INIT_PATH}
"""

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
    """Processes whose root directory is `path` or below it (anything still running in a host)."""
    prefix = str(path).rstrip("/")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            root = os.readlink(proc / "root")
        except OSError:
            continue
        if (root == prefix or root.startswith(prefix + "/")) and _alive(int(proc.name)):
            found.append(int(proc.name))
    return found


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

    def __init__(self, sandbox: Sandbox, name: str, number: int, card: str | None, data: dict | None = None):
        self.sandbox = sandbox
        self.name = name
        self.number = number
        self.card = card
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
        record = {"name": self.name, "number": self.number, "card": self.card, "data": self.data}
        _write_atomic(self.dir / "host.json", json.dumps(record, indent=1) + "\n")

    @property
    def host_key_line(self) -> str:
        return " ".join((self.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2])

    # --- lifecycle ---
    def start(self, timeout: float = config.SSHD_START_TIMEOUT) -> None:
        """Start the host's namespaces and init; return once sshd accepts connections."""
        if self.is_running():
            return
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

    def set_card(self, card: str | None) -> None:
        """Swap the simulated card (None: no AMD GPU); visible at once, running or not."""
        simcards.write_sysclass(self.sysclass, card)
        simcards.install_device_nodes(self.root, card)
        self.card = card
        self.save()
        self.sandbox.write_inventory()

    def set_data(self, **kv: Any) -> None:
        self.data.update(kv)
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
    import shlex

    return shlex.quote(arg)


class Sandbox:
    """A set of sandbox hosts sharing one state dir, client key and known_hosts file."""

    def __init__(self, state_dir: Path | str = config.STATE_DIR, cache_dir: Path | str = config.CACHE_DIR):
        self.state_dir = Path(state_dir).resolve()
        self.cache_dir = Path(cache_dir)
        self.hosts_dir = self.state_dir / "hosts"
        self.keys_dir = self.state_dir / "keys"
        self.key = self.keys_dir / "id_ed25519"
        self.known_hosts = self.keys_dir / "known_hosts"
        self.inventory_file = self.state_dir / "inventory.json"
        self.www_dir = config.www_dir(self.state_dir)
        self.common_data: dict[str, Any] = {}
        self.hosts: dict[str, SandboxHost] = {}
        self.timings: dict[str, float] = {}
        self._load()

    def _load(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.common_data = json.loads((self.state_dir / "sandbox.json").read_text())["common_data"]
        for record in sorted(self.hosts_dir.glob("*/host.json")):
            r = json.loads(record.read_text())
            self.hosts[r["name"]] = SandboxHost(self, r["name"], r["number"], r["card"], r["data"])

    def host(self, name: str) -> SandboxHost:
        return self.hosts[name]

    def set_common_data(self, **kv: Any) -> None:
        """Host data for every host (e.g. the apt repo URL, the wheel index URL, a cpu-only flag)."""
        self.common_data.update(kv)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(
            self.state_dir / "sandbox.json", json.dumps({"common_data": self.common_data}, indent=1)
        )
        self.write_inventory()

    def ensure_base(self) -> Path:
        t0 = time.monotonic()
        base = rootfs.ensure_base(self.cache_dir)
        self.timings.setdefault("base", time.monotonic() - t0)
        return base

    def _ensure_keys(self) -> None:
        self.keys_dir.mkdir(parents=True, exist_ok=True)
        self.keys_dir.chmod(0o700)
        if not self.key.exists():
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "radeonlab-sandbox",
                    "-f",
                    str(self.key),
                ],
                check=True,
            )
        self.known_hosts.touch()

    # --- address leases: machine-wide, so two sandboxes never share an address:port ---
    def _lease(self, host_dir: Path) -> int:
        with _flock(config.LEASE_DIR / ".lock"):
            for n in range(1, config.MAX_HOSTS + 1):
                lease = config.LEASE_DIR / str(n)
                if lease.exists():
                    holder = Path(lease.read_text().strip())
                    if (holder / "host.json").exists() or holder == host_dir:
                        continue
                    lease.unlink()  # its host is gone (a crashed session): the number is free again
                if _port_free(f"{config.HOST_ADDRESS_PREFIX}{n}", config.HOST_PORT_BASE + n):
                    lease.write_text(f"{host_dir}\n")
                    return n
        raise SandboxError(f"no free sandbox address among {config.MAX_HOSTS}")

    def _release(self, host: SandboxHost) -> None:
        lease = config.LEASE_DIR / str(host.number)
        with contextlib.suppress(OSError):
            if Path(lease.read_text().strip()) == host.dir:
                lease.unlink()

    # --- hosts ---
    def create_host(self, name: str, card: str | None = None, data: dict | None = None) -> SandboxHost:
        """Create host `name` with simulated `card` (None: no AMD GPU) and start it."""
        if os.geteuid() != 0:
            raise SandboxError("sandbox hosts need root (mount, unshare, chroot)")
        if name in self.hosts:
            raise SandboxError(f"host {name} exists already")
        if card is not None and card not in simcards.CARDS:
            raise SandboxError(f"unknown simulated card {card!r}; known: {', '.join(simcards.CARDS)}")
        base = self.ensure_base()
        self._ensure_keys()
        t0 = time.monotonic()
        host_dir = self.hosts_dir / name
        host = SandboxHost(self, name, self._lease(host_dir), card, data)
        try:
            self._make_disk(host, base)
            self._configure(host)
            host.save()
            self.hosts[name] = host
            self.write_known_hosts()
            self.write_inventory()
            host.start()
        except BaseException:
            with contextlib.suppress(Exception):
                self.destroy_host(name) if name in self.hosts else self._remove(host)
            raise
        self.timings.setdefault("host_create", time.monotonic() - t0)
        return host

    def create_hosts(self, count: int, cards: Iterable[str | None] = ()) -> list[SandboxHost]:
        """Hosts ws1..wsN (numbered after the existing ones); cards[i] for the i-th, None past the list."""
        cards = list(cards)
        first = len(self.hosts) + 1
        return [
            self.create_host(f"ws{first + i}", cards[i] if i < len(cards) else None) for i in range(count)
        ]

    def _make_disk(self, host: SandboxHost, base: Path) -> None:
        for sub in ("upper", "work", "root"):
            (host.dir / sub).mkdir(parents=True, exist_ok=True)
        opts = f"lowerdir={base},upperdir={host.dir / 'upper'},workdir={host.dir / 'work'}"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", opts, str(host.root)], capture_output=True
        )
        if done.returncode == 0:
            mode = "overlay"
        else:  # e.g. a filesystem that cannot hold an overlay's upper layer: a full copy (~256 MB)
            subprocess.run(["cp", "-a", f"{base}/.", str(host.root)], check=True)
            mode = "copy"
        (host.dir / "mode").write_text(mode + "\n")

    def _configure(self, host: SandboxHost) -> None:
        r = host.root
        (r / "etc/hostname").write_text(host.name + "\n")
        (r / "etc/hosts").write_text(
            f"127.0.0.1\tlocalhost\n{host.address}\t{host.name}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        )
        shutil.copy("/etc/resolv.conf", r / "etc/resolv.conf")
        for old in (r / "etc/ssh").glob("ssh_host_*"):
            old.unlink()
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"root@{host.name}",
                "-f",
                str(r / "etc/ssh/ssh_host_ed25519_key"),
            ],
            check=True,
        )
        pub = self.key.with_suffix(".pub").read_text()
        uid, gid = _passwd_ids(r, host.user)
        for home, owner in ((r / "home" / host.user, (uid, gid)), (r / "root", (0, 0))):
            ssh_dir = home / ".ssh"
            ssh_dir.mkdir(mode=0o700, exist_ok=True)
            (ssh_dir / "authorized_keys").write_text(pub)
            (ssh_dir / "authorized_keys").chmod(0o600)
            for p in (ssh_dir, ssh_dir / "authorized_keys"):
                os.chown(p, *owner)
        (r / "etc/ssh/sshd_config.d/10-radeonlab-sandbox.conf").write_text(
            SSHD_CONFIG.format(address=host.address, port=host.port)
        )
        init = r / config.HOST_INIT_PATH.lstrip("/")
        init.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(INIT_SOURCE, init)
        simcards.write_sysclass(host.sysclass, host.card)
        simcards.install_device_nodes(r, host.card)

    def destroy_host(self, name: str) -> None:
        """Stop the host, unmount and delete its disk; raises if a mount or process is left."""
        host = self.hosts.pop(name)
        self._remove(host)
        self.write_known_hosts()
        self.write_inventory()

    def _remove(self, host: SandboxHost) -> None:
        t0 = time.monotonic()
        host.stop()
        if os.path.ismount(host.root):
            subprocess.run(["umount", str(host.root)], check=True)
        if left := mounts_under(host.dir):
            raise SandboxError(f"{host.name}: mounts remain under {host.dir}: {left}; not deleting it")
        shutil.rmtree(host.dir, ignore_errors=True)
        self._release(host)
        self.timings.setdefault("host_destroy", time.monotonic() - t0)

    def destroy_all(self) -> None:
        """Destroy every host, then check nothing is left under the state dir (raises if so)."""
        errors = []
        for name in list(self.hosts):
            try:
                self.destroy_host(name)
            except Exception as exc:  # keep going: destroy the others, report all
                errors.append(f"{name}: {exc}")
        if left := self.leftovers():
            errors.append(f"left behind: {left}")
        if errors:
            raise SandboxError("; ".join(errors))

    def leftovers(self) -> list[str]:
        """Mounts under the state dir and processes rooted in it (an empty list means clean)."""
        found = [f"mount {m}" for m in mounts_under(self.state_dir)]
        found += [f"pid {p}" for p in pids_rooted_in(self.hosts_dir)]
        return found

    # --- files other tools read ---
    def write_known_hosts(self) -> None:
        lines = [f"[{h.address}]:{h.port} {h.host_key_line}\n" for h in self.hosts.values()]
        self.keys_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.known_hosts, "".join(lines), 0o600)

    def write_inventory(self) -> Path:
        entries = [h.inventory_entry() for h in sorted(self.hosts.values(), key=lambda h: h.number)]
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.inventory_file, json.dumps({"hosts": entries}, indent=1) + "\n")
        return self.inventory_file

    def status(self) -> list[dict[str, Any]]:
        return [
            {
                **h.inventory_entry(),
                "running": h.is_running(),
                "sshd": _port_open(h.address, h.port),
                "mode": (h.dir / "mode").read_text().strip() if (h.dir / "mode").exists() else None,
            }
            for h in self.hosts.values()
        ]
