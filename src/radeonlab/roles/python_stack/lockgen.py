"""Generate a stack's hash lock (roles/python_stack/locks/<key>.txt): run by a maintainer, reviewed.

    python -m radeonlab.roles.python_stack.lockgen --source amd --rocm 10.0 --python 3.11

Resolver: pip's own (`pip download --only-binary=:all: --python-version X.Y --platform ...`), the resolver
that installs the lock, run for the workstations' interpreter and platform rather than this machine's;
every downloaded file is hashed here (sha256). Steps: torch with every device extra of the source (AMD's
wheels: one `rocm-sdk-device-<gfx>` per target) and pytorch_extra_packages from the torch index, the
requirements from the Python index, llamafactory without its dependencies, then each name of
python_stack_extras_versions resolved beside the stack (`-c` the stack's versions: no pin moves). The
lines are then sorted by who needs them from the wheels' own metadata (Requires-Dist, markers evaluated
for the target Python): every host, one GPU target (`# target: gfx1100`), or some extras
(`# extras: tensorboard`). An extra that cannot be resolved beside the stack is left out, and said so.

The sandbox builds its locks for its local index with `lock_from_wheels` (radeonlab/sandbox/wheels.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Mapping, Sequence
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

from radeonlab.jobs.host.receive import sha256_of
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import plan
from radeonlab.roles.python_stack.defaults import AMD_DEVICE_TARGETS, DEFAULTS

DEVICE = re.compile(r"^rocm-sdk-device-(gfx[0-9a-z]+)$")
# The oldest glibc of the supported distributions (Ubuntu 22.04: 2.35): wheels that run on all of them.
GLIBC = (2, 35)
PIP_ENV_KEEP = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")


def sha256(path: Path) -> str:
    """sha256 of a file, streamed (the content store's own function, jobs/host/receive.py)."""
    return sha256_of(str(path))


def wheel_requires(path: Path) -> list[str]:
    """Requires-Dist of a wheel (its METADATA)."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        meta = HeaderParser().parsestr(z.read(name).decode("utf-8", errors="replace"))
    return meta.get_all("Requires-Dist") or []


def name_version(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return plan.normalize(name), version


def _environment(python: str) -> dict[str, str]:
    env = dict(default_environment())
    env.update(
        python_version=python,
        python_full_version=f"{python}.0",
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        platform_machine="x86_64",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    return env


class _Graph:
    """The downloaded wheels and their dependencies, for a target Python."""

    def __init__(self, files: Sequence[Path], python: str) -> None:
        self.env = _environment(python)
        self.files: dict[str, list[tuple[Version, Path]]] = {}
        for f in files:
            name, version = name_version(f)
            self.files.setdefault(name, []).append((Version(version), f))

    def pick(self, req: Requirement, chosen: dict[str, Path]) -> Path:
        """The file for a requirement: the one already chosen for its name (one version per name, as pip
        installs), else the newest that satisfies it."""
        name = plan.normalize(req.name)
        have = self.files.get(name, [])
        found = [(v, f) for v, f in have if req.specifier.contains(v, True)]
        if not found:
            raise ValueError(f"no downloaded wheel satisfies {req}")
        if name in chosen and any(f == chosen[name] for _, f in found):
            return chosen[name]
        return chosen.setdefault(name, max(found)[1])

    def closure(self, roots: Sequence[str], no_deps: Sequence[str] = ()) -> set[Path]:
        seen: set[Path] = set()
        walked: set[tuple[Path, frozenset[str]]] = set()
        chosen: dict[str, Path] = {}
        todo = deque(Requirement(r) for r in roots)  # breadth first: the roots choose their versions first
        while todo:
            req = todo.popleft()
            f = self.pick(req, chosen)
            seen.add(f)
            if plan.normalize(req.name) in no_deps or (f, frozenset(req.extras)) in walked:
                continue
            walked.add((f, frozenset(req.extras)))
            for dep in map(Requirement, wheel_requires(f)):
                if dep.marker is None or any(
                    dep.marker.evaluate({**self.env, "extra": e}) for e in [*req.extras, ""]
                ):
                    todo.append(dep)
        return seen


def lock_from_wheels(
    files: Sequence[Path],
    roots: Sequence[str],
    extras: Mapping[str, str],
    python: str,
    key: str,
    header: Sequence[str],
    devices: bool = True,
) -> stack_lock.Lock:
    """A Lock over these wheel files: `roots` (the stack's requirements; llamafactory without its
    dependencies) for every host, each `rocm-sdk-device-<gfx>` wheel for its target (`devices`: AMD's
    wheels), each of `extras` (name -> requirement) beside them. Files nobody needs are left out."""
    graph = _Graph(files, python)
    base = graph.closure(roots, no_deps=("llamafactory",))
    owners: dict[Path, tuple[str, set[str]]] = {f: ("", set()) for f in base}
    for f in files:
        if devices and (m := DEVICE.match(name_version(f)[0])) and f not in base:
            for g in graph.closure([f"{name_version(f)[0]}=={name_version(f)[1]}"]) - base:
                owners[g] = (m[1], set())
    for extra, requirement in sorted(extras.items()):
        for g in graph.closure([*roots, requirement], no_deps=("llamafactory",)) - base:
            owners.setdefault(g, ("", set()))[1].add(plan.normalize(extra))
    pins = [
        stack_lock.Pin(*name_version(f), sha256(f), target=target, extras=tuple(sorted(names)))
        for f, (target, names) in owners.items()
    ]
    pins.sort(key=lambda p: (p.target, p.extras, p.name, p.version))
    return stack_lock.Lock(key, (f"# radeonlab lock: {key}", *header), tuple(pins))


def stack_roots(data: Mapping[str, Any], rocm_version: str) -> list[str]:
    """The stack's top-level requirements (no device extras: those come per target)."""
    request = plan.torch_request(data, rocm_version, ())
    llamafactory = f"llamafactory=={data['llamafactory_version']}"
    return [*request.requirements, *data["python_stack_requirements"], llamafactory]


def _platforms() -> list[str]:
    return [f"manylinux_{GLIBC[0]}_{m}_x86_64" for m in range(GLIBC[1], 4, -1)] + [
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
    ]


def _download(dest: Path, python: str, args: Sequence[str]) -> bool:
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(dest)]
    cmd += ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for p in _platforms():
        cmd += ["--platform", p]
    # This machine's pip settings do not apply (a PIP_FIND_LINKS or a config's extra index would add files
    # from elsewhere): no config file, no PIP_* variable but the transport's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in PIP_ENV_KEEP}
    env["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run([*cmd, *args], env=env).returncode == 0


def generate(data: Mapping[str, Any], rocm_version: str, python: str, out_dir: Path) -> Path:
    """Resolve and download the stack, hash it, write `<out_dir>/<key>.txt`. Returns the path."""
    key = stack_lock.lock_key(data, rocm_version, python)
    torch_index = plan.torch_index_url(data, rocm_version)
    index = str(data["python_stack_index_url"])
    source = str(data.get("pytorch_source", "amd"))
    targets = AMD_DEVICE_TARGETS if source == "amd" else ()
    request = plan.torch_request(data, rocm_version, targets)
    roots = stack_roots(data, rocm_version)
    left_out = []
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp)
        links = ["--find-links", str(dest)]
        if not _download(dest, python, ["--index-url", torch_index, *request.requirements]):
            raise SystemExit(f"lockgen: torch could not be resolved from {torch_index}")
        torch_pin = f"torch=={next(name_version(f)[1] for f in dest.glob('torch-*.whl'))}"
        reqs = [torch_pin, *data["python_stack_requirements"]]
        if not _download(dest, python, ["--index-url", index, *links, *reqs]):
            raise SystemExit(f"lockgen: the requirements could not be resolved from {index}")
        if not _download(dest, python, ["--no-deps", "--index-url", index, roots[-1]]):
            raise SystemExit(f"lockgen: {roots[-1]} not found on {index}")
        stack = Path(tmp, "stack.txt")
        stack.write_text("".join(f"{n}=={v}\n" for n, v in map(name_version, dest.glob("*.whl"))))
        extras = {}
        for name, version in sorted(dict(data["python_stack_extras_versions"]).items()):
            spec = f"{name}=={version}"
            if _download(dest, python, ["--index-url", index, *links, "-c", str(stack), spec]):
                extras[name] = spec
            else:
                left_out.append(spec)
        today = datetime.date.today().isoformat()
        header = [
            f"# generated: {today} from {torch_index} (torch) and {index} (everything else), for CPython "
            f"{python} manylinux glibc >= {GLIBC[0]}.{GLIBC[1]} x86_64",
            f"# command: {stack_lock.lockgen_command(data, rocm_version, python)}",
            "# do not edit: a changed pin in roles/python_stack/defaults.py needs a new lock (the deploy "
            "refuses the old one)",
        ]
        if left_out:
            header.append(f"# not resolvable beside the stack, left out: {', '.join(left_out)}")
        files = sorted(dest.glob("*.whl"))
        lock = lock_from_wheels(files, roots, extras, python, key, header, devices=source == "amd")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{key}.txt"
    path.write_text(lock.text())
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("amd", "pytorch"), default=DEFAULTS["pytorch_source"])
    parser.add_argument("--rocm", required=True, help="the ROCm release the hosts install (rocm_version)")
    parser.add_argument("--python", required=True, help="the hosts' Python, major.minor")
    parser.add_argument("--out", type=Path, default=stack_lock.LOCKS_DIR)
    parser.add_argument("--index-url", help="python_stack_index_url (default: PyPI)")
    parser.add_argument("--torch-index-url", help="pytorch_index_url (default: the source's index)")
    args = parser.parse_args(argv)
    data = {**DEFAULTS, "pytorch_source": args.source}
    if args.index_url:
        data["python_stack_index_url"] = args.index_url
    if args.torch_index_url:
        data["pytorch_index_url"] = args.torch_index_url
    print(f"wrote {generate(data, args.rocm, args.python, args.out)}")


if __name__ == "__main__":
    main()
