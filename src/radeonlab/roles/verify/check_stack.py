"""Run by the venv's python on a workstation (passed with -c): what torch sees, as one JSON line.

Standard library + torch only. Never raises: every failure is reported in the JSON.
On a CPU build of torch the GPU checks cannot run: the report says so (`cpu_build`), and the verify role
decides whether that is allowed on this host (roles/verify/operations.py).
"""

import grp
import importlib.metadata as metadata
import json
import os
import pwd
import sys
import time

# What /etc/profile.d sets for jobs (roles/gpu_env, roles/rocm): reported as the check's login saw it.
PROFILE_KEYS = ("PYTORCH_ROCM_ARCH", "HSA_OVERRIDE_GFX_VERSION", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL")


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def main(size):
    out = {"python": sys.version.split()[0], "devices": [], "error": None, "gpu_checks": None}
    # Who ran the check and with what: it must be the training user's login, as a job gets it (its groups
    # as /etc/group has them now, /etc/profile.d's GPU settings).
    out["user"] = pwd.getpwuid(os.geteuid()).pw_name
    out["groups"] = sorted({group_name(g) for g in (os.getegid(), *os.getgroups())})
    out["env"] = {k: os.environ.get(k) for k in PROFILE_KEYS}
    out["versions"] = {n: version(n) for n in ("torch", "torchaudio", "transformers", "peft", "llamafactory")}
    # every distribution of the venv: what `submit` checks a config's needs against (jobs/spec/needs.py)
    names = {d.metadata["Name"]: d.version for d in metadata.distributions()}
    out["packages"] = {n.lower(): v for n, v in names.items() if n}
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - report any import failure
        out["error"] = f"import torch failed: {type(e).__name__}: {e}"
        print(json.dumps(out))
        return
    out["torch"] = torch.__version__
    out["hip"] = getattr(torch.version, "hip", None)
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["cpu_build"] = out["hip"] is None and out["cuda"] is None
    if out["cpu_build"]:
        out["gpu_checks"] = "CPU build of torch: no GPU check possible"
    elif not out["cuda_available"]:
        out["gpu_checks"] = (
            "ROCm build of torch sees no GPU: check /dev/kfd access and HSA_OVERRIDE_GFX_VERSION"
        )
    else:
        out["gpu_checks"] = "run"
        for i in range(torch.cuda.device_count()):
            dev = {"index": i, "name": torch.cuda.get_device_name(i)}
            try:
                dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
                a = torch.randn(size, size, device=f"cuda:{i}", dtype=dtype)
                torch.cuda.synchronize(i)
                start = time.perf_counter()
                c = a @ a
                torch.cuda.synchronize(i)
                dev["seconds"] = round(time.perf_counter() - start, 4)
                dev["dtype"] = str(dtype).removeprefix("torch.")
                dev["matmul_ok"] = bool(torch.isfinite(c.float()).all().item())
            except Exception as e:  # noqa: BLE001
                dev["matmul_ok"] = False
                dev["error"] = f"{type(e).__name__}: {e}"
            out["devices"].append(dev)
    print(json.dumps(out))


main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
