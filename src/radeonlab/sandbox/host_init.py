"""SIMULATED init: PID 1 of one sandbox host (copied into the host, run by the host's own python3).

A real workstation runs systemd; a sandbox host runs this: it starts sshd, reaps every orphan (jobs
detached with `setsid nohup` are reparented to PID 1), and lets the test bed switch sshd off and on
without ending the host, so a host can look unreachable while its jobs keep running:
  SIGUSR1 -> stop sshd (existing sessions stay; new connections are refused)
  SIGUSR2 -> start sshd again
  SIGTERM -> stop sshd and exit (the kernel then kills everything left in the host's PID namespace)
Standard library only: it runs under the host's python3, not the test machine's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

SSHD = ["/usr/sbin/sshd", "-D", "-e"]
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
    if _sshd is not None and _sshd.poll() is None:
        _sshd.terminate()
        _sshd.wait()
        _log("sshd stopped")
    _sshd = None


def _on_usr1(*_: object) -> None:
    global _wanted
    _wanted = False
    _stop()


def _on_usr2(*_: object) -> None:
    global _wanted
    _wanted = True
    _start()


def _on_term(*_: object) -> None:
    _stop()
    sys.exit(0)


def main() -> None:
    signal.signal(signal.SIGUSR1, _on_usr1)
    signal.signal(signal.SIGUSR2, _on_usr2)
    signal.signal(signal.SIGTERM, _on_term)
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
