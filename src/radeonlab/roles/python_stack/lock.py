"""Hash locks of the training stack: reading one, choosing the one a host installs, refusing a stale one.

A lock is a pip requirements file, one per stack: torch source x ROCm release x Python minor x torch x
LLaMA-Factory (lock_key). The deploy makes it itself (resolve.py): with no lock for its stack, the first
host resolves the stack once with pip, the way AMD documents the install, and pip's installation report
(every file, its URL and sha256) becomes the lab's lock, beside the inventory (lab_lock_dir). Every other
host and every re-run installs from it with `pip install --require-hashes --no-deps` and never resolves.
A lock committed to the repository (roles/python_stack/locks/) is honoured first. Every distribution is on
one line, pinned with `==` and its sha256; lines that only some hosts need carry a marker comment, and a
lock made by the deploy records where each file was found:

    # radeonlab lock: amd-rocm10.0-py3.11-torch2.13.0-lf0.9.5
    # indexes: https://stable.repo.amd.com/rocm/whl-next/ <the Python index: PyPI, or a lab mirror>
    torch==2.13.0+rocm10.0.0 --hash=sha256:<64 hex>  # url: https://.../torch-2.13.0+rocm10.0.0-....whl
    amd-torch-device-gfx1100==2.13.0+rocm10.0.0 --hash=sha256:<64 hex>  # target: gfx1100 url: https://...
    tensorboard==2.21.0 --hash=sha256:<64 hex>  # extras: tensorboard url: https://...

A host installs the unmarked lines, the `target:` lines of its GPU targets and the `extras:` lines of its
python_stack_extras. Installing from the indexes the lock names, it installs the recorded files by URL
(`name @ URL --hash=...`: no index page is read, which is how a locked install tells itself apart from a
resolution in an index's request log); through other indexes (the lab wheel cache) by name and version.
Pure functions, no pyinfra.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.roles.python_stack.plan import (
    amd_wheels,
    extras_pins,
    normalize,
    public_version,
    pytorch_rocm_series,
)

LOCKS_DIR = Path(__file__).parent / "locks"
INDEXES = "# indexes: "  # the header line naming the index URLs a lock was resolved from
_LINE = re.compile(
    r"(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})(?:\s+#(?P<note>.*))?"
)
_MARK = re.compile(r"(target|extras|url):\s*(\S+)")


@dataclass(frozen=True)
class Pin:
    name: str  # PEP 503 normalized
    version: str
    sha256: str
    target: str = ""  # a GPU target: only hosts training on it install this line
    extras: tuple[str, ...] = ()  # python_stack_extras names that need it (none: every host)
    url: str = ""  # where the resolution found the file (a lock made by the deploy: pip's report)

    def line(self) -> str:
        """The pip requirements line (the marker comment kept: pip ignores it)."""
        text = f"{self.name}=={self.version} --hash=sha256:{self.sha256}"
        marks = [f"target: {self.target}"] if self.target else []
        marks += [f"extras: {','.join(self.extras)}"] if self.extras and not self.target else []
        marks += [f"url: {self.url}"] if self.url else []
        return f"{text}  # {' '.join(marks)}" if marks else text

    def install_line(self, by_url: bool) -> str:
        """The line pip installs: by name (found through the index, or the lab wheel cache), or `by_url`
        the recorded file itself (`name @ URL`): pip then reads no index page at all."""
        if by_url and self.url:
            return f"{self.name} @ {self.url} --hash=sha256:{self.sha256}"
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Lock:
    key: str
    header: tuple[str, ...]  # the comment lines: what it was generated from, when, by which command
    pins: tuple[Pin, ...]

    def for_host(self, targets: Sequence[str], extras: Sequence[str]) -> list[Pin]:
        """The lines one host installs: the common ones, its GPU targets', its extras'."""
        want = {normalize(e) for e in extras}
        return [
            p
            for p in self.pins
            if (p.target in targets if p.target else (not p.extras or want & set(p.extras)))
        ]

    def text(self, pins: Sequence[Pin] | None = None) -> str:
        return "\n".join([*self.header, *(p.line() for p in (self.pins if pins is None else pins))]) + "\n"

    def install_text(self, pins: Sequence[Pin], by_url: bool) -> str:
        """A host's requirements file: the lock's name, then `pins` as pip installs them (Pin.install_line).
        Not the rest of the header: it names the last host that resolved into the lock, and a host's file
        must not change when another host adds its target's lines."""
        return "\n".join([f"# radeonlab lock: {self.key}", *(p.install_line(by_url) for p in pins)]) + "\n"

    @property
    def indexes(self) -> tuple[str, ...]:
        """The index URLs the lock was resolved from (its `# indexes:` line; none for an older lock)."""
        for line in self.header:
            if line.startswith(INDEXES):
                return tuple(line[len(INDEXES) :].split())
        return ()

    def targets(self) -> set[str]:
        return {p.target for p in self.pins if p.target}


def parse_lock(text: str, key: str = "") -> Lock:
    """A lock's text -> Lock. ValueError (one line) for a line that is not `name==version --hash=sha256:`."""
    header, pins = [], []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            header.append(line)
            continue
        m = _LINE.fullmatch(line)
        if not m:
            raise ValueError(f"lock {key or '?'} line {number}: not `name==version --hash=sha256:..`: {line}")
        marks = dict(_MARK.findall(m["note"] or ""))
        pins.append(
            Pin(
                normalize(m["name"]),
                m["version"],
                m["sha"],
                target=marks.get("target", ""),
                extras=tuple(normalize(e) for e in marks["extras"].split(",")) if "extras" in marks else (),
                url=marks.get("url", ""),
            )
        )
    return Lock(key, tuple(header), tuple(pins))


def lock_key(data: Mapping[str, Any], rocm_version: str, python: str) -> str:
    """The lock's name for a stack: `amd-rocm10.0-py3.11-torch2.13.0-lf0.9.5`; with download.pytorch.org's
    wheels the ROCm part is the rocm<series> index torch comes from."""
    source = str(data.get("pytorch_source", "amd"))
    rocm = amd_wheels(rocm_version).rocm if source == "amd" else pytorch_rocm_series(data, rocm_version)
    minor = ".".join(python.split(".")[:2])
    return f"{source}-rocm{rocm}-py{minor}-torch{data['pytorch_version']}-lf{data['llamafactory_version']}"


def lab_lock_dir(data: Mapping[str, Any], cwd: str) -> Path:
    """Where the deploy keeps the lab's locks: python_stack_lock_dir, else `locks/` in the directory pyinfra
    runs in (`cwd`: pyinfra keeps no inventory path; run it beside the inventory, as `pyinfra
    inventories/home.py deploy/setup.py` from the repository's root does)."""
    return Path(str(data.get("python_stack_lock_dir") or Path(cwd, "locks")))


def lock_path(data: Mapping[str, Any], key: str, cwd: str) -> Path:
    """The lock a host installs from: the repository's (roles/python_stack/locks/, honoured first), else
    the lab's (lab_lock_dir), which may not exist yet."""
    committed = LOCKS_DIR / f"{key}.txt"
    return committed if committed.exists() else lab_lock_dir(data, cwd) / f"{key}.txt"


def wanted_pins(data: Mapping[str, Any], extras: Sequence[str]) -> list[tuple[str, str]]:
    """(name, version) the inventory pins for a host: torch (public version), the requirements,
    llamafactory and the host's extras at python_stack_extras_versions."""
    specs = [f"torch=={data['pytorch_version']}", *data["python_stack_requirements"]]
    specs.append(f"llamafactory=={data['llamafactory_version']}")
    specs += extras_pins({**data, "python_stack_extras": extras})
    out = []
    for spec in specs:
        name, _, version = str(spec).partition("==")
        out.append((normalize(name.strip()), version.strip()))
    return out


def stale_pins(lock: Lock, data: Mapping[str, Any], extras: Sequence[str]) -> list[str]:
    """`name==version` pins of the inventory the lock does not hold (a version changed without a new lock,
    or an extra the lock was not generated with). Empty: the lock is current for this host."""
    locked: dict[str, set[str]] = {}
    for p in lock.pins:
        locked.setdefault(p.name, set()).update({p.version, public_version(p.version)})
    return [f"{n}=={v}" for n, v in wanted_pins(data, extras) if v not in locked.get(n, set())]


def load_lock(
    data: Mapping[str, Any], rocm_version: str, python: str, extras: Sequence[str], cwd: str
) -> Lock:
    """The lock a host installs; ValueError (one line) when there is none for its stack yet (the first
    deploy of a host makes it), or when a pin of the inventory changed and the lock was not remade."""
    key = lock_key(data, rocm_version, python)
    path = lock_path(data, key, cwd)
    if not path.exists():
        raise ValueError(
            f"no hash lock for the stack {key} yet ({path} missing): deploy one host of the stack first "
            "(its python_stack role resolves the stack and writes the lock)"
        )
    lock = parse_lock(path.read_text(), key)
    stale = stale_pins(lock, data, extras)
    if stale:
        raise ValueError(
            f"{', '.join(stale)} pinned but not in the hash lock {path} (a version changed without a new "
            "lock): deploy again with python_stack_lock_refresh: true, review and commit the new lock"
        )
    return lock


def covers(lock: Lock, data: Mapping[str, Any], targets: Sequence[str], extras: Sequence[str]) -> bool:
    """Whether a host installs from `lock` as it is: every pin of the inventory held, and (AMD's wheels)
    a `# target:` line for each of its GPU targets."""
    if stale_pins(lock, data, extras):
        return False
    return data.get("pytorch_source", "amd") != "amd" or set(targets) <= lock.targets()


def install_reasons(pins: Sequence[Pin], installed: Mapping[str, str | None]) -> list[str]:
    """Why the locked install must run: a locked distribution missing or at another version."""
    reasons = []
    for p in pins:
        have = installed.get(p.name)
        if have is None:
            reasons.append(f"{p.name} missing")
        elif have != p.version:
            reasons.append(f"{p.name} {have} != {p.version}")
    return reasons
