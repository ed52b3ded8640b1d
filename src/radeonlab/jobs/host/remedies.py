"""Automatic remedies: what the next attempt of a failed job changes, and where it resumes from.

The ladders are data (LADDERS, steps in STEPS): the one registry. The spec's switches (spec/block.py
REMEDY_NAMES), `check`'s step names and the guide's tables (docs/guide/remedies.md, checked by
tests/unit/test_docs_remedies.py) are read from it. A step looks at the config that just ran and returns the
keys it changes, or None when it cannot apply (the batch is already 1, the learning rate already low):

  nan:    flash_attn_disabled -> lower_lr (5.0e-5 if higher) -> adamw_torch -> give up with a report
  oom:    halve_batch (repeated until 1; gradient_accumulation_steps grows so the effective batch stays the
          same) -> cutoff_1024 (if above) -> give up with a report naming the VRAM seen
  killed: resume (once, unchanged: a SIGKILL may have been a one-off) -> then the oom ladder, because a
          repeated SIGKILL is most likely the kernel OOM killer. Governed by the spec's `oom` switch.
  gpu_reset: hipblaslt_off (once: resume with TORCH_BLAS_PREFER_HIPBLASLT=0, ROCm/TheRock#7699) -> give up.
          The change is an environment variable: its key starts with ENV_PREFIX ("env:"), and the supervisor
          takes it out of the config into the training process's environment (env_changes()).

The spec's `radeonlab: remedies:` (radeonlab.contract.remedy.Remedy) turns a ladder off (`gpu_reset: off`)
or replaces its steps (`nan: [adamw_torch]`); any STEPS name may be used, e.g. the extra `halve_cutoff`.

Resuming: LLaMA-Factory resumes the optimizer and LR scheduler state from checkpoint-N/optimizer.pt and
scheduler.pt, and those restore the OLD learning rate and optimizer settings (checked with torch 2.13:
a LambdaLR's state_dict carries base_lrs, AdamW's param_groups carry lr and fused). So steps that change the
learning rate or the optimizer are not `resumable`: their attempt starts fresh in an empty output folder.
Steps that change the model load or the batch shape resume from the checkpoint chosen by
resume_checkpoint(): for NaN, the newest complete one written before the first NaN step; for OOM/killed, the
newest complete one. halve_batch keeps the number of optimizer steps per epoch, so the resumed run's step
accounting matches (HF's Trainer skips global_step x gradient_accumulation_steps batches).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from radeonlab.contract.records import Attempt as AttemptRecord
from radeonlab.contract.remedy import Remedy
from radeonlab.jobs.host.health import Diagnosis, Kind

# The values the steps move to, and the limits: the one place they are set.
SETTINGS: dict[str, Any] = {
    "nan_flash_attn": "disabled",
    "nan_learning_rate": 5.0e-5,
    "nan_optim": "adamw_torch",
    "oom_min_batch": 1,
    "oom_cutoff_len": 1024,
    "halve_cutoff_floor": 256,  # the extra halve_cutoff step stops here
    "max_attempts": 10,  # a job never runs more often than this, whatever the ladders say
    "gpu_reset_env": {"TORCH_BLAS_PREFER_HIPBLASLT": "0"},  # AMD's workaround, ROCm/TheRock#7699
}
# A change whose key starts with this is an environment variable of the training process, not a config key:
# the supervisor moves it from the attempt's overrides into the process environment (and out of config.yaml).
ENV_PREFIX = "env:"
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
CHECKPOINT_DONE_FILE = "trainer_state.json"  # written near the end of HF's _save_checkpoint


def value(config: Mapping[str, Any], key: str) -> Any:
    """The value LLaMA-Factory will use. Callers pass the config with LLaMA-Factory's defaults for the keys
    the steps read (STEP_KEYS) underneath: the laptop records them in job.json `lf_defaults` from the pinned
    release's key list, so the host needs no copy of that list."""
    return config.get(key)


Changes = dict[str, tuple[Any, Any]]  # key -> (old, new)


@dataclass(frozen=True)
class Step:
    """One rung of a ladder."""

    name: str
    keys: tuple[str, ...]  # the config keys it may change
    does: str  # what it changes, for reports and `radeonlab check`
    apply: Callable[[Mapping[str, Any]], Changes | None]  # None: cannot apply; {}: applies without changes
    resumable: bool  # True when the change survives resuming from a checkpoint


def _set(config: Mapping[str, Any], key: str, new: Any) -> Changes | None:
    old = value(config, key)
    return None if old == new else {key: (old, new)}


def _lower_lr(config: Mapping[str, Any]) -> Changes | None:
    old, new = value(config, "learning_rate"), SETTINGS["nan_learning_rate"]
    return {"learning_rate": (old, new)} if float(old) > new else None


def _largest_half_divisor(n: int) -> int:
    """The largest divisor of n that is at most n/2 (8 -> 4, 6 -> 3, 5 -> 1): the effective batch stays."""
    return max(d for d in range(1, n // 2 + 1) if n % d == 0)


def _halve_batch(config: Mapping[str, Any]) -> Changes | None:
    batch = int(value(config, "per_device_train_batch_size"))
    accum = int(value(config, "gradient_accumulation_steps"))
    if batch <= SETTINGS["oom_min_batch"]:
        return None
    new = max(_largest_half_divisor(batch), int(SETTINGS["oom_min_batch"]))
    return {
        "per_device_train_batch_size": (batch, new),
        "gradient_accumulation_steps": (accum, accum * batch // new),
    }


def _cutoff_1024(config: Mapping[str, Any]) -> Changes | None:
    old, new = int(value(config, "cutoff_len")), int(SETTINGS["oom_cutoff_len"])
    return {"cutoff_len": (old, new)} if old > new else None


def _env(config: Mapping[str, Any], env: Mapping[str, str]) -> Changes | None:
    """Set environment variables for the next attempt (keys ENV_PREFIX + name); None once they are set."""
    changes = {f"{ENV_PREFIX}{k}": (config.get(f"{ENV_PREFIX}{k}"), v) for k, v in env.items()}
    return {k: c for k, c in changes.items() if c[0] != c[1]} or None


def env_changes(overrides: Mapping[str, Any]) -> dict[str, str]:
    """The environment variables an attempt's overrides set (for the supervisor): {"NAME": "value"}."""
    return {k.removeprefix(ENV_PREFIX): str(v) for k, v in overrides.items() if k.startswith(ENV_PREFIX)}


def _halve_cutoff(config: Mapping[str, Any]) -> Changes | None:
    old, floor = int(value(config, "cutoff_len")), int(SETTINGS["halve_cutoff_floor"])
    return {"cutoff_len": (old, max(old // 2, floor))} if old > floor else None


STEPS: dict[str, Step] = {
    s.name: s
    for s in (
        Step(
            "flash_attn_disabled",
            ("flash_attn",),
            f"flash_attn: {SETTINGS['nan_flash_attn']} (eager attention)",
            lambda c: _set(c, "flash_attn", SETTINGS["nan_flash_attn"]),
            resumable=True,
        ),
        Step(
            "lower_lr",
            ("learning_rate",),
            f"learning_rate: {SETTINGS['nan_learning_rate']} (if higher)",
            _lower_lr,
            resumable=False,
        ),
        Step(
            "adamw_torch",
            ("optim",),
            f"optim: {SETTINGS['nan_optim']}",
            lambda c: _set(c, "optim", SETTINGS["nan_optim"]),
            resumable=False,
        ),
        Step(
            "halve_batch",
            ("per_device_train_batch_size", "gradient_accumulation_steps"),
            "per_device_train_batch_size halved, gradient_accumulation_steps raised: same effective batch",
            _halve_batch,
            resumable=True,
        ),
        Step(
            "cutoff_1024",
            ("cutoff_len",),
            f"cutoff_len: {SETTINGS['oom_cutoff_len']} (if above)",
            _cutoff_1024,
            resumable=True,
        ),
        Step(
            "halve_cutoff",
            ("cutoff_len",),
            f"cutoff_len halved (not below {SETTINGS['halve_cutoff_floor']})",
            _halve_cutoff,
            resumable=True,
        ),
        Step("resume", (), "resume from the newest complete checkpoint, nothing changed", lambda c: {}, True),
        Step(
            "hipblaslt_off",
            tuple(f"{ENV_PREFIX}{k}" for k in SETTINGS["gpu_reset_env"]),
            "environment TORCH_BLAS_PREFER_HIPBLASLT=0 (hipBLASLt off: AMD's workaround for TheRock#7699)",
            lambda c: _env(c, SETTINGS["gpu_reset_env"]),
            resumable=True,
        ),
    )
}
STEP_KEYS: tuple[str, ...] = tuple(sorted({k for s in STEPS.values() for k in s.keys}))
# Repeating steps (halve_batch) apply again while they change something; a step without changes runs once.
LADDERS: dict[str, tuple[str, ...]] = {
    "nan": ("flash_attn_disabled", "lower_lr", "adamw_torch"),
    "oom": ("halve_batch", "cutoff_1024"),
    "gpu_reset": ("hipblaslt_off",),  # once: a second reset with hipBLASLt off is not this issue
}
LADDER_OF: dict[Kind, str] = {
    Kind.NAN: "nan",
    Kind.OOM: "oom",
    Kind.KILLED: "oom",
    Kind.GPU_RESET: "gpu_reset",
}
KILLED_FIRST = ("resume",)  # put before the oom ladder's steps for a killed run


@dataclass(frozen=True)
class Attempt:
    """The plan for the next attempt: what to change (for job.json) and where to resume from.

    The runner (1) moves output/ aside if fresh_output, else deletes/moves `discard_checkpoints` (written at
    or after the fault: LLaMA-Factory would otherwise auto-resume from the newest, and a later remedy could
    pick one), (2) writes `overrides` into config.yaml (+ resume_from_checkpoint when set), (3) appends
    record(n, created_at) to job.json's attempts, (4) launches.
    """

    ladder: str
    step: str
    changes: Changes
    resume_from_checkpoint: str | None  # as named in the listing given to next_attempt (relative or absolute)
    fresh_output: bool
    discard_checkpoints: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def overrides(self) -> dict[str, Any]:
        """key -> new value, to merge into the config."""
        return {k: new for k, (_, new) in self.changes.items()}

    def record(self, n: int, created_at: str) -> AttemptRecord:
        """The job.json attempt entry (radeonlab.contract.records.Attempt)."""
        return AttemptRecord(
            n=n,
            created_at=created_at,
            overrides=self.overrides,  # env: keys stay here too: the ladder reads them back (_env)
            env=env_changes(self.overrides),
            resume_from_checkpoint=self.resume_from_checkpoint,
            note=self.note,
            ladder=self.ladder,
            step=self.step,
        )


@dataclass(frozen=True)
class GiveUp:
    """No remedy left (or none allowed): the job stays failed with this report."""

    reason: str  # one line
    report: str  # several lines: the diagnosis, what was tried, the values now, VRAM seen
    ladder: str | None = None


def effective_config(config: Mapping[str, Any], history: Sequence[AttemptRecord]) -> dict[str, Any]:
    """The config with every attempt's overrides applied in order. Overrides hold absolute new values, so
    applying them to a config that already has them changes nothing: pass the base or the last config."""
    out = dict(config)
    for attempt in history:
        out.update(attempt.overrides or {})
    return out


def tried_steps(history: Sequence[AttemptRecord]) -> list[tuple[str, str]]:
    """(ladder, step) of each remedy attempt in job.json (AttemptRecord.remedy())."""
    return [r for r in (a.remedy() for a in history) if r is not None]


def unknown_steps(remedies: Mapping[str, Remedy]) -> list[str]:
    """Step names in a spec's remedies that STEPS does not define (for `radeonlab check`)."""
    return [f"{ladder}: {s}" for ladder, r in remedies.items() for s in r.steps if s not in STEPS]


def ladder_steps(kind: Kind, remedies: Mapping[str, Remedy]) -> tuple[str, ...]:
    """The steps tried for a diagnosis kind, after the spec's replacement (killed: resume first)."""
    ladder = LADDER_OF[kind]
    spec = remedies.get(ladder)
    steps = tuple(spec.steps) if spec is not None and spec.steps else LADDERS[ladder]
    return (*KILLED_FIRST, *steps) if kind is Kind.KILLED else steps


# ------------------------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class _Checkpoint:
    step: int
    path: str
    complete: bool


def checkpoints(listing: Iterable[str]) -> list[_Checkpoint]:
    """checkpoint-N folders named in an output folder listing (paths, relative or absolute, of folders and
    of files inside them), oldest first; complete = its trainer_state.json is listed."""
    found: dict[str, _Checkpoint] = {}
    for entry in listing:
        parts = entry.rstrip("/").split("/")
        for i, part in enumerate(parts):
            m = CHECKPOINT_DIR.match(part)
            if m:
                path = "/".join(parts[: i + 1])
                done = parts[i + 1 : i + 2] == [CHECKPOINT_DONE_FILE]
                old = found.get(path)
                found[path] = _Checkpoint(int(m[1]), path, done or bool(old and old.complete))
                break
    return sorted(found.values(), key=lambda c: c.step)


def resume_checkpoint(
    output_dir_listing: Iterable[str], fault_step: int | None, *, safe_step: int | None = None
) -> str | None:
    """The checkpoint to resume from: the newest complete checkpoint-N with N < fault_step (the first NaN
    step) and, when known, N <= safe_step (the newest step still logged finite: a NaN logged at step 110
    may have started at step 101). fault_step None (OOM, killed): the newest complete checkpoint."""
    ok = [
        c
        for c in checkpoints(output_dir_listing)
        if c.complete
        and (fault_step is None or c.step < fault_step)
        and (safe_step is None or c.step <= safe_step)
    ]
    return ok[-1].path if ok else None


def output_listing(output: str) -> list[str]:
    """Paths relative to the output folder, two levels deep (what resume_checkpoint() reads)."""
    out: list[str] = []
    if not os.path.isdir(output):
        return out
    for name in sorted(os.listdir(output)):
        out.append(name)
        sub = os.path.join(output, name)
        if os.path.isdir(sub):
            out += [f"{name}/{inner}" for inner in sorted(os.listdir(sub))]
    return out


# ------------------------------------------------------------------------------------------- the decision


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _vram_seen(diagnosis: Diagnosis, vram_total: int | None) -> str:
    mem = diagnosis.memory
    parts = []
    if "total" in mem:
        parts.append(f"total capacity {_fmt_bytes(mem['total'])}")
    elif vram_total:
        parts.append(f"card total {_fmt_bytes(vram_total)} (host record)")
    if "free" in mem:
        parts.append(f"{_fmt_bytes(mem['free'])} free")
    if "allocated" in mem:
        parts.append(f"{_fmt_bytes(mem['allocated'])} allocated by PyTorch")
    if "tried" in mem:
        parts.append(f"tried to allocate {_fmt_bytes(mem['tried'])}")
    return ", ".join(parts) if parts else "no VRAM figure in the log"


def _give_up(
    reason: str,
    diagnosis: Diagnosis,
    history: Sequence[AttemptRecord],
    config: Mapping[str, Any],
    ladder: str | None,
    vram_total: int | None,
    steps: Sequence[str] = (),
) -> GiveUp:
    lines = [f"gave up: {reason}", f"diagnosis: {diagnosis.summary()}", f"advice: {diagnosis.advice}"]
    tried = [f"  attempt {a.n}: {a.note}" for a in history if a.remedy()]
    lines += ["remedies tried:", *tried] if tried else ["remedies tried: none"]
    keys = sorted({k for name in steps if name in STEPS for k in STEPS[name].keys})
    if keys:
        lines.append("values now: " + ", ".join(f"{k}={value(config, k)}" for k in keys))
    if diagnosis.kind in (Kind.OOM, Kind.KILLED):
        lines.append(f"VRAM seen: {_vram_seen(diagnosis, vram_total)}")
    return GiveUp(reason=reason, report="\n".join(lines), ladder=ladder)


def next_attempt(
    config: Mapping[str, Any],
    diagnosis: Diagnosis,
    history: Sequence[AttemptRecord],
    spec_remedies: Mapping[str, Remedy],
    *,
    checkpoint_listing: Iterable[str] = (),
    vram_total: int | None = None,
) -> Attempt | GiveUp:
    """The next attempt for a failed (or stopped) run, or why there is none.

    config: the rendered config of the first attempt (or of the one that failed: see effective_config).
    history: job.json's attempts so far (the first run included). spec_remedies: spec.radeonlab.remedies.
    checkpoint_listing: the output folder listing (output_listing); empty means there is no checkpoint.
    vram_total: the card's VRAM from the host record, named in an OOM give-up report when the log has none.
    """
    if not diagnosis.retryable:
        reason = f"no automatic remedy for {diagnosis.kind.value}"
        return _give_up(reason, diagnosis, history, config, None, vram_total)
    ladder = LADDER_OF[diagnosis.kind]
    current = effective_config(config, history)
    steps = ladder_steps(diagnosis.kind, spec_remedies)
    remedy = spec_remedies.get(ladder)
    reason = ""
    if remedy is not None and not remedy.enabled:
        reason = f"the spec turns the {ladder} remedy off"
    elif len(history) >= SETTINGS["max_attempts"]:
        reason = f"{len(history)} attempts (the limit is {SETTINGS['max_attempts']})"
    elif unknown := [s for s in steps if s not in STEPS]:
        reason = f"unknown remedy step(s) {unknown} (known: {', '.join(STEPS)})"
    if reason:
        return _give_up(reason, diagnosis, history, current, ladder, vram_total, steps)
    done = {step for _, step in tried_steps(history)}
    for name in steps:
        step = STEPS[name]
        try:
            changes = step.apply(current)
        except (TypeError, ValueError):  # a value it reads is unknown (a job.json without lf_defaults)
            continue
        if changes is None or (not changes and name in done):
            continue
        return _plan(ladder, step, changes, diagnosis, list(checkpoint_listing))
    reason = f"every step of the {ladder} ladder has been applied ({', '.join(steps)})"
    return _give_up(reason, diagnosis, history, current, ladder, vram_total, steps)


def _plan(ladder: str, step: Step, changes: Changes, diagnosis: Diagnosis, listing: list[str]) -> Attempt:
    resume = None
    if step.resumable:
        fault = diagnosis.step if diagnosis.kind is Kind.NAN else None
        safe = diagnosis.safe_step if diagnosis.kind is Kind.NAN else None
        resume = resume_checkpoint(listing, fault, safe_step=safe)
    resume_step = next((c.step for c in checkpoints(listing) if c.path == resume), None)
    discard = [c.path for c in checkpoints(listing) if resume_step is not None and c.step > resume_step]
    said = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changes.items()) or "no change"
    where = f"resume from {resume}" if resume else "fresh start (empty output folder)"
    if not step.resumable:
        where += ": the checkpoint's optimizer/scheduler state would bring the old value back"
    note = f"remedy {ladder}/{step.name}: {diagnosis.summary()[:160]}; {said}; {where}"
    return Attempt(
        ladder=ladder,
        step=step.name,
        changes=changes,
        resume_from_checkpoint=resume,
        fresh_output=resume is None,
        discard_checkpoints=discard,
        note=note,
    )
