"""The training stack's versions and sources: the one place they are set (role-prefixed data keys).

Every key can be overridden per host or group in the inventory, or with `pyinfra --data key=value`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radeonlab.roles import amd_releases

# download.pytorch.org: PyTorch release -> the ROCm release(s) its ROCm wheels are built for (pytorch
# RELEASE.md; torch 2.14 ships rocm7.2 and rocm7.14 wheels: pytorch/test-infra#8451 as cited in
# rocm-facts.md "Since 7.2.4", not re-read here).
PYTORCH_ROCM_PAIRING: dict[str, str | tuple[str, ...]] = {
    "2.4": "6.1",
    "2.5": "6.2",
    "2.6": "6.2.4",
    "2.7": "6.3",
    "2.8": "6.4",
    "2.9": "6.4",
    "2.10": "7.1",
    "2.11": "7.2",
    "2.12": "7.2",
    "2.13": "7.2",
    "2.14": ("7.2", "7.14"),
}


@dataclass(frozen=True)
class AmdWheels:
    """AMD's multi-arch wheel set for one ROCm Core SDK release: torch with a device extra per exact target
    (`torch[device-gfx1100]==2.13.0+rocm10.0.0`), and the torchvision/torchaudio that index pairs with it."""

    rocm: str  # the Core SDK release ("10.0")
    torch: str  # public version
    torchvision: str
    torchaudio: str
    local: str  # the local version label of the set ("rocm10.0.0")
    index_url: str
    source: str


# One set per Core SDK release with AMD wheels, derived from the release table (roles/amd_releases.py, where
# the versions, index URLs and their sources are). Keyed as rocm_version is written: the full version
# ("10.1.0", "7.14.1") and the series ("10.1", "7.14"), a series naming its newest patch.
def _amd_wheels() -> dict[str, AmdWheels]:
    out: dict[str, AmdWheels] = {}
    for r in amd_releases.RELEASES:  # newest first: a series keeps its newest patch
        if r.torch and r.location.python_index:
            w = AmdWheels(r.series, r.torch, r.torchvision, r.torchaudio, r.local, r.location.python_index,
                          f"roles/amd_releases.py: {r.source}")  # fmt: skip
            out.setdefault(r.series, w)
            out[r.version] = w
    return out


AMD_WHEELS: dict[str, AmdWheels] = _amd_wheels()

# Which gfx targets AMD's index has a `device-<gfx>` extra for: roles/gpu/table.py (AMD_DEVICE_TARGETS).

# AMD's package graph on its aggregate index (TheRock RELEASES.md; docs/packaging/python_packaging.md
# @0ec252477e04), T a gfx target: what a requirement pulls in. torch[device-T] pulls amd-torch-device-T
# (torch's own kernels for T), which pulls rocm-sdk-device-T (ROCm's kernels for T); torch itself requires
# rocm[libraries]. `rocm` is an sdist (evaluated at install time to pick a target) whose import name is
# rocm_sdk, never bare `rocm`.
AMD_PACKAGE_GRAPH: dict[str, tuple[str, ...]] = {
    "torch": ("rocm[libraries]",),
    "torch[device-{gfx}]": ("amd-torch-device-{gfx}",),
    "amd-torch-device-{gfx}": ("rocm-sdk-device-{gfx}",),
    "rocm-sdk-device-{gfx}": ("rocm-sdk-libraries",),
    "rocm[libraries]": ("rocm-sdk-core", "rocm-sdk-libraries"),
}
AMD_SDISTS: dict[str, str] = {"rocm": "rocm_sdk"}  # sdist -> the import name it provides


def device_packages(gfx: str) -> list[str]:
    """What `torch[device-<gfx>]` pulls in, in order: amd-torch-device-<gfx>, rocm-sdk-device-<gfx>."""
    out, key = [], "torch[device-{gfx}]"
    while key in AMD_PACKAGE_GRAPH and AMD_PACKAGE_GRAPH[key][0].endswith("{gfx}"):
        key = AMD_PACKAGE_GRAPH[key][0]
        out.append(key.format(gfx=gfx))
    return out


TORCH_SOURCES = ("amd", "pytorch")


def torch_pairing(source: str) -> dict[str, str | tuple[str, ...]]:
    """torch series -> ROCm release(s), for the chosen wheel source (AMD's index: one set per release)."""
    if source == "amd":
        return {".".join(w.torch.split(".")[:2]): w.rocm for w in AMD_WHEELS.values()}
    return dict(PYTORCH_ROCM_PAIRING)


# pyinfra data: one value type per key (strings, flags, lists), as every role's DEFAULTS
DEFAULTS: dict[str, Any] = {
    # A CPU build of torch on a host with AMD GPUs fails the deploy's verification (it would train on the
    # CPU); true accepts it, for a host meant to train on its CPU (the SIMULATED sandbox workstations).
    "python_stack_allow_cpu_torch": False,
    # The training user's venv. Empty user: the SSH user pyinfra logs in as.
    "python_stack_user": "",
    "python_stack_venv": "~/radeonlab/venv",
    # A Python that satisfies LLaMA-Factory's Requires-Python; where the distribution's python3 is older
    # (Ubuntu 22.04: 3.10) the role installs this one (deadsnakes PPA on Ubuntu).
    "python_stack_python": "python3.11",
    # LLaMA-Factory 0.9.5's Requires-Python (METADATA: ">=3.11.0"): the distribution's python3 is used when it
    # is at least this, else python_stack_python is installed.
    "python_stack_min_python": "3.11",
    # Packages that give the distribution's python3 its venv module (Debian/Ubuntu split it out).
    "python_stack_venv_packages": ["python3-venv"],
    # Ubuntu only: where python_stack_python comes from when python3 is too old (the deadsnakes PPA), and the
    # packages installed from it ({python} = python_stack_python).
    "python_stack_deadsnakes_repo_url": "https://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu",
    "python_stack_deadsnakes_key_url": (
        "https://keyserver.ubuntu.com/pks/lookup?op=get&search=0xF23C5A6CF475977595C89F51BA6932366A755776"
    ),
    "python_stack_deadsnakes_keyring": "/etc/apt/keyrings/deadsnakes.gpg",
    "python_stack_deadsnakes_packages": ["{python}", "{python}-venv"],
    # Where jobs run (one folder per job), owned by the training user; "~" is the training user's home.
    "python_stack_jobs_dir": "~/radeonlab/jobs",
    # The Hub model cache every job of the host shares (HF_HUB_CACHE): a base model is downloaded once per
    # workstation, not once per job. Under the training user's home, beside the jobs: the same disk, owned by
    # the user that trains (the Hub client's file locks then work for every job).
    "python_stack_model_cache": "~/radeonlab/models",
    # Where torch comes from: "amd" = AMD's multi-arch wheels for the Core SDK release (AMD_WHEELS: torch
    # with a device-<gfx> extra per GPU target on the host, e.g. torch[device-gfx1100]==2.14.0+rocm10.1.0);
    # "pytorch" = download.pytorch.org's rocm<series> index (PYTORCH_ROCM_PAIRING), the legacy 7.2.4 pair.
    "pytorch_source": "amd",
    # PyTorch: the public version; the ROCm build's local label (+rocm10.1.0) comes from the source. Default:
    # the torch AMD's index pairs with the default ROCm release (roles/amd_releases.py DEFAULT_RELEASE).
    "pytorch_version": amd_releases.default_release().torch,
    # Empty: the source's index (AMD_WHEELS[...].index_url, or pytorch_index_url_template for "pytorch").
    "pytorch_index_url": "",
    "pytorch_index_url_template": "https://download.pytorch.org/whl/rocm{rocm_series}",
    # pytorch_source "pytorch" only: the rocm<series> index to use. Empty: the legacy ROCm being installed
    # (7.2.4 -> rocm7.2), else the first series PYTORCH_ROCM_PAIRING gives the torch release (2.13 -> 7.2).
    "pytorch_rocm_series": "",
    # Extra wheel sources pip may use besides the indexes (a lab's wheel cache: a directory or URL).
    "pytorch_find_links": [],
    # Installed with torch from the same index: llamafactory imports torchaudio at the top of
    # data/mm_plugin.py. With AMD's wheels each is pinned as that index pairs it (AMD_WHEELS; torchvision
    # gets the device extras too); with download.pytorch.org unpinned (pip takes the matching build).
    "pytorch_extra_packages": ["torchaudio"],
    # Where everything that is not torch comes from: a lab mirror's URL, or empty for pip's own index (PyPI,
    # or what the host's pip configuration names).
    "python_stack_index_url": "",
    # LLaMA-Factory is installed without its declared dependencies (they pull gradio, torchvision and a
    # CUDA torch); these are the ones text LoRA training needs, pinned to what is tested.
    "llamafactory_version": "0.9.5",
    "python_stack_requirements": [
        "transformers==4.57.6",
        "datasets==4.0.0",
        "accelerate==1.11.0",
        "peft==0.18.1",
        "trl==0.24.0",
        "omegaconf==2.4.0",
        "pyyaml==6.0.4",
        "numpy==2.4.6",
        "safetensors==0.8.0",
        "matplotlib==3.11.2",
        # Notifications from the workstation (jobs/host/notify_send.py, a job's `radeonlab.notify` URLs): the
        # newest Apprise on PyPI (2026-11, 2.2.0; its API: Apprise().add(url), notify(body, title,
        # notify_type, timeout) -> AppriseResult, bool() = delivered). Pure Python; it adds requests-oauthlib,
        # oauthlib, click and markdown beside the pins above without changing any of them.
        "apprise==2.2.0",
    ],
    # Where the lab's hash locks are read and written (a folder on the machine running the deploy, one file
    # per stack: roles/python_stack/lock.py). Empty: `locks/` in the directory pyinfra runs in (beside the
    # inventory). With no lock for its stack (none committed in roles/python_stack/locks/, none here) the
    # first host resolves the stack once and writes it; everything then installs from the host's lines of
    # that lock, `pip install --require-hashes --no-deps`: a file whose sha256 differs is refused.
    "python_stack_lock_dir": "",
    # Optional packages this host's venv gets besides the stack, by name (PyPI spelling, e.g. ["tensorboard",
    # "wandb"]): each at its version in python_stack_extras_versions below (a name not pinned there stops the
    # deploy with an error), from the same index as the requirements (python_stack_index_url, or the lab
    # wheel cache), constrained so that no pin above moves. `radeonlab submit` names the one a config needs.
    "python_stack_extras": [],
    # Optional packages a job's config may need (jobs/spec/needs.py says which key needs which), at the
    # versions a host's `python_stack_extras` list installs them (names listed there). Each is the
    # newest release on PyPI (2026-12) that pip resolves beside the pins above without changing any of them
    # (`pip install --dry-run -c <the pins above> NAME` in a venv holding the stack); that they run on ROCm
    # is not verified here (no card). bitsandbytes must stay >= 0.50.0: older releases give NaN in 4-bit on
    # AMD GPUs (unslothai/unsloth#6230; #7535 requires 0.50.0 for AMD).
    "python_stack_extras_versions": {
        "wandb": "0.31.0",
        "tensorboard": "2.21.0",
        "mlflow": "3.17.2",
        "swanlab": "0.10.3",
        "trackio": "0.43.0",
        "deepspeed": "0.19.8",
        "bitsandbytes": "0.50.2",
        "galore-torch": "1.0",
        "apollo-torch": "1.0.3",
        "badam": "1.4",
        "adam-mini": "1.1.1",
        "liger-kernel": "0.8.5",
        "torchao": "0.18.0",
        "ray": "2.60.0",
        "hqq": "0.2.8.post1",
        "jieba": "0.42.1",
        "nltk": "3.10.4",
        "rouge-chinese": "1.0.3",
    },
    # What installs the hash lock on the hosts: "uv" (Astral's installer, a Rust binary: downloads in
    # parallel and links from its cache, `uv pip install --require-hashes --no-deps`, same lock, same
    # refusal of a changed file) or "pip" (the venv's own pip: the fallback, e.g. where uv's wheel has no
    # build for the host's platform). The lab's lock is resolved with pip either way (firstlock.py).
    "python_stack_installer": "uv",
    # uv is installed into the venv by its pip from one hash-pinned wheel, through the same index as the
    # stack (python_stack_index_url, or the lab wheel cache): PyPI's uv 0.13.9 (newest release on
    # 2026-12-05), file uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl, sha256 as PyPI
    # serves it (pip download uv==0.13.9 --no-deps, sha256sum). Another platform: override both keys.
    "python_stack_uv_version": "0.13.9",
    "python_stack_uv_sha256": "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    # uv's cache (UV_CACHE_DIR) on the host, "~" the training user's home: kept between deploys, so a
    # re-install of a locked file links it from here instead of downloading and unpacking it again.
    "python_stack_uv_cache_dir": "~/.cache/uv",
    # true: the lab's lock of this stack is resolved again from the indexes and rewritten (once per run; the
    # other hosts of the run add their lines to the new one). A lock committed in the repository is never
    # rewritten.
    "python_stack_lock_refresh": False,
}
