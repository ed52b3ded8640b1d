"""What the slurm role writes and does, decided from data: pure functions, no pyinfra.

Inputs are plain values: the inventory's groups and host data, each node's host record
(/etc/radeonlab/host.json, roles/verify) and `slurmd -C` line, the GPU fact's entries. Outputs are file
texts (slurm.conf, gres.conf, the task prolog) and decisions (restart or reconfigure, what is wrong).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from radeonlab.contract.records import GIB
from radeonlab.roles import InventoryData
from radeonlab.roles.gpu import cards

TEMPLATES = Path(__file__).parent / "templates"
# Debian's slurm-wlm layout (the package's systemd units use these pid files).
PATHS = {
    "conf_dir": "/etc/slurm",
    "slurm_conf": "/etc/slurm/slurm.conf",
    "gres_conf": "/etc/slurm/gres.conf",
    "cgroup_conf": "/etc/slurm/cgroup.conf",
    "task_prolog": "/etc/slurm/radeonlab-task-prolog.sh",
    "state_save": "/var/spool/slurmctld",
    "slurmd_spool": "/var/spool/slurmd",
    "log_dir": "/var/log/slurm",
    "slurmctld_pid": "/run/slurmctld.pid",
    "slurmd_pid": "/run/slurmd.pid",
    "slurmctld_log": "/var/log/slurm/slurmctld.log",
    "slurmd_log": "/var/log/slurm/slurmd.log",
    "munge_key": "/etc/munge/munge.key",
    "munge_run": "/run/munge",
    "munged_pid": "/run/munge/munged.pid",
    "slurmd_defaults": "/etc/default/slurmd",
}
MUNGE_KEY_BYTES = 128  # munge 0.5.15 `mungekey`'s default size (1024 bits)
# Slurm node names: letters, digits, '-' and '_' (a '.' or ',' would be read as hostlist syntax).
NODE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# RealMemory is rounded down to this (MiB): a kernel update that moves MemTotal by a few MiB neither
# rewrites slurm.conf nor drains the node ("Low RealMemory").
MEMORY_STEP_MB = 256
# slurm.conf keys whose change needs slurmctld and every slurmd restarted (slurm.conf(5) of 22.05: node
# definitions, ports, plugins, GresTypes, ...); any other change is applied by `scontrol reconfigure`.
RESTART_KEYS = frozenset(
    {
        "nodename", "slurmctldhost", "slurmctldport", "slurmdport", "slurmuser", "authtype", "grestypes",
        "proctracktype", "taskplugin", "selecttype", "selecttypeparameters", "schedulertype",
        "statesavelocation", "slurmdspooldir", "mpidefault", "jobacctgathertype", "clustername",
        "accountingstoragetype", "accountingstoragehost", "accountingstorageport", "slurmctldpidfile",
        "slurmdpidfile", "prioritytype",
    }
)  # fmt: skip


class SlurmPlanError(ValueError):
    """A one-line reason the inventory or a host cannot make a Slurm lab."""


# ------------------------------------------------------------------------------------------------ who is who


@dataclass(frozen=True)
class Lab:
    """The Slurm hosts of an inventory, by inventory name."""

    controller: str
    nodes: tuple[str, ...]

    def hosts(self) -> tuple[str, ...]:
        return (self.controller, *(n for n in self.nodes if n != self.controller))

    def controller_only(self, name: str) -> bool:
        """A host that runs slurmctld and no jobs: it needs no GPU stack."""
        return name == self.controller and name not in self.nodes


def lab_of(groups: Mapping[str, Sequence[str]], data: Mapping[str, Any]) -> Lab | None:
    """The lab the inventory's groups describe; None when it names no Slurm group (the role does nothing)."""
    ctl_group, node_group = str(data["slurm_controller_group"]), str(data["slurm_nodes_group"])
    controllers, nodes = list(groups.get(ctl_group, ())), list(groups.get(node_group, ()))
    if not controllers and not nodes:
        return None
    if not controllers:
        raise SlurmPlanError(
            f"the inventory has a {node_group} group but no {ctl_group} group: "
            f"add the host that runs slurmctld to a group {ctl_group}"
        )
    if len(controllers) > 1:
        raise SlurmPlanError(
            f"group {ctl_group} has {len(controllers)} hosts ({', '.join(controllers)}): "
            "radeonlab sets up one controller"
        )
    if not nodes:
        raise SlurmPlanError(
            f"the inventory has a {ctl_group} group but no {node_group} group: "
            f"add the workstations that run jobs to a group {node_group}"
        )
    return Lab(controllers[0], tuple(nodes))


def node_name(inventory_name: str, data: InventoryData) -> str:
    """Slurm's NodeName for a host: slurm_node_name, else the inventory name."""
    name = str(data.get("slurm_node_name") or inventory_name)
    if not NODE_NAME.match(name):
        raise SlurmPlanError(
            f"{inventory_name}: {name!r} is not a usable Slurm node name (letters, digits, '-', '_'; "
            "starting with a letter): set slurm_node_name for this host"
        )
    return name


def address(inventory_name: str, data: InventoryData) -> str:
    """Where the other Slurm hosts reach this one: slurm_address, radeonlab_node_address, ssh_hostname."""
    return str(
        data.get("slurm_address")
        or data.get("radeonlab_node_address")
        or data.get("ssh_hostname")
        or inventory_name
    )


# -------------------------------------------------------------------------------------------- GPUs of a node


def training_gpus(
    entries: Iterable[Mapping[str, Any]], rocm_version: str, min_vram_bytes: int
) -> list[Mapping[str, Any]]:
    """The GPUs Slurm hands out: supported on this ROCm and with at least min_vram_bytes (an iGPU's
    carve-out is left out, as /etc/profile.d/radeonlab-gpu.sh leaves it out), in ROCm's device order.

    Works on host record entries ("index") and on GPU fact entries ("rocr_index") alike."""
    chosen = [
        g
        for g in entries
        if cards.is_supported(g.get("gfx"), rocm_version) and int(g.get("vram_total") or 0) >= min_vram_bytes
    ]
    return sorted(chosen, key=rocr_index)


def rocr_index(gpu: Mapping[str, Any]) -> int:
    return int(gpu["rocr_index"] if "rocr_index" in gpu else gpu["index"])


def vram_gib(gpu: Mapping[str, Any]) -> int:
    """VRAM in whole GiB, as cards are sold: an RX 7900 XTX (24560 MiB) is 24."""
    return round(int(gpu.get("vram_total") or 0) / GIB)


def gfx_features(gfx: str) -> list[str]:
    """gfx1100 -> gfx1100, gfx110x (its family), gfx11 (its major), rdna3 (its architecture)."""
    feats = [gfx, gfx[:-1] + "x", re.sub(r"^(gfx\d+?)[0-9a-f]{2}$", r"\1", gfx)]
    arch = cards.arch_family(gfx)
    if arch != "unknown":
        feats.append(re.sub(r"[^a-z0-9]", "_", arch.lower()))  # RDNA3.5 -> rdna3_5
    return list(dict.fromkeys(feats))


def node_features(gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    """Features true of EVERY GPU of the node (a job constrained to bf16 must not be handed a card without
    it): gfx names, bf16, and vram<N>g for the smallest card."""
    if not gpus:
        return []
    per_gpu = [gfx_features(str(g["gfx"])) for g in gpus]
    common = [f for f in per_gpu[0] if all(f in other for other in per_gpu[1:])]
    if all(g.get("bf16") for g in gpus):
        common.append("bf16")
    common.append(f"vram{min(vram_gib(g) for g in gpus)}g")
    return common


def gres_field(gpus: Sequence[Mapping[str, Any]]) -> str:
    """slurm.conf Gres=: gpu:<gfx>:<count> per type, in device order."""
    counts = Counter(str(g["gfx"]) for g in gpus)
    return ",".join(f"gpu:{gfx}:{n}" for gfx, n in counts.items())


def gres_lines(name: str, gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    """gres.conf lines: one per GPU, in ROCm's device order (Slurm numbers them by line)."""
    missing = [str(rocr_index(g)) for g in gpus if g.get("render_minor") is None]
    if missing:
        raise SlurmPlanError(
            f"{name}: GPU {', '.join(missing)} has no DRM render node in sysfs (device/drm/renderD*): "
            "is the amdgpu driver loaded?"
        )
    return [
        f"NodeName={name} Name=gpu Type={g['gfx']} File=/dev/dri/renderD{g['render_minor']} Flags=amd_gpu_env"
        for g in gpus
    ]


def rocr_map(gpus: Sequence[Mapping[str, Any]]) -> list[int]:
    """gres.conf line i -> the ROCm device index of that GPU (the task prolog's translation table)."""
    return [rocr_index(g) for g in gpus]


# ----------------------------------------------------------------------------------------- slurm.conf nodes


def parse_slurmd_c(text: str) -> dict[str, int]:
    """`slurmd -C` -> {"CPUs": 2, "Boards": 1, "SocketsPerBoard": 1, ..., "RealMemory": 24105}."""
    values = dict(re.findall(r"(\w+)=(\S+)", text))
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    try:
        return {k: int(values[k]) for k in keys}
    except (KeyError, ValueError):
        raise SlurmPlanError(f"unexpected `slurmd -C` output: {text.strip()[:120]!r}") from None


@dataclass(frozen=True)
class NodeSpec:
    """One NodeName line of slurm.conf."""

    name: str
    address: str
    port: int  # 0: the cluster's SlurmdPort
    hardware: Mapping[str, int]
    gres: str
    features: tuple[str, ...] = field(default_factory=tuple)

    @property
    def line(self) -> str:
        hw = dict(self.hardware)
        hw["RealMemory"] = max(MEMORY_STEP_MB, hw["RealMemory"] // MEMORY_STEP_MB * MEMORY_STEP_MB)
        parts = [f"NodeName={self.name}", f"NodeAddr={self.address}"]
        parts += [f"Port={self.port}"] if self.port else []
        parts += [f"{k}={v}" for k, v in hw.items()]
        parts += [f"Gres={self.gres}"] if self.gres else []
        parts += [f"Features={','.join(self.features)}"] if self.features else []
        return " ".join([*parts, "State=UNKNOWN"])


def node_spec(
    name: str,
    data: InventoryData,
    record: Mapping[str, Any] | None,
    slurmd_c: str,
    min_vram_bytes: int,
    inventory_name: str | None = None,
) -> NodeSpec:
    """A node's line from its inventory data, its host record and `slurmd -C`."""
    who = inventory_name or name
    if not record:
        raise SlurmPlanError(
            f"{who} has no host record (/etc/radeonlab/host.json): provision it with deploy/setup.py "
            "before it joins Slurm"
        )
    rocm = str((record.get("rocm") or {}).get("version") or cards.FALLBACK_ROCM_VERSION)
    gpus = [] if record.get("cpu_only") else training_gpus(record.get("gpus") or [], rocm, min_vram_bytes)
    return NodeSpec(
        name=name,
        address=address(who, data),
        port=int(data.get("slurm_node_port") or 0),
        hardware=parse_slurmd_c(slurmd_c),
        gres=gres_field(gpus),
        features=tuple(node_features(gpus)),
    )


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def render(template: str, **values: Any) -> str:
    return _environment().get_template(template).render(**values)


def slurm_conf(
    data: Mapping[str, Any], controller_hostname: str, controller_address: str, nodes: Sequence[NodeSpec]
) -> str:
    """slurm.conf: the same text on every Slurm host (inputs must be the cluster's, not one host's)."""
    ports = [n.port for n in nodes if n.port]
    if len(set(ports)) != len(ports):
        raise SlurmPlanError(f"two nodes share slurm_node_port {Counter(ports).most_common(1)[0][0]}")
    return render(
        "slurm.conf.j2",
        cluster_name=data["slurm_cluster_name"],
        controller={"hostname": controller_hostname.split(".")[0], "address": controller_address},
        controller_port=int(data["slurm_controller_port"]),
        slurmd_port=int(data["slurm_slurmd_port"]),
        paths=PATHS,
        proctrack_type=data["slurm_proctrack_type"],
        task_plugin=data["slurm_task_plugin"],
        select_type_parameters=data["slurm_select_type_parameters"],
        slurmd_timeout=int(data["slurm_slurmd_timeout"]),
        jobcomp_log=data["slurm_jobcomp_log"],
        min_job_age=int(data["slurm_min_job_age"]),
        accounting_host=str(data["slurm_accounting_host"] or ""),
        accounting_port=int(data["slurm_accounting_port"]),
        extra_config=list(data["slurm_extra_config"] or []),
        nodes=sorted(nodes, key=lambda n: n.name),
        partition=data["slurm_partition"],
    )


def _settings(text: str) -> dict[str, list[str]]:
    """slurm.conf lines by key (lowercase), comments dropped; NodeName lines all under "nodename"."""
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            out.setdefault(line.split("=", 1)[0].strip().lower(), []).append(line)
    return out


def change_action(old: str | None, new: str) -> str:
    """What a slurm.conf change needs: "none", "reconfigure" (`scontrol reconfigure`: running jobs go on)
    or "restart" (slurmctld and every slurmd; slurm.conf(5) requires it for node definitions, ports and
    plugins; running jobs go on too, their slurmstepd processes are not restarted)."""
    if old == new:
        return "none"
    if old is None:
        return "restart"
    before, after = _settings(old), _settings(new)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    return "restart" if changed & RESTART_KEYS else "reconfigure" if changed else "none"


# ----------------------------------------------------------------------------------------------- munge key


def load_or_create_key(path: str) -> bytes:
    """The lab's munge key from `path` (on the machine running pyinfra), created on first use: 128 random
    bytes, mode 0600, created exclusively (two deploys racing end up with the same key)."""
    target = Path(os.path.expanduser(path))
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(MUNGE_KEY_BYTES))
    key = target.read_bytes()
    if not 32 <= len(key) <= 1024:  # munged's limits (munge 0.5.15)
        raise SlurmPlanError(f"{target}: a munge key has 32..1024 bytes, this one {len(key)}")
    return key
