"""The SIMULATED rocm/pytorch image: an OCI image written by hand (no container engine on this machine).

Named and tagged as AMD names its ROCm PyTorch images (amdworld/containers.yaml: repository rocm/pytorch,
tag rocm<ROCm>_ubuntu<release>_py<python>_pytorch_release_<torch>), generated from that fixture data, never
from the product's tables. Two uncompressed tar layers:
- the sandbox's base rootfs (Debian 12, its Python 3.11 although the tag says py3.12: SIMULATED), without
  docs, man pages, locales and apt lists;
- a SIMULATED torch that trains: the machine's CPU torch wheel (the stand-in the SIMULATED AMD index
  repacks too, wheelfiles.local_torch_wheel) unpacked into the image's dist-packages, its `__version__`
  and METADATA set to the tag's torch and ROCm ("2.9.1+rocm7.2.4"), with torch/SIMULATED.txt; torch's own
  dependencies (sympy, filelock, ...: its Requires-Dist) from the sandbox wheel cache (wheels.lock), as
  AMD's image has them; torchaudio, as AMD's image has it (the sandbox index's repack of the locked
  torchaudio, without its CUDA-linked libraries: LLaMA-Factory imports it even for text training); and pip
  (the rootfs's own pip wheel, /usr/share/python-wheels), as AMD's image has it. ~700 MB uncompressed.
  Each module is compiled (__pycache__/*.cpython-311.pyc, PEP 552's unchecked-hash form, whose validity
  does not depend on a file time), as pip leaves an install in AMD's image: a job's container cannot write
  into the image's dist-packages (it runs as the training user), so without them every container start
  compiled torch again (importing torch from this layer: 5.8-6.3 s without, 1.9-2.2 s with, measured on a
  loaded 2-core machine). Only when this machine's Python is the image's (3.11); else left out.
  No ROCm inside: torch.version.hip is None (a CPU build).
`variant` makes another image under the same name (a different config, same layers): the "different image
under the pinned tag" of the tests.

    img = ensure_image(cache_dir)              # cached under <cache>/oci-images/<key>/
    img.name, img.tag, img.digest, img.blobs   # blobs: folder of sha256/<hex> files
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import marshal
import os
import posixpath
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as normalize

from radeonlab.sandbox import config, rootfs, wheels
from radeonlab.sandbox.wheelfiles import local_torch_wheel

# Change when what is built here changes: it is part of the cache key.
GENERATION = "oci5"
IMAGE_CACHE_TAG = "cpython-311"  # the image's Python (Debian 12's 3.11): the .pyc files' name and format
PYC_UNCHECKED_HASH = 0b01  # PEP 552 flags: hash-based, not checked against the source
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"  # uncompressed: no gzip time on 2 cores
EXCLUDE = [
    "./proc/*", "./sys/*", "./dev/*", "./run/*", "./tmp/*", "./usr/share/doc/*", "./usr/share/man/*",
    "./usr/share/locale/*", "./usr/share/info/*", "./var/cache/apt/*", "./var/lib/apt/lists/*",
    "./etc/ssh/ssh_host_*", "./.radeonlab-base.json",
]  # fmt: skip
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # Debian's python3 reads it (the base's Python)


def amd_containers() -> dict[str, Any]:
    return yaml.safe_load((config.AMDWORLD_DIR / "containers.yaml").read_text())


@dataclass(frozen=True)
class Image:
    name: str  # repository, e.g. rocm/pytorch
    tag: str
    digest: str  # sha256:<hex> of the manifest
    blobs: Path  # <dir>/sha256/<hex>
    torch_version: str


def default_tag(data: dict[str, Any] | None = None) -> dict[str, str]:
    """The first tag AMD's data lists (the newest ROCm, then torch, it names)."""
    return dict((data or amd_containers())["tags"][0])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _rootfs_layer(base: Path, out: Path) -> None:
    """A reproducible tar of the base rootfs (sorted, fixed times, numeric owners): the same bytes, the
    same digest, every build."""
    cmd = ["tar", "-C", str(base), "--sort=name", "--mtime=@0", "--numeric-owner", "--format=posix",
           "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"]  # fmt: skip
    cmd += [f"--exclude={e}" for e in EXCLUDE] + ["-cf", str(out), "."]
    subprocess.run(cmd, check=True)


def _torch_member(name: str, data: bytes, old_info: str, version: str) -> tuple[str, bytes] | None:
    """A member of the CPU torch wheel as the SIMULATED image has it: the version set to the tag's."""
    if name.startswith(old_info):
        if name.endswith("/RECORD"):
            return None  # its hashes would name the old files
        new = f"torch-{version}.dist-info/{name[len(old_info) :]}"
        if name.endswith("/METADATA"):
            lines = [
                f"Version: {version}" if x.startswith("Version: ") else x for x in data.decode().split("\n")
            ]
            data = "\n".join(lines).encode()
        return new, data
    if name == "torch/version.py":
        lines = data.decode().split("\n")
        data = "\n".join(
            f"__version__ = '{version}'" if x.startswith("__version__") else x for x in lines
        ).encode()
    return name, data


def _add(tar: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(path)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _unpack(tar: tarfile.TarFile, wheel: Path, seen: set[str], rename: Any = None) -> None:
    """A wheel's files into dist-packages (a wheel install without scripts: purelib and platlib only)."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            name, data = info.filename, z.read(info)
            if name.split("/", 1)[0].endswith(".data"):
                continue
            if rename is not None:
                renamed = rename(name, data)
                if renamed is None:
                    continue
                name, data = renamed
            parts = name.split("/")
            for i in range(1, len(parts)):
                d = f"{SITE_PACKAGES}/{'/'.join(parts[:i])}"
                if d not in seen:
                    seen.add(d)
                    dinfo = tarfile.TarInfo(d)
                    dinfo.type, dinfo.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(dinfo)
            _add(tar, f"{SITE_PACKAGES}/{name}", data, 0o755 if info.external_attr >> 16 & 0o111 else 0o644)
            if name.endswith(".py") and sys.implementation.cache_tag == IMAGE_CACHE_TAG:
                _add_pyc(tar, name, data, seen)


def _add_pyc(tar: tarfile.TarFile, name: str, source: bytes, seen: set[str]) -> None:
    """`name`'s compiled module beside it (what pip's install leaves): PEP 552's layout, magic number, flags,
    the source's hash, the marshalled code. A file that does not compile (a template, a test of bad
    syntax) gets none, as with pip."""
    path = f"/{SITE_PACKAGES}/{name}"
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return
    head, tail = posixpath.split(name)
    folder = f"{SITE_PACKAGES}/{head}/__pycache__" if head else f"{SITE_PACKAGES}/__pycache__"
    if folder not in seen:
        seen.add(folder)
        dinfo = tarfile.TarInfo(folder)
        dinfo.type, dinfo.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(dinfo)
    header = importlib.util.MAGIC_NUMBER + PYC_UNCHECKED_HASH.to_bytes(4, "little")
    pyc = header + importlib.util.source_hash(source) + marshal.dumps(code)
    _add(tar, f"{folder}/{tail[:-3]}.{IMAGE_CACHE_TAG}.pyc", pyc)


def _torch_deps(torch: Path, cached: dict[str, Path]) -> list[Path]:
    """torch's Requires-Dist closure (no extras; markers for the image's Linux Python 3.11) as wheels of
    the sandbox wheel cache."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(python_version="3.11", sys_platform="linux", extra="")
    env["platform_system"], env["platform_machine"] = "Linux", "x86_64"
    out: dict[str, Path] = {}
    todo = [torch]
    while todo:
        with zipfile.ZipFile(todo.pop()) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            text = z.read(meta).decode()
        for line in text.splitlines():
            if not line.startswith("Requires-Dist: "):
                continue
            req = Requirement(line.removeprefix("Requires-Dist: "))
            name = normalize(req.name)
            if (req.marker and not req.marker.evaluate(env)) or name in out or name not in cached:
                continue
            out[name] = cached[name]
            todo.append(cached[name])
    return [out[n] for n in sorted(out)]


def _torch_layer(base: Path, torch_version: str, rocm: str, out: Path) -> None:
    """The SIMULATED torch layer (see the module docstring) as a tar file at `out`."""
    torch = local_torch_wheel()
    old_info = "-".join(torch.name.split("-")[:2]) + ".dist-info/"
    pins = wheels.check_lock()
    cached, _ = wheels.fetch_locked(pins)
    audio_sha = next(p.sha256 for p in pins if p.name == "torchaudio")
    audio = wheels.repacked_torchaudio(cached["torchaudio"], audio_sha)
    pip = sorted((base / "usr/share/python-wheels").glob("pip-*.whl"))[-1]
    seen: set[str] = set()
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("usr", "usr/local", "usr/local/lib", "usr/local/lib/python3.11", SITE_PACKAGES):
            dinfo = tarfile.TarInfo(d)
            dinfo.type, dinfo.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(dinfo)
            seen.add(d)
        _unpack(tar, torch, seen, lambda n, d: _torch_member(n, d, old_info, torch_version))
        for wheel in [*_torch_deps(torch, cached), audio, pip]:
            _unpack(tar, wheel, seen)
        _add(
            tar,
            f"{SITE_PACKAGES}/torch/SIMULATED.txt",
            (
                f"SIMULATED stand-in for torch {torch_version} in AMD's rocm/pytorch image (ROCm {rocm}): "
                f"the CPU build {torch.name}, radeonlab sandbox, not AMD's image.\n"
            ).encode(),
        )


def _put(blobs: Path, data: bytes) -> str:
    hexd = _sha(data)
    (blobs / "sha256").mkdir(parents=True, exist_ok=True)
    (blobs / "sha256" / hexd).write_bytes(data)
    return hexd


def _manifest(blobs: Path, layers: list[tuple[str, int]], tag: dict[str, str], variant: str) -> str:
    """Config + manifest for these layers (hex digest, size); returns the manifest's sha256:<hex>."""
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["/bin/bash"],
            "Labels": {
                "org.opencontainers.image.description": "SIMULATED rocm/pytorch image (radeonlab sandbox)",
                "radeonlab.sandbox.tag": json.dumps(tag, sort_keys=True),
                "radeonlab.sandbox.variant": variant,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{h}" for h, _ in layers]},
    }
    cfg = json.dumps(image_config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": f"sha256:{_put(blobs, cfg)}", "size": len(cfg)},
        "layers": [{"mediaType": LAYER_TYPE, "digest": f"sha256:{h}", "size": n} for h, n in layers],
    }
    return "sha256:" + _put(blobs, json.dumps(manifest, sort_keys=True).encode())


def cache_key(base: Path, tag: dict[str, str], variant: str) -> str:
    marker = (base / rootfs.MARKER).read_text()
    torch = local_torch_wheel()
    stand_in = [torch.name, torch.stat().st_size]
    return _sha(json.dumps([GENERATION, marker, tag, variant, stand_in], sort_keys=True).encode())[:16]


def ensure_image(
    cache_dir: Path = config.CACHE_DIR, variant: str = "", tag: dict[str, str] | None = None
) -> Image:
    """The SIMULATED image for `tag` (default: the first of amdworld/containers.yaml), built once
    per cache key."""
    data = amd_containers()
    tag = tag or default_tag(data)
    base = rootfs.ensure_base(cache_dir)
    torch_version = f"{tag['torch']}+rocm{tag['rocm']}"
    out = cache_dir / "oci-images" / cache_key(base, tag, variant)
    done = out / "image.json"
    if not done.exists():
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # another process may build it at once
        shutil.rmtree(tmp, ignore_errors=True)
        blobs = tmp / "blobs"
        (blobs / "sha256").mkdir(parents=True)
        layer = tmp / "rootfs.tar"
        _rootfs_layer(base, layer)
        root_hex = _file_sha(layer)
        size = layer.stat().st_size
        layer.rename(blobs / "sha256" / root_hex)
        torch_tar = tmp / "torch.tar"
        _torch_layer(base, torch_version, tag["rocm"], torch_tar)
        torch_hex, torch_size = _file_sha(torch_tar), torch_tar.stat().st_size
        torch_tar.rename(blobs / "sha256" / torch_hex)
        layers = [(root_hex, size), (torch_hex, torch_size)]
        digest = _manifest(blobs, layers, tag, variant)
        record = {"name": data["repository"], "tag": data["tag_shape"].format(**tag), "digest": digest}
        (tmp / "image.json").write_text(json.dumps(record, indent=1) + "\n")
        try:
            tmp.rename(out)
        except OSError:  # built by another process meanwhile: same key, same bytes
            shutil.rmtree(tmp, ignore_errors=True)
    record = json.loads(done.read_text())
    return Image(record["name"], record["tag"], record["digest"], out / "blobs", torch_version)
