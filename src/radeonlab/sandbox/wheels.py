"""A local PEP 503 wheel index holding the whole training stack, so sandbox hosts install it without PyPI.
It also holds the python_stack_extras a CPU host can run (SANDBOX_EXTRAS: tensorboard), at the role's pins.

Served from `www/pypi/` by the sandbox's web server; the product is pointed at it only through its own
settings (`pytorch_index_url`, `python_stack_index_url`, see `WheelIndexInfo.settings`).

Three parts are SIMULATED and say so in the served README and index pages:
- AMD's aggregate index, generated from amdworld/*.yaml by amdwheels.py (never from the product's tables):
  torch <torch>+rocm<V> per release (the CPU wheel repacked), the `rocm` selector sdist, stand-in rocm-sdk-*
  and amd-torch-device-* wheels, so pip resolves `torch[device-gfx1100]==...` through AMD's graph.
- torch is this machine's CPU wheel (torch-<version>+cpu-..., from pip's find-links folders) standing in
  for the ROCm build a real workstation gets from PyTorch's ROCm index (whl/rocm<series>).
- torchaudio is PyPI's wheel (a CUDA build whose native libraries fail beside CPU torch) repacked without
  `torchaudio/lib/*.so` and with a marker file; LLaMA-Factory only imports it for text training. The version
  is kept, so pip resolves exactly what it would resolve against the real index.

Reproducible: everything fetched from PyPI is pinned with hashes in `wheels.lock` (beside this module),
resolved once for the sandbox hosts' interpreter by `python -m radeonlab.sandbox.wheels --relock` from
roles/python_stack/defaults.py. Pip runs isolated from this machine's pip configuration (constraints, extra
local indexes, find-links). Downloads are cached in `CACHE_DIR/wheels`; building the index from the cache
is offline, fast and idempotent.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.sandbox import config
from radeonlab.sandbox.amdwheels import amd_index
from radeonlab.sandbox.wheelfiles import (
    cache_dir,
    local_torch_wheel,
    record_hash,
    sha256_file,
    standin_torch_version,
)

# --- data -------------------------------------------------------------------------------------------------
# The sandbox hosts' interpreter: Debian 12 (bookworm) python3 3.11.2, x86_64, glibc 2.36.
TARGET_PYTHON_VERSION = "3.11"
TARGET_IMPLEMENTATION = "cp"
TARGET_ABI = "cp311"
TARGET_ARCH = "x86_64"
TARGET_GLIBC = (2, 36)
# torchaudio is not pinned by the role (it takes the one matching torch from the torch index).
TORCHAUDIO_REQUIREMENT = "torchaudio"
# python_stack_extras served to sandbox hosts (at the role's pins, with their dependencies): those a CPU host
# can run. tensorboard: `report_to: tensorboard` end to end (tests/e2e/test_after_train_e2e.py).
SANDBOX_EXTRAS = ("tensorboard",)
# What the SIMULATED repack removes: the CUDA-linked native libraries.
TORCHAUDIO_DROPPED = re.compile(r"^torchaudio/lib/[^/]+\.so(\.[0-9]+)*$")
REPACK_MARKER = "torchaudio/RADEONLAB_SANDBOX_REPACK.txt"
# Transport settings pip may keep from the environment; everything else PIP_* is dropped (isolation).
PIP_ENV_KEEP = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")

LOCK_FILE = Path(__file__).with_name("wheels.lock")
SIMULATED_NOTE = (
    "SIMULATED radeonlab sandbox index: torch is a CPU build standing in for the ROCm build; torchaudio is "
    f"PyPI's CUDA build repacked without its native libraries (marker: {REPACK_MARKER}). Everything else "
    "is unmodified from PyPI."
)


# --- pip, isolated from this machine's configuration -------------------------------------------------------
def isolated_pip_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment in which pip reads no config file (PIP_CONFIG_FILE=/dev/null skips global, user and site
    files, so /etc/xdg/pip's constraints and extra indexes are ignored) and no PIP_* variable except
    transport settings (the machine's PIP_FIND_LINKS folder of local wheels is dropped too)."""
    env = {k: v for k, v in (base if base is not None else os.environ).items() if not k.startswith("PIP_")}
    env.update({k: os.environ[k] for k in PIP_ENV_KEEP if k in os.environ})
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def target_platforms() -> list[str]:
    """Every manylinux tag a glibc-2.36 x86_64 host accepts. pip 23.2 does not expand `--platform
    manylinux_2_36` downwards itself, so list them (newest first, then the legacy aliases)."""
    major, minor = TARGET_GLIBC
    tags = [f"manylinux_{major}_{m}_{TARGET_ARCH}" for m in range(minor, 4, -1)]
    return [*tags, *(f"manylinux{legacy}_{TARGET_ARCH}" for legacy in ("2014", "2010", "1"))]


def _pip_download(dest: Path, args: list[str]) -> None:
    target = [
        "--only-binary=:all:",
        "--python-version",
        TARGET_PYTHON_VERSION,
        "--implementation",
        TARGET_IMPLEMENTATION,
        "--abi",
        TARGET_ABI,
    ]
    for plat in target_platforms():
        target += ["--platform", plat]
    cmd = [sys.executable, "-m", "pip", "download", "--no-cache-dir", "--dest", str(dest)]
    cmd += [*target, *args]  # pip's default index, PyPI: no configuration file is read (isolated_pip_env)
    subprocess.run(cmd, check=True, env=isolated_pip_env())


# --- names, files, hashes ----------------------------------------------------------------------------------
def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(normalized project name, version) from a wheel file name."""
    name, version = filename.split("-")[:2]
    return normalize(name), version


# --- the lock ----------------------------------------------------------------------------------------------
def lock_inputs() -> dict[str, object]:
    """Everything the lock is resolved from; its digest tells whether the lock is stale."""
    return {
        "pytorch_version": standin_torch_version(),  # the stand-in's, not the product's default torch
        "torchaudio": TORCHAUDIO_REQUIREMENT,
        "llamafactory_version": DEFAULTS["llamafactory_version"],
        "python_stack_requirements": list(DEFAULTS["python_stack_requirements"]),
        "extras": extras_pins(),
        "uv": DEFAULTS["python_stack_uv_version"],  # the hosts' installer (python_stack_installer: uv)
        "target": [TARGET_PYTHON_VERSION, TARGET_ABI, TARGET_ARCH, list(TARGET_GLIBC)],
    }


def extras_pins() -> list[str]:
    """SANDBOX_EXTRAS at the role's pins (roles/python_stack/defaults.py python_stack_extras_versions)."""
    return [f"{n}=={DEFAULTS['python_stack_extras_versions'][n]}" for n in SANDBOX_EXTRAS]


def inputs_digest() -> str:
    return hashlib.sha256(json.dumps(lock_inputs(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Pin:
    name: str  # normalized
    version: str
    sha256: str

    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def read_lock(path: Path = LOCK_FILE) -> tuple[str, list[Pin]]:
    """(inputs digest, pins) of the lock file."""
    digest, pins = "", []
    for raw in path.read_text().splitlines():
        if raw.startswith("# inputs:"):
            digest = raw.split(":", 1)[1].strip()
        elif raw and not raw.startswith("#"):
            m = re.fullmatch(r"(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})", raw.strip())
            if not m:
                raise ValueError(f"{path}: bad lock line {raw!r}")
            pins.append(Pin(m[1], m[2], m[3]))
    return digest, pins


def check_lock(path: Path = LOCK_FILE) -> list[Pin]:
    """The pins, or an error if the lock does not match roles/python_stack/defaults.py any more."""
    if not path.exists():
        raise FileNotFoundError(f"{path} missing: run `python -m radeonlab.sandbox.wheels --relock`")
    digest, pins = read_lock(path)
    if digest != inputs_digest():
        raise RuntimeError(
            f"{path} is stale (python_stack defaults changed): "
            "run `python -m radeonlab.sandbox.wheels --relock`"
        )
    return pins


def relock(path: Path = LOCK_FILE, fresh: bool = False) -> int:
    """Resolve the stack against PyPI for the hosts' interpreter, write the lock, keep the files in the cache.
    Keeps the current lock's versions as constraints unless `fresh`. Returns the bytes downloaded."""
    torch = local_torch_wheel()
    reqs = [f"torch=={standin_torch_version()}", TORCHAUDIO_REQUIREMENT]
    reqs += list(DEFAULTS["python_stack_requirements"])
    reqs += extras_pins()  # resolved with the stack, as the role installs them (the stack's pins hold)
    with tempfile.TemporaryDirectory() as tmp:
        links, dest = Path(tmp, "links"), Path(tmp, "dest")
        links.mkdir()
        # Only the local CPU torch is offered beside PyPI: its local version label (+cpu) sorts above
        # PyPI's CUDA 2.x.y, so pip takes it and resolves torch's own dependencies from PyPI.
        (links / torch.name).symlink_to(torch)
        keep = [] if fresh else _keep_constraints(path, Path(tmp, "keep.txt"), reqs)
        _pip_download(dest, ["--find-links", str(links), *keep, *reqs])
        _pip_download(dest, ["--no-deps", f"llamafactory=={DEFAULTS['llamafactory_version']}"])
        _pip_download(dest, ["--no-deps", f"uv=={DEFAULTS['python_stack_uv_version']}"])  # PyPI's, as is
        pins, downloaded = [], 0
        for f in sorted(dest.iterdir()):
            if f.name == torch.name:
                continue
            name, version = wheel_name_version(f.name)
            pins.append(Pin(name, version, sha256_file(f)))
            downloaded += _store(f)
    header = [
        "# radeonlab sandbox wheel lock: every wheel the sandbox index takes from PyPI, for CPython "
        f"{TARGET_PYTHON_VERSION} manylinux glibc {TARGET_GLIBC[0]}.{TARGET_GLIBC[1]} {TARGET_ARCH}.",
        "# Generated by `python -m radeonlab.sandbox.wheels --relock` from roles/python_stack/defaults.py; "
        "do not edit. torch is not here: it is the machine's local CPU wheel.",
        f"# inputs: {inputs_digest()}",
    ]
    path.write_text("\n".join(header + [p.line() for p in sorted(pins, key=lambda p: p.name)]) + "\n")
    return downloaded


def _keep_constraints(lock: Path, out: Path, reqs: list[str]) -> list[str]:
    """pip -c keeping the current lock's versions of what `reqs` does not pin (a relock for a new requirement
    adds wheels without moving the others, which every sandbox's cache already holds)."""
    if not lock.exists():
        return []
    named = {normalize(r.split("==")[0]) for r in reqs}
    _, pins = read_lock(lock)
    out.write_text("".join(f"{p.name}=={p.version}\n" for p in pins if p.name not in named))
    return ["-c", str(out)]


def _store(f: Path) -> int:
    """Move a downloaded wheel into the cache; its size if it was new."""
    dest = cache_dir() / "pypi" / f.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        return 0
    size = f.stat().st_size
    shutil.move(str(f), dest)
    return size


def _cached(pin: Pin) -> Path | None:
    for f in (cache_dir() / "pypi").glob("*.whl"):
        if wheel_name_version(f.name) == (pin.name, pin.version):
            return f
    return None


def fetch_locked(pins: list[Pin]) -> tuple[dict[str, Path], int]:
    """Every pinned wheel as a cached file, downloading (hash-checked) only what is missing.
    Returns ({name: file}, bytes downloaded)."""
    missing = [p for p in pins if _cached(p) is None]
    downloaded = 0
    if missing:
        with tempfile.TemporaryDirectory() as tmp:
            reqs = Path(tmp, "missing.txt")
            reqs.write_text("\n".join(p.line() for p in missing) + "\n")
            dest = Path(tmp, "dest")
            _pip_download(dest, ["--no-deps", "--require-hashes", "-r", str(reqs)])
            for f in dest.iterdir():
                downloaded += _store(f)
    files = {}
    for p in pins:
        cached = _cached(p)
        if cached is None:
            raise RuntimeError(f"{p.name}=={p.version} is not in the cache after download")
        files[p.name] = cached
    return files, downloaded


# --- the SIMULATED torchaudio repack -----------------------------------------------------------------------
def repack_torchaudio(src: Path, dest: Path) -> Path:
    """Copy of the torchaudio wheel without its CUDA-linked `lib/*.so`, with a marker file, and with RECORD
    rewritten to match so pip installs it cleanly. Deterministic: entries keep their order and timestamps."""
    marker = (
        f"SIMULATED: radeonlab sandbox repack of {src.name} (sha256 {sha256_file(src)}).\n"
        "The CUDA-linked native libraries torchaudio/lib/*.so were removed so that `import torchaudio` works "
        "beside a CPU torch (LLaMA-Factory imports it even for text training). Not for real workstations: "
        "they take torchaudio from the same ROCm index as torch.\n"
    ).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}-{threading.get_ident()}.partial")  # one per builder
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        kept = [i for i in zin.infolist() if not TORCHAUDIO_DROPPED.match(i.filename)]
        for info in kept:
            if info.filename != record_name:
                zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_DEFLATED)
        mark = zipfile.ZipInfo(REPACK_MARKER, date_time=kept[0].date_time)
        mark.external_attr = 0o644 << 16
        zout.writestr(mark, marker, compress_type=zipfile.ZIP_DEFLATED)
        record = [
            line
            for line in zin.read(record_name).decode().splitlines()
            if line and not TORCHAUDIO_DROPPED.match(line.split(",", 1)[0])
        ]
        record.insert(len(record) - 1, f"{REPACK_MARKER},{record_hash(marker)},{len(marker)}")
        info = zin.getinfo(record_name)
        zout.writestr(info, "\n".join(record) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(dest)
    return dest


def repacked_torchaudio(src: Path, src_sha256: str) -> Path:
    """The cached repack of this torchaudio wheel (made once): what the index serves and the SIMULATED image
    carries."""
    dest = cache_dir() / "repacked" / src_sha256[:16] / src.name
    return dest if dest.exists() else repack_torchaudio(src, dest)


# --- the index ---------------------------------------------------------------------------------------------
@dataclass
class WheelIndexInfo:
    root: Path  # www/pypi
    files: dict[str, Path] = field(default_factory=dict)  # normalized project name -> served wheel
    amd_torches: dict[str, Path] = field(default_factory=dict)  # ROCm version -> SIMULATED AMD torch
    locks_dir: Path | None = None  # where the deploy writes the lab's locks (none made here)
    downloaded_bytes: int = 0  # fetched from outside the lab (PyPI) by this build
    served_bytes: int = 0
    seconds: float = 0.0

    def amd_torch(self, rocm_version: str) -> Path:  # the SIMULATED AMD torch of "10.0" or "10.0.0"
        return next(p for v, p in self.amd_torches.items() if f"{v}.".startswith(f"{rocm_version}."))

    @property
    def simple_dir(self) -> Path:
        return self.root / "simple"

    def settings(self, base_url: str) -> dict[str, object]:
        """Product settings (roles/python_stack data keys) that point a host at this index, served at
        `base_url` (the www directory's URL). Its torch is the SIMULATED stand-in, a CPU build: the hosts
        say they accept that, the way a user provisioning a CPU-only machine would."""
        index = f"{base_url.rstrip('/')}/pypi/simple"
        return {
            "pytorch_index_url": index,
            "python_stack_index_url": index,
            "python_stack_allow_cpu_torch": True,
            "python_stack_lock_dir": str(self.locks_dir or ""),  # the lab's lock, made by the first deploy
        }


def _link(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:  # cache and state on different filesystems
        shutil.copy2(src, dest)


def _page(title: str, body: list[str]) -> str:
    t = html.escape(title)
    return (
        f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{t}</title></head>\n<body>\n<!-- {html.escape(SIMULATED_NOTE)} -->\n<h1>{t}</h1>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def build_wheel_index(state_dir: Path = config.STATE_DIR) -> WheelIndexInfo:
    """(Re)build `www/pypi` under the sandbox state: `simple/<project>/index.html` pages linking to
    `files/<wheel>#sha256=...`. Downloads only what the cache lacks."""
    start = time.monotonic()
    pins = check_lock()
    files, downloaded = fetch_locked(pins)
    hashes = {p.name: p.sha256 for p in pins}
    files["torchaudio"] = repacked_torchaudio(files["torchaudio"], hashes["torchaudio"])
    hashes["torchaudio"] = sha256_file(files["torchaudio"])
    files["torch"] = local_torch_wheel()
    hashes["torch"] = sha256_file(files["torch"])
    extra: dict[str, list[Path]] = {}  # more files of a project (torch: the AMD repacks, one per release)
    for name, paths in amd_index(files["torch"]).items():  # SIMULATED AMD index, from amdworld/*.yaml
        if name not in files:
            files[name], paths = paths[0], paths[1:]
            hashes[name] = sha256_file(files[name])
        extra[name] = paths

    root = config.www_dir(state_dir) / "pypi"
    if root.exists():
        shutil.rmtree(root)  # rebuilt from the cache each time: idempotent, no stale projects
    (root / "files").mkdir(parents=True)
    (root / "simple").mkdir()
    (root / "README.txt").write_text(SIMULATED_NOTE + "\n")
    for name, src in sorted(files.items()):
        note = ""
        if name == "torch":
            note = "<p>SIMULATED: CPU builds standing in for the ROCm builds (one repacked as AMD's).</p>\n"
        elif name == "torchaudio":
            note = "<p>SIMULATED: repack without CUDA native libraries.</p>\n"
        elif name == "rocm" or name.startswith(("rocm-sdk-", "amd-torch-device-")):
            note = "<p>SIMULATED: AMD's package as amdworld/python-packages.yaml says, no ROCm code.</p>\n"
        links = []
        for wheel in (src, *extra.get(name, [])):
            _link(wheel, root / "files" / wheel.name)
            href = f"../../files/{wheel.name}#sha256={hashes[name] if wheel == src else sha256_file(wheel)}"
            links.append(f'<a href="{html.escape(href)}">{html.escape(wheel.name)}</a><br>')
        page = _page(f"Links for {name}", [note + "\n".join(links)])
        (root / "simple" / name).mkdir()
        (root / "simple" / name / "index.html").write_text(page)
    root_links = [f'<a href="{n}/">{n}</a><br>' for n in sorted(files)]
    (root / "simple" / "index.html").write_text(_page("Simple index", root_links))
    all_files = [*files.values(), *(w for ws in extra.values() for w in ws)]
    served = sum(f.stat().st_size for f in all_files)
    amd = {w.name.split("-")[1].split("+rocm", 1)[1]: w for w in extra.get("torch", [])}
    locks = Path(state_dir) / "locks"
    return WheelIndexInfo(root, files, amd, locks, downloaded, served, time.monotonic() - start)


# --- installing the stack the way roles/python_stack does --------------------------------------------------
def install_stack(venv: Path, index_url: str, python: str = "python3.11") -> dict[str, float]:
    """Create `venv` and install the training stack from `index_url` only, in the role's three steps:
    torch + torchaudio, the requirements, then llamafactory without its declared dependencies.
    Returns seconds per step."""
    env = isolated_pip_env()
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir", "--index-url", index_url]
    steps = {
        "venv": [python, "-m", "venv", str(venv)],
        "torch": [*pip, f"torch=={standin_torch_version()}", TORCHAUDIO_REQUIREMENT],
        "requirements": [*pip, *DEFAULTS["python_stack_requirements"]],
        "llamafactory": [*pip, "--no-deps", f"llamafactory=={DEFAULTS['llamafactory_version']}"],
    }
    timings = {}
    for step, cmd in steps.items():
        t = time.monotonic()
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        timings[step] = round(time.monotonic() - t, 1)
    return timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relock", action="store_true", help="resolve against PyPI and rewrite wheels.lock")
    parser.add_argument("--fresh", action="store_true", help="with --relock: forget the current versions")
    parser.add_argument("--state-dir", type=Path, default=config.STATE_DIR)
    args = parser.parse_args(argv)
    if args.relock:
        print(f"relocked {LOCK_FILE}: {relock(fresh=args.fresh)} bytes downloaded")
    info = build_wheel_index(args.state_dir)
    print(
        f"{len(info.files)} projects in {info.root}, {info.served_bytes} bytes served, "
        f"{info.downloaded_bytes} bytes downloaded, {info.seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
