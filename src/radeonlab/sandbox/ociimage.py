"""The SIMULATED rocm/pytorch image: an OCI image written by hand (no container engine on this machine).

Named and tagged as AMD names its ROCm PyTorch images (amdworld/containers.yaml: repository rocm/pytorch,
tag rocm<ROCm>_ubuntu<release>_py<python>_pytorch_release_<torch>), generated from that fixture data, never
from the product's tables. Two uncompressed tar layers:
- the sandbox's base rootfs (Debian 12, its Python 3.11 although the tag says py3.12: SIMULATED), without
  docs, man pages, locales and apt lists;
- a SIMULATED torch: a package `torch` whose `__version__` is the tag's torch and ROCm ("2.9.1+rocm7.2.4")
  and a SIMULATED.txt. It is not the CPU build the wheel index's stand-in torch repacks (amdwheels.py):
  that is ~700 MB installed, and the e2e test's time is short; `import torch` shows the image's Python sees
  the stand-in, nothing more. No ROCm inside.
`variant` makes another image under the same name (a different config, same layers): the "different image
under the pinned tag" of the tests.

    img = ensure_image(cache_dir)              # cached under <cache>/oci-images/<key>/
    img.name, img.tag, img.digest, img.blobs   # blobs: folder of sha256/<hex> files
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from radeonlab.sandbox import config, rootfs

# Change when what is built here changes: it is part of the cache key.
GENERATION = "oci2"
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


def _torch_layer(torch_version: str, rocm: str) -> bytes:
    files = {
        f"{SITE_PACKAGES}/torch/__init__.py": (
            '"""SIMULATED torch of the radeonlab sandbox image: no ROCm, no tensors."""\n'
            f'__version__ = "{torch_version}"\n'
            "\n\nclass _Cuda:\n    @staticmethod\n    def is_available() -> bool:\n        return False\n"
            "\n\ncuda = _Cuda()\n"
            # torch.version as a CPU build has it (no HIP, no CUDA): what verify's check reads
            "\n\nclass version:\n    hip = None\n    cuda = None\n"
        ),
        f"{SITE_PACKAGES}/torch/SIMULATED.txt": (
            f"SIMULATED stand-in for torch {torch_version} in AMD's rocm/pytorch image (ROCm {rocm}): "
            "radeonlab sandbox, not AMD's image.\n"
        ),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in (f"{SITE_PACKAGES}/torch",):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, text in files.items():
            raw = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


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
    return _sha(json.dumps([GENERATION, marker, tag, variant], sort_keys=True).encode())[:16]


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
        torch = _torch_layer(torch_version, tag["rocm"])
        layers = [(root_hex, size), (_put(blobs, torch), len(torch))]
        digest = _manifest(blobs, layers, tag, variant)
        record = {"name": data["repository"], "tag": data["tag_shape"].format(**tag), "digest": digest}
        (tmp / "image.json").write_text(json.dumps(record, indent=1) + "\n")
        try:
            tmp.rename(out)
        except OSError:  # built by another process meanwhile: same key, same bytes
            shutil.rmtree(tmp, ignore_errors=True)
    record = json.loads(done.read_text())
    return Image(record["name"], record["tag"], record["digest"], out / "blobs", torch_version)
