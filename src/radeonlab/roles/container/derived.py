"""The derived image jobs run in: AMD's pulled image plus the rest of the training stack from the lab's lock.

Pure functions (tests/unit/test_roles_container_derived.py); operations.py runs them at execution time.
The image brings torch and ROCm; the lab's hash lock (roles/python_stack/lock.py) holds the whole stack.
The derived image installs the lock's lines every host installs (no GPU target's device lines, the host's
extras) minus what the image brings (container_image_provides: torch, AMD's device and ROCm wheels), with
`pip install --require-hashes --no-deps`, in one `podman build` (or `docker build`: engines.py) on the host:

    FROM 127.0.0.1:5000/rocm/pytorch@sha256:<base digest>
    COPY requirements.txt /opt/radeonlab/requirements.txt
    RUN PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --require-hashes --no-deps ... -r ...

Named `<container_derived_name>:<key>`, key = the first 12 hex of sha256(base digest + the lines installed,
name==version and sha256):
the same base and lines make the same name, and a host that has it builds nothing. Also tagged
`<container_derived_name>:current`, the name verify runs its check in; the labels say what it was built
from (base image and digest, lock, key, the image's Python), and the host record reads them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import shlex
from collections.abc import Sequence

from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN, Engine, repository
from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack.plan import normalize

CURRENT = "current"  # the tag verify runs its check in (the name's newest build on this host)
REQUIREMENTS = "/opt/radeonlab/requirements.txt"  # in the derived image: what was installed
LABEL = "radeonlab."  # label prefix: image, base.image, base.digest, lock, key, python


def install_pins(
    lock: stack_lock.Lock, extras: Sequence[str], provides: Sequence[str]
) -> list[stack_lock.Pin]:
    """The lock's lines the derived image installs: every host's and the extras' (no GPU target's device
    lines), minus names matching a `provides` pattern (fnmatch, on PEP 503 names)."""
    patterns = [normalize(p) for p in provides]
    return [p for p in lock.for_host((), extras) if not any(fnmatch.fnmatchcase(p.name, x) for x in patterns)]


def image_key(base_digest: str, lines: Sequence[stack_lock.Pin]) -> str:
    """The derived image's tag: the same base digest and locked lines (name, version, sha256), the same key;
    where the files are fetched from (the lock's URLs, or an index) is not part of it."""
    locked = "".join(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in lines)
    return hashlib.sha256(f"{base_digest}\n{locked}".encode()).hexdigest()[:12]


def base_reference(image: str, digest: str) -> str:
    """`registry/repo:tag` + digest -> `registry/repo@digest`: the base exactly as pulled."""
    return f"{repository(image)}@{digest}"


def containerfile(base: str, index_args: Sequence[str]) -> str:
    """The Containerfile: the base by digest, the requirements copied in and installed with hashes.
    PIP_BREAK_SYSTEM_PACKAGES: the image's python3 is the one jobs run (a distribution's python refuses
    pip otherwise, PEP 668); an older pip ignores the variable."""
    pip = ["python3", "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-cache-dir"]
    pip += ["--disable-pip-version-check", "--quiet", *index_args, "-r", REQUIREMENTS]
    return (
        "# Written by radeonlab (roles/container): AMD's image + the lab's hash-locked training stack.\n"
        f"FROM {base}\n"
        f"COPY requirements.txt {REQUIREMENTS}\n"
        f"RUN PIP_BREAK_SYSTEM_PACKAGES=1 {shlex.join(pip)}\n"
    )


def build_command(
    context: str,
    name: str,
    key: str,
    labels: dict[str, str],
    netns: str,
    options: Sequence[str],
    engine: Engine = ENGINE_TABLE[PODMAN],
) -> str:
    """`<engine> build` of the derived image in `context` (Containerfile + requirements.txt), tagged
    `name:key` and `name:current`: the engine's own build options (Podman's --layers=false: one new layer,
    each a full copy with the vfs driver; --pull=never: the base is the one pulled by digest), the engine's
    netns (container_netns) for pip's downloads; then the name's older builds are removed (one in use by a
    container stays)."""
    words = [engine.name, "build", *engine.build_options, *(["--network", netns] if netns else [])]
    words += [f"--label={LABEL}{k}={v}" for k, v in sorted(labels.items())]
    words += [*options, "-t", f"{name}:{key}", "-t", f"{name}:{CURRENT}", "-f", f"{context}/Containerfile"]
    build = shlex.join([*words, context])
    keep = shlex.quote(f"{name}:{key}")
    prune = (
        f"{engine.name} images --format '{{{{.Repository}}}}:{{{{.Tag}}}}' {shlex.quote(name)} | "
        f"grep -vxF -e {keep} -e {shlex.quote(f'{name}:{CURRENT}')} | "
        f"xargs -r {engine.name} rmi >/dev/null 2>&1"
    )
    return f"{build} && {{ {prune} || true; }}"
