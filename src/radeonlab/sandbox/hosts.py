"""Sandbox workstations: real Debian hosts reachable over real SSH on loopback, one machine, no GPU.

Each host is an overlayfs over the cached base rootfs (radeonlab/sandbox/rootfs.py; `cp -a` when overlayfs is
unavailable), run in its own mount/UTS/IPC/PID namespaces (`setsid unshare ... --kill-child`) and chroot
(pivot_root for a host with `radeonlab_runtime: container`: rootless Podman needs a user namespace), with
its own hostname, ed25519 host key, a SIMULATED init as PID 1 (host_init.py) that runs sshd on
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
    h.set_card(card, driven=False)    # the card on PCI only (SIMULATED: no driver yet); restart() after it;
                                      # the host's `reboot` (SIMULATED) then drives it once amdgpu-dkms is in
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
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from radeonlab.contract.jobdir import alive, start_time
from radeonlab.sandbox import config, rootfs, simcards
from radeonlab.sandbox.host import (  # one host's life; re-exported: callers know them as hosts.*
    INIT_SOURCE,
    REBOOT_STANDIN,
    SSHD_CONFIG,
    SandboxError,
    SandboxHost,
    _flock,
    _passwd_ids,
    _port_free,
    _port_open,
    _write_atomic,
    mounts_under,
    pids_rooted_in,
)

__all__ = ["Sandbox", "SandboxError", "SandboxHost", "mounts_under", "pids_rooted_in"]


def lease_holder(text: str) -> tuple[Path, int | None, int | None]:
    """A lease file's host folder, and the pid and start time of the process that leased it (none in a
    lease an older radeonlab wrote)."""
    lines = text.splitlines()
    words = lines[1].split() if len(lines) > 1 else []
    holder = Path(lines[0].strip() if lines else "")
    if len(words) == 2 and all(w.isdigit() for w in words):
        return holder, int(words[0]), int(words[1])
    return holder, None, None


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
            self.hosts[r["name"]] = SandboxHost(
                self, r["name"], r["number"], r["card"], r["data"], r.get("driven", True)
            )

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
            _keygen(str(self.key), "radeonlab-sandbox")
        self.known_hosts.touch()

    # --- address leases: machine-wide, so two sandboxes never share an address:port ---
    def _lease(self, host_dir: Path) -> int:
        with _flock(config.LEASE_DIR / ".lock"):
            for n in range(1, config.MAX_HOSTS + 1):
                lease = config.LEASE_DIR / str(n)
                if lease.exists():
                    holder, pid, start = lease_holder(lease.read_text())
                    # Held while its host exists, and while the process that leased it lives: a host being
                    # made (its host.json and sshd come later) must not lose its number to another session
                    # (two hosts on one address: SSH met the other's host key).
                    if (holder / "host.json").exists() or holder == host_dir or alive(pid, start):
                        continue
                    lease.unlink()  # its host is gone (a crashed session): the number is free again
                if _port_free(f"{config.HOST_ADDRESS_PREFIX}{n}", config.HOST_PORT_BASE + n):
                    me = os.getpid()
                    lease.write_text(f"{host_dir}\n{me} {start_time(me) or 0}\n")
                    return n
        raise SandboxError(f"no free sandbox address among {config.MAX_HOSTS}")

    def _release(self, host: SandboxHost) -> None:
        lease = config.LEASE_DIR / str(host.number)
        with contextlib.suppress(OSError):
            if lease_holder(lease.read_text())[0] == host.dir:
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
        _keygen(str(r / "etc/ssh/ssh_host_ed25519_key"), f"root@{host.name}")
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
        simcards.write_card_state(host.dir, host.card)
        simcards.install_device_nodes(r, host.card)
        reboot = r / config.HOST_REBOOT_PATH.lstrip("/")
        reboot.write_text(REBOOT_STANDIN)
        reboot.chmod(0o755)

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
        # rm, not shutil.rmtree: a provisioned host's disk holds ~40,000 files (the venv), which rm deletes
        # about three times faster; --one-file-system: never follow into a mount (checked above, kept safe)
        subprocess.run(["rm", "-rf", "--one-file-system", str(host.dir)], check=False)
        self._release(host)
        self.timings.setdefault("host_destroy", time.monotonic() - t0)

    def destroy_all(self) -> None:
        """Destroy every host, then check nothing is left under the state dir (raises if so)."""
        hosts = list(self.hosts.values())
        self.hosts.clear()

        def remove(host: SandboxHost) -> str | None:
            try:
                self._remove(host)
            except Exception as exc:  # noqa: BLE001 - keep going: destroy the others, report all
                return f"{host.name}: {exc}"
            return None

        # In parallel: each host's stop and delete is mostly waiting on the kernel and the disk.
        with ThreadPoolExecutor(max_workers=4) as pool:
            errors = [e for e in pool.map(remove, hosts) if e]
        self.write_known_hosts()
        self.write_inventory()
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


def _keygen(path: str, comment: str) -> None:
    """A new ed25519 key pair at `path` (no passphrase)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], check=True)
