"""SIMULATED radeonlab sandbox build backend of the `rocm` selector (AMD's uses setuptools)."""

import base64
import hashlib
import json
import os
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "rocm_build.json")) as _f:
    CONFIG = json.load(_f)  # written by radeonlab/sandbox/amdsdist.py from amdworld/python-packages.yaml
KFD = "/sys/class/kfd/kfd/topology/nodes"


def _gfx(version):
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"  # KFD gfx_target_version 110000 -> gfx1100, 90010 -> gfx90a


def select_target():
    """ROCM_SDK_TARGET_FAMILY, else the first GPU of the KFD topology, else the default."""
    if os.environ.get("ROCM_SDK_TARGET_FAMILY"):
        return os.environ["ROCM_SDK_TARGET_FAMILY"], "ROCM_SDK_TARGET_FAMILY"
    try:
        nodes = sorted(os.listdir(KFD), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        nodes = []
    for node in nodes:
        try:
            with open(os.path.join(KFD, node, "properties")) as f:
                props = dict(line.split()[:2] for line in f if line.strip())
        except (OSError, ValueError):
            continue
        version = int(props.get("gfx_target_version", "0"))
        if version:
            return _gfx(version), "the GPU found (KFD topology)"
    return CONFIG["default_target"], "the built-in default"


def get_requires_for_build_wheel(config_settings=None):
    return []


def _record(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version, target = CONFIG["version"], select_target()
    info = f"rocm-{version}.dist-info/"
    meta = ["Metadata-Version: 2.1", "Name: rocm", "Version: " + version, "Summary: " + CONFIG["summary"]]
    for extra, reqs in CONFIG["extras"].items():
        if extra:
            meta.append("Provides-Extra: " + extra)
        for req in reqs:
            meta.append("Requires-Dist: " + req + (f'; extra == "{extra}"' if extra else ""))
    files = {
        info + "METADATA": ("\n".join(meta) + "\n").encode(),
        info + "WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: radeonlab-sandbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        info + "entry_points.txt": b"[console_scripts]\nrocm-sdk = rocm_sdk.__main__:main\n",
        "rocm_sdk/_dist_info.py": (
            "VERSION = {!r}\nSELECTED_TARGET = {!r}\nSELECTED_BY = {!r}\n".format(version, *target)
        ).encode(),
    }
    for name in ("__init__.py", "__main__.py", "SIMULATED.txt"):
        with open(os.path.join(HERE, "rocm_sdk", name), "rb") as f:
            files["rocm_sdk/" + name] = f.read()
    wheel = f"rocm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
        record = []
        for member, data in files.items():
            z.writestr(member, data)
            record.append(f"{member},{_record(data)},{len(data)}")
        z.writestr(info + "RECORD", "\n".join(record + [info + "RECORD,,"]) + "\n")
    return wheel
