"""What the wheel_cache role does, decided from data: pure functions, no pyinfra."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from radeonlab.roles import InventoryData
from radeonlab.roles.python_stack import plan as stack_plan

SIMPLE = "simple"  # PEP 503 pages, one folder per project
FILES = "files"  # the downloaded wheels
STAMP = ".stamp"  # what the last complete download was made from (lock_digest)
LOCK = "lock.txt"  # the lab's lines of the stack's hash lock (every host's targets and extras)
SERVER_SCRIPT = ".serve.py"  # roles/wheel_cache/serve.py, uploaded
TOOL_VENV = ".pip-venv"  # pip's own venv on the cache host
INDEX_SCRIPT = ".build_index.py"  # roles/wheel_cache/build_index.py, uploaded


def cache_host_name(data: Mapping[str, Any], groups: Mapping[str, Sequence[str]]) -> str | None:
    """The cache host's inventory name: wheel_cache_host, else the first host of wheel_cache_group."""
    if data.get("wheel_cache_host"):
        return str(data["wheel_cache_host"])
    members = groups.get(str(data.get("wheel_cache_group") or ""), ())
    return members[0] if members else None


def cache_url(data: Mapping[str, Any], cache_name: str, cache_host_data: Mapping[str, Any]) -> str:
    """wheel_cache_url, or http://<address>:<port>/simple/ with the cache host's address."""
    if data.get("wheel_cache_url"):
        return str(data["wheel_cache_url"])
    address = data.get("wheel_cache_address") or cache_host_data.get("ssh_hostname") or cache_name
    return f"http://{address}:{int(data['wheel_cache_port'])}/{SIMPLE}/"


def bind_address(data: Mapping[str, Any], cache_name: str, cache_host_data: InventoryData) -> str:
    """Where the server listens: wheel_cache_bind_address when set ("0.0.0.0" only when asked), else the
    lab address the inventory gives the cache host (wheel_cache_address, ssh_hostname, its name), as the
    machine running the deploy resolves it: the cache and its lock list are not offered on every interface.
    ValueError (one line) when that name does not resolve here."""
    if data.get("wheel_cache_bind_address"):
        return str(data["wheel_cache_bind_address"])
    name = str(data.get("wheel_cache_address") or cache_host_data.get("ssh_hostname") or cache_name)
    try:
        return str(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        pass
    try:
        return socket.gethostbyname(name)
    except OSError:
        raise ValueError(
            f"the wheel cache's address {name!r} does not resolve here: set wheel_cache_bind_address "
            "(the address its server listens on)"
        ) from None


def python_stack_sources(url: str) -> dict[str, Any]:
    """The python_stack settings that make a host install everything from the cache at `url`."""
    return {"pytorch_index_url": url, "python_stack_index_url": url, "pytorch_find_links": []}


@dataclass(frozen=True)
class Upstream:
    """Where the cache host itself fetches from: the python_stack settings as the inventory has them."""

    torch_index_url: str
    torch_find_links: tuple[str, ...]
    index_url: str
    rocm_version: str = ""
    targets: tuple[str, ...] = ()  # the lab's GPU targets: AMD's device extras for every one of them

    @classmethod
    def from_stack(cls, stack: Mapping[str, Any], rocm_version: str, targets: Sequence[str] = ()) -> Upstream:
        return cls(
            stack_plan.torch_index_url(stack, rocm_version),
            tuple(str(link) for link in stack["pytorch_find_links"]),
            str(stack["python_stack_index_url"]),
            rocm_version,
            tuple(sorted({t for t in targets if t})),
        )

    def torch(self, stack: Mapping[str, Any]) -> stack_plan.TorchRequest:
        return stack_plan.torch_request(stack, self.rocm_version, self.targets)


def python_version(
    data: Mapping[str, Any], choice: stack_plan.PythonChoice, python3_version: str | None
) -> str:
    """major.minor the wheels are downloaded for: wheel_cache_python_version, else what python_stack uses."""
    if data.get("wheel_cache_python_version"):
        return str(data["wheel_cache_python_version"])
    if choice.deadsnakes or not python3_version:
        return choice.executable.removeprefix("python")  # "python3.11" -> "3.11"
    return ".".join(python3_version.split(".")[:2])


def lab_extras(stack: Mapping[str, Any], extras_per_host: Sequence[Sequence[str]]) -> list[str]:
    """`name==version` of every python_stack_extras name any host of the lab asks for (the cache serves
    them all), at the cache host's python_stack_extras_versions. ValueError for a name not pinned."""
    names = sorted({stack_plan.normalize(str(n)) for extras in extras_per_host for n in extras or []})
    return stack_plan.extras_pins({**stack, "python_stack_extras": names})


def lock_digest(lock_text: str, upstream: Upstream, pyver: str) -> str:
    """What the cache holds is fully decided by the lab's lines of the lock and where they come from: a new
    digest means download (what is missing, or no longer matches)."""
    inputs = {
        "lock": hashlib.sha256(lock_text.encode()).hexdigest(),
        "upstream": [upstream.torch_index_url, list(upstream.torch_find_links), upstream.index_url],
        "python": pyver,
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def download_command(upstream: Upstream, cache_dir: str, pyver: str) -> str:
    """One `pip download --require-hashes --no-deps -r LOCK` of the lab's lines of the lock (every host's
    GPU targets and extras): each locked file is fetched once, checked against its hash by pip before it is
    kept; a file already in the folder is checked again and fetched anew only if it no longer matches.
    torch comes from the torch index, the rest from the Python index: the hashes decide what is accepted.
    No --only-binary: AMD publishes its `rocm` selector only as an sdist (the lock holds its hash);
    --no-deps is what lets --python-version stand without it."""
    pip = [
        f"{cache_dir}/{TOOL_VENV}/bin/pip", "download", "--disable-pip-version-check", "--no-cache-dir",
        "--python-version", pyver, "--dest", f"{cache_dir}/{FILES}",
        "--require-hashes", "--no-deps", *stack_plan.index_url_args(upstream.index_url),
    ]  # fmt: skip
    if upstream.torch_index_url != upstream.index_url:
        pip += ["--extra-index-url", upstream.torch_index_url]
    for link in upstream.torch_find_links:
        pip += ["--find-links", link]
    return shlex.join([*pip, "-r", f"{cache_dir}/{LOCK}"])


def probe_address(bind_address: str) -> str:
    """Where the cache host checks its own server: the bind address, or loopback for all interfaces."""
    return "127.0.0.1" if bind_address in ("", "0.0.0.0", "::") else bind_address
