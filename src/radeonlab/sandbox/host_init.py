"""SIMULATED init: PID 1 of one sandbox host (copied into the host, run by the host's own python3).

A real workstation runs systemd; a sandbox host runs this: it starts sshd, reaps every orphan (jobs
detached with `setsid nohup` are reparented to PID 1), and lets the test bed switch sshd off and on
without ending the host, so a host can look unreachable while its jobs keep running:
  SIGUSR1 -> stop sshd (existing sessions stay; new connections are refused)
  SIGUSR2 -> start sshd again
  SIGTERM -> stop sshd and exit (the kernel then kills everything left in the host's PID namespace)
  SIGINT  -> SIMULATED reboot (the host's `reboot` stand-in sends it, as ctrl-alt-del signals a real init):
             every other process of the host ends, the boot clock restarts (a new time namespace, so
             /proc/uptime counts from this boot for the processes started after it), and when the SIMULATED
             amdgpu-dkms is installed and the card waits for a driver, its driven sysfs trees and /dev nodes
             appear (the test bed left them read-only under BOOT_DRIVEN); then sshd starts again.
Standard library only: it runs under the host's python3, not the test machine's.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

SSHD = ["/usr/sbin/sshd", "-D", "-e"]
BOOT_DRIVEN = "/run/radeonlab-simulated/boot-driven"  # config.BOOT_DRIVEN_PATH (stdlib only here)
DKMS_MARKER = "/usr/share/radeonlab-simulated/amdgpu-dkms"  # installed by the stand-in amdgpu-dkms
CLONE_NEWTIME = 0x80
_sshd: subprocess.Popen | None = None
_wanted = True


def _log(msg: str) -> None:
    print(f"[sandbox-init {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _start() -> None:
    global _sshd
    if _sshd is None or _sshd.poll() is not None:
        _sshd = subprocess.Popen(SSHD)
        _log(f"sshd started (pid {_sshd.pid})")


def _stop() -> None:
    global _sshd
    proc = _sshd
    if proc is not None and proc.poll() is None:
        proc.terminate()
        proc.wait()
        _log("sshd stopped")
    if _sshd is proc:
        _sshd = None


def _on_usr1(*_: object) -> None:
    global _wanted
    _wanted = False
    _stop()
    # A SIGUSR2 that came while sshd was still exiting ran its handler inside this one, during the wait, and
    # found sshd "running" (Popen's poll answers None while its wait holds the lock): start it now. Seen
    # under load: stop_sshd returns once the port is closed, a start_sshd right after found no sshd in 15 s.
    if _wanted:
        _start()


def _on_usr2(*_: object) -> None:
    global _wanted
    _wanted = True
    _start()


def _on_term(*_: object) -> None:
    _stop()
    sys.exit(0)


def _mount_over(source: str, target: str) -> None:
    subprocess.run(["mount", "--bind", source, target], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)


def _driver_loads() -> None:
    """SIMULATED: the kernel now drives the card (its amdgpu-dkms module was built for it)."""
    if not (os.path.exists(DKMS_MARKER) and os.path.isdir(f"{BOOT_DRIVEN}/class")):
        return
    _mount_over(f"{BOOT_DRIVEN}/class", "/sys/class")
    if os.path.isdir("/sys/bus/pci/devices"):
        _mount_over(f"{BOOT_DRIVEN}/pci", "/sys/bus/pci/devices")
    groups = {}
    with open("/etc/group") as fh:
        for line in fh:
            fields = line.split(":")
            groups[fields[0]] = int(fields[2])
    with open(f"{BOOT_DRIVEN}/devices.json") as fh:
        nodes = json.load(fh)
    for node in nodes:
        path = node["path"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.unlink(path)
        os.mknod(path, 0o020000 | node["mode"], os.makedev(1, 3))  # char 1:3, as simcards.py's nodes
        os.chown(path, 0, groups[node["group"]])
        os.chmod(path, node["mode"])
    _log("SIMULATED amdgpu driver loaded: KFD and DRM nodes present")


def _new_boot_clock() -> None:
    """Processes started from now on see /proc/uptime count from this reboot (pyinfra's server.reboot waits
    for the uptime to drop)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWTIME) != 0:
        _log(f"no new time namespace (errno {ctypes.get_errno()}): uptime keeps counting")
        return
    with open("/proc/uptime") as fh:
        up = int(float(fh.read().split()[0]))
    with open("/proc/self/timens_offsets", "w") as fh:
        fh.write(f"boottime {-up} 0\n")


def _on_int(*_: object) -> None:
    _log("SIMULATED reboot")
    _stop()
    os.kill(-1, signal.SIGKILL)  # from PID 1: every other process of this PID namespace
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    try:
        _driver_loads()
    except (OSError, subprocess.CalledProcessError, KeyError, ValueError) as e:
        _log(f"SIMULATED driver not loaded: {e}")
    try:
        _new_boot_clock()
    except OSError as e:
        _log(f"boot clock unchanged: {e}")
    if _wanted:
        _start()


def main() -> None:
    signal.signal(signal.SIGUSR1, _on_usr1)
    signal.signal(signal.SIGUSR2, _on_usr2)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_int)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # so pause() returns when a child ends
    _start()
    while True:
        try:
            pid, _status = os.waitpid(-1, 0)  # reap anyone, ours or reparented orphans
        except ChildProcessError:
            signal.pause()
            continue
        except InterruptedError:
            continue
        if _sshd is not None and pid == _sshd.pid:
            # Popen does not know it was reaped here; mark it gone so _start() can run it again.
            _sshd.returncode = _sshd.returncode if _sshd.returncode is not None else -1
            _log("sshd exited")


if __name__ == "__main__":
    main()
