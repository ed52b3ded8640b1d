"""What went wrong with a training run: NaN/Inf, out of memory, GPU faults, device access, a killed process.

Inputs (all optional, each read by the watcher from the job folder on the host):
  points         trainer_log.jsonl as radeonlab.jobs.host.metrics LogPoints: the loss per logging step
  (NaN/Infinity literals
                 appear because the rendered config turns logging_nan_inf_filter off).
  log_text       train.log (stdout+stderr of llamafactory-cli): error messages, and transformers' console
                 log dicts `{'loss': 0.0, 'grad_norm': nan, ...}` -- the only LIVE source of grad_norm.
  trainer_state  trainer_state.json (top level at the end, or checkpoint-N/ while running): its
                 log_history has grad_norm with the step.
  exit_code      from state.json (137 = SIGKILL: no traceback, possibly the kernel OOM killer).

grad_norm is not in trainer_log.jsonl. A NaN that the filter would hide shows as loss 0.0 with grad_norm NaN
(recorded: docs/notes/llamafactory-cpu-recipe.md section 6; console form in
tests/fixtures/llamafactory/console_nan_grad_norm_then_zero_loss_ascend-npu_EXCERPT.txt), so the
watcher reads the loss from trainer_log.jsonl and grad_norm from train.log's console dicts (live) and from
trainer_state.json (at checkpoints and at the end).

Error patterns are data (PATTERNS, one table); table order is priority, so a /dev/kfd access failure
("Cannot allocate memory") is never read as an out-of-memory error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from radeonlab.contract.records import GPU_ENV_FILE, GPU_GROUPS
from radeonlab.jobs.host.metrics import LogPoint

ACCESS_GROUPS = " and ".join(GPU_GROUPS)
KILL_EXIT_CODES = (137, -9)  # 128 + SIGKILL as the launcher records it; -9 as Popen reports it


class Kind(str, Enum):  # noqa: UP042 - compares equal to its string, like JobState
    """What kind of failure a Diagnosis names."""

    NAN = "nan"
    OOM = "oom"
    GPU_FAULT = "gpu_fault"
    PROVISIONING = "provisioning"  # the GPU device cannot be opened: groups, driver, container devices
    KILLED = "killed"
    GPU_RESET = "gpu_reset"  # the GPU faulted or reset under training (ROCm/TheRock#7699)
    OTHER = "other"


# Kinds an automatic remedy may act on (radeonlab.jobs.host.remedies); the others need a person.
RETRYABLE = frozenset({Kind.NAN, Kind.OOM, Kind.KILLED, Kind.GPU_RESET})

_GPU_SETTINGS = (
    f"check HSA_OVERRIDE_GFX_VERSION and PYTORCH_ROCM_ARCH in {GPU_ENV_FILE} on the host (written by the "
    "gpu_env role from the detected card: fix the card's entry or the role's settings and re-run the "
    "deploy); also check that the installed torch was built for this card's gfx target. Not retried: the "
    "same settings fail the same way"
)
_ACCESS = (
    f"the training user cannot use the GPU device nodes: it must be in the {ACCESS_GROUPS} groups "
    "(the access role adds it; log in again afterwards), and inside a container /dev/kfd and /dev/dri must "
    "be passed through. Not retried"
)
_KFD_MISSING = (
    "/dev/kfd does not exist: the amdgpu kernel driver is not loaded (install amdgpu-dkms with the rocm "
    "role, then reboot) or a container was started without --device=/dev/kfd. Not retried"
)
_KFD_NO_INIT = (
    "the kernel driver could not set the GPU up for compute (`Cannot allocate memory` from /dev/kfd is not "
    "an out-of-memory error): the card is most likely unsupported by this ROCm/driver; see "
    "`dmesg | grep -i kfd`. Not retried"
)
_OOM_GPU = (
    "the GPU ran out of memory: the OOM remedy lowers per_device_train_batch_size (raising "
    "gradient_accumulation_steps to keep the effective batch), then cutoff_len"
)
_KILLED = (
    "killed by SIGKILL: most likely the kernel OOM killer (host RAM), see `journalctl -k | grep -i "
    "'killed process'` on the host; the remedy resumes once from the newest complete checkpoint, then lowers "
    "the batch like the OOM remedy"
)
_GPU_RESET = (
    "the GPU faulted or was reset during training: on Radeon RX 9070 / AI PRO R9700 under ROCm 10.0 a known "
    "issue with hipBLASLt (ROCm/TheRock#7699, AMD's workaround TORCH_BLAS_PREFER_HIPBLASLT=0, slower); the "
    "remedy retries once from the newest checkpoint with it. Check `dmesg | grep -i amdgpu` for the reset"
)
_OOM_HOST = (
    "the host ran out of RAM (CPU allocator): lower per_device_train_batch_size / cutoff_len, or free memory "
    "on the host"
)


@dataclass(frozen=True)
class Pattern:
    """One recognisable failure message."""

    kind: Kind
    name: str
    regex: re.Pattern[str]
    advice: str


def _p(kind: Kind, name: str, regex: str, advice: str) -> Pattern:
    return Pattern(kind, name, re.compile(regex, re.IGNORECASE), advice)


_KFD = r"Unable to open /dev/kfd read-write: "  # libhsakmt's message, printed by rocminfo and by HIP
_OOM = r"HIP out of memory|hipErrorOutOfMemory|torch\.(cuda\.)?OutOfMemoryError|CUDA out of memory"

# Priority order: the first pattern matching any line wins.
PATTERNS: tuple[Pattern, ...] = (
    # device access / provisioning
    _p(Kind.PROVISIONING, "kfd_permission", _KFD + "(Permission denied|Invalid argument)", _ACCESS),
    _p(Kind.PROVISIONING, "kfd_missing", _KFD + "No such file or directory", _KFD_MISSING),
    _p(Kind.PROVISIONING, "kfd_no_memory", _KFD + "Cannot allocate memory", _KFD_NO_INIT),
    _p(Kind.PROVISIONING, "not_in_group", r'is not member of "\w+" group', _ACCESS),
    # GPU code for the wrong target: override / arch list
    _p(
        Kind.GPU_FAULT,
        "no_binary_for_gpu",
        r"hipErrorNoBinaryForGpu|Unable to find code object",
        _GPU_SETTINGS,
    ),
    _p(Kind.GPU_FAULT, "invalid_device_function", r"invalid device function", _GPU_SETTINGS),
    _p(Kind.GPU_FAULT, "out_of_registers", r"HSA_STATUS_ERROR_OUT_OF_REGISTERS", _GPU_SETTINGS),
    _p(Kind.GPU_FAULT, "illegal_instruction", r"HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION", _GPU_SETTINGS),
    # a GPU page fault or reset under training (ROCm/TheRock#7699; fixture therock7699_..._EXCERPT.txt)
    _p(
        Kind.GPU_RESET,
        "gpu_reset",
        r"Memory access fault by GPU node-\d+|HSA_STATUS_ERROR_(?:EXCEPTION|MEMORY_APERTURE_VIOLATION)"
        r"|amdgpu.*GPU reset",
        _GPU_RESET,
    ),
    # out of memory (GPU, then host RAM)
    _p(Kind.OOM, "hip_oom", _OOM, _OOM_GPU),
    _p(Kind.OOM, "cpu_alloc", r"DefaultCPUAllocator: can't allocate memory", _OOM_HOST),
    # a native crash: with ROCm most often code the card cannot run (unsupported APU, wrong override)
    _p(
        Kind.GPU_FAULT,
        "segfault",
        r"^Segmentation fault",
        "a native crash (segmentation fault); " + _GPU_SETTINGS,
    ),
)

_CONSOLE_LOSS = re.compile(r"'loss': (?P<loss>[-+\w.]+)")
_CONSOLE_GRAD = re.compile(r"'grad_norm': (?P<grad>[-+\w.]+)")
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception)\b|error:)", re.IGNORECASE)
_SIZE = r"(?P<{}>[\d.]+) (?P<{}_unit>bytes|B|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_OOM_FIELDS = {
    "tried": re.compile(r"[Tt]ried to allocate " + _SIZE.format("n", "n")),
    "total": re.compile(r"total capacity of " + _SIZE.format("n", "n")),
    "free": re.compile(r"of which " + _SIZE.format("n", "n") + " is free"),
    "allocated": re.compile(r"memory " + _SIZE.format("n", "n") + " is allocated by PyTorch"),
}


@dataclass(frozen=True)
class Diagnosis:
    """One failure, with the line that shows it and what to do."""

    kind: Kind
    evidence: str  # the log line (or a description of the log point) that shows it
    advice: str
    step: int | None = None  # the first bad step, when known
    safe_step: int | None = None  # NaN: the newest logged step before it that was still finite
    pattern: str = ""  # PATTERNS name, or "loss"/"grad_norm"/"exit_code"
    memory: dict[str, int] = field(default_factory=dict)  # OOM: bytes parsed from the message

    @property
    def retryable(self) -> bool:
        """True when an automatic remedy may act on it (radeonlab.jobs.host.remedies.next_attempt)."""
        return self.kind in RETRYABLE

    def summary(self) -> str:
        """One line for state.json / the CLI."""
        where = f" at step {self.step}" if self.step is not None else ""
        return f"{self.kind.value}{where}: {self.evidence[:240]}"


def _lines(text: str) -> list[str]:
    # tqdm progress bars redraw with \r: split on it too so each log dict / message is its own line
    return [ln.strip() for ln in re.split(r"[\r\n]+", text) if ln.strip()]


def _memory(line: str) -> dict[str, int]:
    """Sizes named in an OOM message, in bytes (HIP: tried/total/free/allocated; CPU: tried)."""
    out: dict[str, int] = {}
    for key, rx in _OOM_FIELDS.items():
        m = rx.search(line)
        if m:
            out[key] = int(float(m["n"]) * _UNITS[m["n_unit"]])
    return out


def scan_text(text: str) -> Diagnosis | None:
    """The highest-priority PATTERNS match in a log or tool output; None when nothing matches."""
    lines = _lines(text)
    for pat in PATTERNS:
        for line in lines:
            if pat.regex.search(line):
                return Diagnosis(
                    kind=pat.kind,
                    evidence=line,
                    advice=pat.advice,
                    pattern=pat.name,
                    memory=_memory(line) if pat.kind is Kind.OOM else {},
                )
    return None


def _float(text: str) -> float | None:
    try:
        return float(text)  # accepts nan, inf, -inf, NaN, Infinity
    except ValueError:
        return None


def _bad(value: float | None) -> bool:
    return value is not None and not math.isfinite(value)


def console_nan(text: str) -> Diagnosis | None:
    """NaN/Inf in transformers' console log dicts (`{'loss': ..., 'grad_norm': nan, ...}`): no step there."""
    for line in _lines(text):
        if not line.startswith("{"):
            continue
        loss = _CONSOLE_LOSS.search(line)
        grad = _CONSOLE_GRAD.search(line)
        lv = _float(loss["loss"]) if loss else None
        gv = _float(grad["grad"]) if grad else None
        if _bad(lv) or _bad(gv):
            return Diagnosis(
                kind=Kind.NAN,
                evidence=line,
                advice=NAN_ADVICE,
                pattern="grad_norm" if _bad(gv) and not _bad(lv) else "loss",
            )
    return None


NAN_ADVICE = (
    "the loss or gradient norm became NaN/Inf: the NaN remedy resumes from the last checkpoint before it "
    "with flash_attn disabled, then a lower learning_rate, then optim adamw_torch"
)


@dataclass(frozen=True)
class _Bad:
    step: int
    safe_step: int | None
    which: str  # "loss" | "grad_norm"
    value: float


def _first_bad(entries: Iterable[tuple[int, float | None, float | None]]) -> _Bad | None:
    """The first non-finite (step, loss, grad_norm) entry and the newest all-finite step before it."""
    rows = sorted(entries, key=lambda e: e[0])
    for step, loss, grad in rows:
        if _bad(loss) or _bad(grad):
            which, bad = ("loss", loss) if _bad(loss) else ("grad_norm", grad)
            good = [s for s, lv, gv in rows if s < step and lv is not None and not _bad(lv) and not _bad(gv)]
            return _Bad(step, max(good) if good else None, which, float(bad))  # type: ignore[arg-type]
    return None


def nan_diagnosis(
    points: Sequence[LogPoint] | None = None, trainer_state: Mapping[str, Any] | None = None
) -> Diagnosis | None:
    """NaN/Inf from trainer_log.jsonl (loss) and trainer_state.json log_history (loss and grad_norm)."""
    entries: list[tuple[int, float | None, float | None]] = [
        (p.step, p.loss, None) for p in points or () if p.loss is not None
    ]
    for row in (trainer_state or {}).get("log_history") or []:
        if (
            isinstance(row, dict)
            and isinstance(row.get("step"), int)
            and ("loss" in row or "grad_norm" in row)
        ):
            entries.append((row["step"], _num(row.get("loss")), _num(row.get("grad_norm"))))
    bad = _first_bad(entries)
    if bad is None:
        return None
    return Diagnosis(
        kind=Kind.NAN,
        evidence=f"step {bad.step}: {bad.which} {bad.value}",
        advice=NAN_ADVICE,
        step=bad.step,
        safe_step=bad.safe_step,
        pattern=bad.which,
    )


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _last_error_line(text: str) -> str | None:
    for line in reversed(_lines(text)):
        if _ERROR_LINE.search(line):
            return line
    return None


def _has_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" in text


def last_step(points: Sequence[LogPoint] | None) -> int | None:
    """The newest logged step (where a crash happened, at the resolution of logging_steps)."""
    return max((p.step for p in points), default=None) if points else None


def diagnose(
    *,
    points: Sequence[LogPoint] | None = None,
    log_text: str = "",
    trainer_state: Mapping[str, Any] | None = None,
    exit_code: int | None = None,
) -> Diagnosis | None:
    """The one diagnosis for a run (None: nothing wrong seen).

    Order: device access and GPU faults (retrying cannot help) > NaN (the earliest damage; LLaMA-Factory
    keeps going and exits 0) > out of memory > killed (exit 137 with no traceback) > other (a non-zero exit
    with its last error line). Call it while the run is going (exit_code None) and once when it ended.
    """
    text_hit = scan_text(log_text) if log_text else None
    if text_hit and text_hit.kind in (Kind.PROVISIONING, Kind.GPU_FAULT):
        return text_hit
    nan = nan_diagnosis(points, trainer_state)
    if nan is None and log_text:
        console = console_nan(log_text)
        if console is not None:  # no step in a console dict: the newest logged step is the best bound
            nan = replace(console, step=last_step(points))
    if nan is not None:
        return nan
    if text_hit is not None:  # OOM
        return replace(text_hit, step=last_step(points))
    if exit_code in KILL_EXIT_CODES and not _has_traceback(log_text):
        return Diagnosis(
            kind=Kind.KILLED,
            evidence=f"exit code {exit_code} (SIGKILL) and no traceback in train.log",
            advice=_KILLED,
            step=last_step(points),
            pattern="exit_code",
        )
    if exit_code not in (None, 0):
        line = _last_error_line(log_text) or f"exit code {exit_code}"
        return Diagnosis(
            kind=Kind.OTHER,
            evidence=line,
            advice="not a failure radeonlab can remedy: read train.log (radeonlab logs <job>)",
            step=last_step(points),
            pattern="exit_code",
        )
    return None
