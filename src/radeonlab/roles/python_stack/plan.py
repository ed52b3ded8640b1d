"""What the python_stack role installs, decided from facts and data: pure functions, no pyinfra."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from radeonlab.roles.gpu.cards import version_tuple
from radeonlab.roles.gpu.table import AMD_DEVICE_TARGETS
from radeonlab.roles.python_stack.defaults import (
    AMD_WHEELS,
    PYTORCH_ROCM_PAIRING,
    AmdWheels,
    device_packages,
)


def normalize(name: str) -> str:
    """PEP 503 project name: "PyYAML" -> "pyyaml", "foo_bar" -> "foo-bar"."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public_version(version: str) -> str:
    """ "2.13.0+rocm7.2" -> "2.13.0": a ROCm (or CPU) build's local label is not part of the release."""
    return version.split("+", 1)[0]


def expand_home(path: str, home: str) -> str:
    """ "~/radeonlab/venv" -> "/home/lab/radeonlab/venv" (SFTP and pip do not expand "~" for us)."""
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


def training_user(configured: str | None, login_user: str) -> str:
    """The user who trains: python_stack_user when set, else the user pyinfra logs in as. Never root (jobs
    run as the training user: a training run as root could write anywhere on the host), never unknown.

    Raises ValueError (one line, with the fix)."""
    user = (configured or "").strip() or login_user.strip()
    if user == "root":
        why = (
            "python_stack_user is root"
            if configured
            else "the deploy runs as root and python_stack_user is empty"
        )
        raise ValueError(f"{why}: training as root is refused; set python_stack_user to a non-root user")
    if not user:
        raise ValueError(
            "the login user is unknown (id -un and $USER say nothing) and python_stack_user is empty: "
            "set python_stack_user to the (non-root) user who trains"
        )
    return user


def torch_index_url(data: Mapping[str, Any], rocm_version: str) -> str:
    """pytorch_index_url, else the source's: AMD's index for the Core SDK release, or download.pytorch.org's
    rocm<series> index (https://download.pytorch.org/whl/rocm7.2)."""
    if data.get("pytorch_index_url"):
        return str(data["pytorch_index_url"])
    if data.get("pytorch_source", "amd") == "amd":
        return amd_wheels(rocm_version).index_url
    return str(data["pytorch_index_url_template"]).format(rocm_series=pytorch_rocm_series(data, rocm_version))


# What a lock's `# indexes:` line records for pip's own index (python_stack_index_url left empty): one word.
PIP_DEFAULT_INDEX = "pip-default-index"


def index_url_args(url: str) -> list[str]:
    """pip's --index-url for python_stack_index_url; none when it is empty: pip's own index (PyPI, or what
    the host's pip configuration names), so the product names no index it was not given."""
    return ["--index-url", url] if url else []


def pytorch_rocm_series(data: Mapping[str, Any], rocm_version: str) -> str:
    """The rocm<series> index of download.pytorch.org to take torch from: pytorch_rocm_series, else the
    legacy ROCm being installed (7.2.4 -> 7.2), else the first series that torch release is built for
    (torch 2.13 -> 7.2): the wheels bring their own ROCm libraries, so they run beside a Core SDK too."""
    if data.get("pytorch_rocm_series"):
        return str(data["pytorch_rocm_series"])
    series = ".".join(str(rocm_version).split(".")[:2])
    if version_tuple(series) < version_tuple("7.12"):
        return series
    paired = PYTORCH_ROCM_PAIRING.get(".".join(str(data["pytorch_version"]).split(".")[:2]))
    return (paired if isinstance(paired, str) else paired[0]) if paired else series


def amd_wheels(rocm_version: str) -> AmdWheels:
    """AMD's wheel set for a Core SDK release; ValueError (one line) when AMD publishes none for it."""
    version = str(rocm_version).strip()  # "7.14.0" -> its own set; "7.14" -> the newest patch's
    found = AMD_WHEELS.get(version) or AMD_WHEELS.get(".".join(version.split(".")[:2]))
    if found is None:
        raise ValueError(
            f"AMD publishes no multi-arch torch wheels for ROCm {rocm_version} (known: "
            f"{', '.join(AMD_WHEELS)}); set pytorch_source: pytorch"
        )
    return found


@dataclass(frozen=True)
class TorchRequest:
    """What to pip-install for torch: requirement strings, the device packages the extras pull in (AMD's:
    amd-torch-device-<gfx> and the rocm-sdk-device-<gfx> it requires), and the
    local version label a matching installed build carries (None: any build of the public version)."""

    requirements: list[str]
    device_packages: list[str]
    local: str | None


def torch_request(data: Mapping[str, Any], rocm_version: str, gfx_targets: Sequence[str]) -> TorchRequest:
    """torch (+ pytorch_extra_packages) for this source and these GPU targets.

    AMD's wheels: `torch[device-gfxA,device-gfxB]==<torch>+<local>` (one extra per exact target, AMD's
    form), torchvision with the same extras, torchaudio without (AMD's own examples install it without);
    torchvision/torchaudio pinned to the series AMD pairs with that torch (AMD_WHEELS). download.pytorch.org:
    torch==<version> and the extras unpinned, as before. Raises ValueError (one line) for a device extra the
    index lacks or a release without AMD wheels.
    """
    version = str(data["pytorch_version"])
    extras = list(data["pytorch_extra_packages"])
    if data.get("pytorch_source", "amd") != "amd":
        return TorchRequest([f"torch=={version}", *extras], [], None)
    wheels = amd_wheels(rocm_version)
    targets = sorted({t for t in gfx_targets if t})
    if missing := [t for t in targets if t not in AMD_DEVICE_TARGETS]:
        raise ValueError(
            f"AMD's wheel index has no device extra for {', '.join(missing)} (it has "
            f"{len(AMD_DEVICE_TARGETS)} targets, see AMD_DEVICE_TARGETS); set pytorch_source: pytorch"
        )
    if version != wheels.torch:
        raise ValueError(
            f"AMD's ROCm {wheels.rocm} wheels are torch {wheels.torch}, not {version} (set pytorch_version)"
        )
    device = f"[{','.join(f'device-{t}' for t in targets)}]" if targets else ""
    paired = {"torchvision": wheels.torchvision, "torchaudio": wheels.torchaudio}
    requirements = [f"torch{device}=={version}+{wheels.local}"]
    for name in extras:
        if name in paired:
            series = ".".join(paired[name].split(".")[:2])
            requirements.append(f"{name}{device if name == 'torchvision' else ''}=={series}.*")
        else:
            requirements.append(name)
    # AMD's graph (TheRock RELEASES.md, python_packaging.md): torch[device-T] pulls torch's own kernels,
    # amd-torch-device-T, which pulls ROCm's, rocm-sdk-device-T (defaults.AMD_PACKAGE_GRAPH).
    return TorchRequest(requirements, [p for t in targets for p in device_packages(t)], wheels.local)


@dataclass(frozen=True)
class PythonChoice:
    executable: str  # what the venv is created with
    deadsnakes: bool  # install it from the deadsnakes PPA first


def choose_python(
    distro_name: str | None, python3_version: str | None, data: Mapping[str, Any]
) -> PythonChoice:
    """The distribution's python3 when new enough, else python_stack_python (from deadsnakes on Ubuntu).

    Raises ValueError (one line) where no source for a new enough Python is known.
    """
    minimum = str(data["python_stack_min_python"])
    if python3_version and version_tuple(python3_version)[:2] >= version_tuple(minimum)[:2]:
        return PythonChoice("python3", False)
    if distro_name == "Ubuntu":
        return PythonChoice(str(data["python_stack_python"]), True)
    raise ValueError(
        f"python3 is {python3_version or 'missing'}, LLaMA-Factory needs >= {minimum}, "
        f"and no source for a newer Python is known on {distro_name}"
    )


def extras_pins(data: Mapping[str, Any]) -> list[str]:
    """`name==version` for every name in python_stack_extras, at its python_stack_extras_versions pin.

    Raises ValueError (one line) for a name that has no pinned version."""
    versions = {
        normalize(k): (k, str(v)) for k, v in (data.get("python_stack_extras_versions") or {}).items()
    }
    pins = []
    for name in data.get("python_stack_extras") or []:
        found = versions.get(normalize(str(name)))
        if found is None:
            raise ValueError(
                f"python_stack_extras: {name!r} has no pinned version in python_stack_extras_versions "
                f"(pinned: {', '.join(sorted(k for k, _ in versions.values()))}); add "
                f'"{name}": "<version>" there, or remove it'
            )
        pins.append(f"{found[0]}=={found[1]}")
    return pins


INSTALLERS = ("uv", "pip")


def installer(data: Mapping[str, Any]) -> str:
    """python_stack_installer, checked: "uv" or "pip" (ValueError, one line, for anything else)."""
    name = str(data.get("python_stack_installer", "uv")).strip().lower()
    if name not in INSTALLERS:
        raise ValueError(f"python_stack_installer must be one of {', '.join(INSTALLERS)}, not {name!r}")
    return name


def uv_pin_line(data: Mapping[str, Any]) -> str:
    """uv's own hash-pinned requirement line (python_stack_uv_version, python_stack_uv_sha256)."""
    return f"uv=={data['python_stack_uv_version']} --hash=sha256:{data['python_stack_uv_sha256']}"


def install_command(
    installer_name: str, venv: str, runner: str, uv_cache: str, index_args: list[str]
) -> list[str]:
    """The locked install's command, `-r LOCK` excluded, run through the runner (pip_locked.py: one line
    per refused file). Both installers get --require-hashes --no-deps: exactly the locked files, or none.
    uv installs into the venv's interpreter (--python) with its cache at uv_cache (the training user's),
    tried from that cache alone first (the runner's --cache-first)."""
    python = f"{venv}/bin/python"
    if installer_name == "pip":
        command = [
            python,
            "-m",
            "pip",
            "install",
            "--require-hashes",
            "--no-deps",
            "--disable-pip-version-check",
        ]
    else:
        command = [f"{venv}/bin/uv", "pip", "install", "--require-hashes", "--no-deps", "--python", python]
        # --no-config: uv looks for uv.toml / pyproject.toml from the working folder up, which in a root
        # deploy is root's home, unreadable to the training user (uv: `failed to open file .../uv.toml`); and
        # a stray config there must not change what a hash-locked install does.
        command += ["--cache-dir", uv_cache, "--no-progress", "--no-config"]
        # from uv's cache alone first (pip_locked.py --cache-first): a re-install asks no index anything
        return [python, runner, "--cache-first", *command, *index_args]
    return [python, runner, *command, *index_args]
