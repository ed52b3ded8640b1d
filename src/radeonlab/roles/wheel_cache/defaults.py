"""The wheel cache's settings (role-prefixed data keys): the one place they are set.

A lab wheel cache: one host downloads the pinned training stack (torch + torchaudio from the torch index,
the requirements and LLaMA-Factory from the Python index) once and serves it as a PEP 503 simple index
over HTTP; every host, the cache host included, then installs from it. Multi-GB wheels cross the lab's
uplink once instead of once per host.
"""

from __future__ import annotations

DEFAULTS: dict[str, object] = {
    # Which host is the cache: the inventory host named here, else the first host of this inventory group.
    # Neither set (or the group absent): no cache, every host installs from the indexes directly.
    "wheel_cache_host": "",
    "wheel_cache_group": "wheel_cache",
    # What hosts install from. Empty: composed as http://<wheel_cache_address>:<wheel_cache_port>/simple/.
    "wheel_cache_url": "",
    # The address other hosts reach the cache host at. Empty: its ssh_hostname, else its inventory name.
    "wheel_cache_address": "",
    "wheel_cache_port": 8765,
    # The address the server listens on. Empty: the cache host's lab address as the inventory gives it
    # (wheel_cache_address, else ssh_hostname, resolved where the deploy runs); "0.0.0.0" only when asked.
    "wheel_cache_bind_address": "",
    # Where the wheels (files/) and the index pages (simple/) live on the cache host.
    "wheel_cache_dir": "/var/cache/radeonlab/wheels",
    # The Python the wheels are for (pip download --python-version). Empty: the one the python_stack role
    # will train with on the cache host. Every host of the lab must train with this Python minor.
    "wheel_cache_python_version": "",
    # Packages that give python3 its venv module: pip runs from a small venv of its own under the cache dir.
    "wheel_cache_apt_packages": ["python3-venv"],
    # The server (serve.py: read-only, refuses a wheel that no longer matches the lock) as this user, a
    # systemd unit where systemd runs, else a detached process with a pidfile (containers, the sandbox).
    "wheel_cache_user": "nobody",
    "wheel_cache_service_name": "radeonlab-wheel-cache",
    "wheel_cache_pidfile": "/run/radeonlab-wheel-cache.pid",
    "wheel_cache_log": "/var/log/radeonlab-wheel-cache.log",
    # Seconds the role waits for a newly started server to answer before failing.
    "wheel_cache_start_timeout": 15,
}
