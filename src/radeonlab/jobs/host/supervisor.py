"""Host-side supervisor of one job: runs its attempts, watches their health, remedies what it can.

Runs inside the detached launcher (jobs/host/launcher.py) once the job holds its GPU, on the host's SYSTEM
python3 (3.10 on Ubuntu 22.04, 3.11 on Debian 12), so everything here works with the laptop asleep or gone.
It imports only the standard library and the pure modules shipped beside it in <job>/host
(jobs/apply/bundle.py): radeonlab.jobs.host.health, radeonlab.jobs.host.remedies,
radeonlab.jobs.host.metrics, radeonlab.contract.records.

One attempt: start llamafactory-cli, tail output/trainer_log.jsonl (loss) and this attempt's part of
train.log (transformers' console dicts carry grad_norm); on NaN/Inf stop the run at once (LLaMA-Factory
would carry on and exit 0). When it ends: health.diagnose. Retryable -> remedies.next_attempt -> move the
output aside (fresh start) or drop checkpoints after the resume point, rewrite config.yaml with the
overrides (+ resume_from_checkpoint), append the attempt with its changed keys to job.json, run again.
No remedy left -> failed with the report; a GPU fault or device problem -> failed with the advice.

The config of the first attempt comes from config.json (the host has no YAML parser); config.yaml is
rewritten from it plus every attempt's overrides, with flat `key: value` lines any YAML loader reads.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import time
from dataclasses import replace
from typing import Any

from radeonlab.contract.jobdir import FILES, read_json, start_time, write_json_atomic
from radeonlab.contract.parts import Result
from radeonlab.contract.records import Attempt, JobRecord
from radeonlab.contract.remedy import Remedy
from radeonlab.contract.state import AttemptState, EndReason, JobState
from radeonlab.jobs.host import health, metrics, notify_messenger, remedies, runtime
from radeonlab.jobs.host.process import (
    NO_ADAPTER,
    StateFile,
    file_size,
    has_result,
    now,
    read_from,
    start_training,
    stop_group,
)
from radeonlab.jobs.host.runtime import Runtime

SUPERVISE: dict[str, float] = {
    "poll_s": 0.25,  # how often a running attempt's logs are read (a local file tail: cheap)
    "stop_grace_s": 10.0,  # a NaN run gets SIGTERM, then SIGKILL after this long
    "log_tail_bytes": 1 << 20,  # how much of an attempt's train.log the final diagnosis reads
}
OUTPUT, TRAINER_LOG, TRAINER_STATE = "output", "trainer_log.jsonl", "trainer_state.json"
# Per-job caches that are not models (the shared model cache is the host's: the job's env sets it).
CACHE_ENV = {"HF_DATASETS_CACHE": "cache/datasets", "MPLCONFIGDIR": "cache/mpl", "HF_HOME": "cache/hf"}
CAUSES = {
    "nan": "NaN",
    "oom": "out of memory",
    "killed": "killed",
    "gpu_fault": "GPU fault",
    "gpu_reset": "GPU reset",
}


def yaml_scalar(value: Any) -> str:
    """A value as a YAML flow scalar that PyYAML and OmegaConf read back as the same value."""
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # YAML 1.1 floats need a dot: 1e+30 -> 1.0e+30
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp}"
        return text
    return json.dumps(value)  # str (double-quoted), int, bool, null, and flow-style lists/mappings


def config_yaml(config: dict, header: list[str]) -> str:
    """The config as YAML text: the comment header, then one `key: value` line per key."""
    lines = [f"# {h}" for h in header] + [f"{k}: {yaml_scalar(v)}" for k, v in config.items()]
    return "\n".join(lines) + "\n"


def cause_of(diagnosis: health.Diagnosis) -> str:
    """Short words for why an attempt was made: "NaN at step 3", "out of memory"."""
    what = CAUSES.get(diagnosis.kind.value, diagnosis.kind.value)
    return what + (f" at step {diagnosis.step}" if diagnosis.step is not None else "")


class Supervisor:
    """One job's attempts, read from and recorded in its job.json."""

    def __init__(self, job_dir: str, argv: list, env: dict, fds: list, states: StateFile, where: Runtime):
        self.dir, self.argv, self.env, self.lock_fds, self.states = job_dir, argv, env, fds, states
        self.runtime = where  # the training stack's: the venv, or the host's image (this stays on the host)
        self.job = JobRecord.from_dict(read_json(self.path(FILES["job"])))
        self.output = self.path(OUTPUT)
        self.child: subprocess.Popen | None = None
        self.signalled: int | None = None
        # the messenger takes the URLs out of the training environment
        self.notifier = notify_messenger.Notifier.for_job(
            job_dir, self.job, self.env, self.runtime.program("python"), self.in_runtime
        )

    def path(self, *names: str) -> str:
        return os.path.join(self.dir, *names)

    def in_runtime(self, argv: list[str], env: dict[str, str], what: str) -> tuple[list[str], dict[str, str]]:
        """(argv, env) running `argv` in the host's runtime; its container: radeonlab-<job>-<what>."""
        name = runtime.container_name(self.job.id, what)
        return self.runtime.command_for(argv, env, name=name, workdir=self.dir)

    # ------------------------------------------------------------------------------------------- records

    def save_job(self) -> None:
        """job.json: the laptop's record plus the attempts as they happen (unknown keys kept)."""
        write_json_atomic(self.path(FILES["job"]), self.job.to_dict())

    def finish(
        self, end: EndReason, reason: str | None = None, exit_code: int | None = None, **ids: object
    ) -> int:
        attempt = self.job.attempts[-1] if self.job.attempts else None
        for fd in self.lock_fds:  # the training is over: a reader of the end state finds its GPU free
            os.close(fd)
        self.lock_fds = []
        self.notifier.finished(end, reason, attempt.n if attempt else None)  # queued, then the pipe closes
        return self.states.finish(end, reason, exit_code, attempt=attempt.n if attempt else None, **ids)

    def spec_remedies(self) -> dict[str, Remedy]:
        """The spec's switches (job.json "remedies"), typed as the spec reader made them."""
        return self.job.remedies

    def base_config(self) -> dict:
        return read_json(self.path(FILES["config_json"]))

    def write_config(self) -> None:
        """config.yaml for the newest attempt: the first config + every attempt's overrides (+ resume)."""
        attempt = self.job.attempts[-1]
        config = remedies.effective_config(self.base_config(), self.job.attempts)
        config.pop("resume_from_checkpoint", None)
        for key in [k for k in config if k.startswith(remedies.ENV_PREFIX)]:
            del config[key]  # an environment change (attempt.env), not a LLaMA-Factory argument
        if attempt.resume_from_checkpoint:
            config["resume_from_checkpoint"] = os.path.join(self.output, attempt.resume_from_checkpoint)
        header = [
            f"radeonlab job {self.job.id}, {attempt.line()}",
            "Rewritten by the host-side supervisor from config.json and job.json's attempts.",
        ]
        tmp = self.path(f"config.yaml.tmp.{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(config_yaml(config, header))
        os.replace(tmp, self.path("config.yaml"))

    # ---------------------------------------------------------------------------------------- the loop

    def run(self, resume: bool, resume_max_step: int | None = None) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if resume:
            self.plan_resume(resume_max_step)
        elif not self.job.attempts:
            self.job.attempts.append(Attempt(n=1, created_at=now()))
        if len(self.job.attempts) > 1:
            self.write_config()
        self.notify("started", attempt=self.job.attempts[-1].n, resumed=resume or None)
        problem = self.pull_model()
        if problem:
            return self.finish(EndReason.MODEL_DOWNLOAD, problem)
        while True:
            attempt = self.job.attempts[-1]
            if self.cancelled():
                attempt.state, attempt.ended_at = AttemptState.CANCELLED, now()
                self.save_job()
                return self.finish(EndReason.CANCELLED)
            exit_code, diagnosis, ids = self.run_attempt(attempt)
            if exit_code is None:  # could not start at all
                return self.finish(EndReason.CANNOT_START, attempt.reason)
            if self.cancelled():
                attempt.state, attempt.reason = AttemptState.CANCELLED, None  # not a failure: no diagnosis
                self.save_job()
                return self.finish(EndReason.CANCELLED, None, exit_code, **ids)
            if self.signalled is not None:
                attempt.state = AttemptState.FAILED
                self.save_job()
                name = signal.Signals(self.signalled).name
                return self.finish(
                    EndReason.LAUNCHER_STOPPED, f"the launcher was stopped by {name}", exit_code, **ids
                )
            if diagnosis is None and exit_code == 0:
                if not has_result(self.dir):
                    attempt.state, attempt.reason = AttemptState.FAILED, NO_ADAPTER
                    self.save_job()
                    return self.finish(EndReason.NO_ADAPTER, NO_ADAPTER, 0, **ids)
                attempt.state = AttemptState.SUCCEEDED
                self.job.result = self.result_of(attempt)
                self.save_job()
                return self.finish(EndReason.SUCCEEDED, None, 0, **ids)
            if diagnosis is None:  # diagnose names every non-zero exit; kept for safety
                diagnosis = health.Diagnosis(health.Kind.OTHER, f"exit {exit_code}", "read train.log")
            plan = self.next_plan(diagnosis)
            if isinstance(plan, remedies.GiveUp):
                self.job.report = plan.report
                self.save_job()
                why = plan.reason if diagnosis.retryable else diagnosis.advice
                end = EndReason.GAVE_UP if diagnosis.retryable else EndReason.NEEDS_A_PERSON
                if diagnosis.kind is health.Kind.OTHER:
                    end = EndReason.TRAINING_FAILED
                return self.finish(end, f"{diagnosis.summary()[:200]}; {why}", exit_code, **ids)
            self.apply(plan, diagnosis)

    def pull_model(self) -> str | None:
        """A Hub base model into the host's shared cache before the first attempt (jobs/host/models.py, in
        the training venv), then every attempt runs with HF_HUB_OFFLINE=1. Two jobs pulling the same model
        download it once (the Hub client's file locks); an interrupted download resumes on the next try.
        Returns why it failed, or None."""
        model = self.job.model
        if model is None or model.local or not model.name or self.env.get("HF_HUB_OFFLINE") == "1":
            return None
        name, revision = model.name, model.sha or model.revision or "main"
        self.states.write(JobState.RUNNING, reason=f"downloading {name} into the host's model cache")
        env = {**self.env, "PYTHONPATH": self.path(FILES["code"])}
        argv = [self.runtime.program("python"), "-m", "radeonlab.jobs.host.models", "pull", name]
        argv += ["--revision", revision] + (["--ref", model.revision or "main"] if model.sha else [])
        argv, env = self.in_runtime(argv, env, "pull")  # the Hub client is the training stack's
        with open(self.path(FILES["train_log"]), "ab") as log:
            where = env.get("HF_HUB_CACHE", "the Hub cache")
            log.write(f"radeonlab: pulling {name}@{revision} into {where}\n".encode())
            log.flush()
            done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
            log.write(done.stdout)
        lines = [ln for ln in done.stdout.decode(errors="replace").splitlines() if ln.startswith("{")]
        last = json.loads(lines[-1]) if lines else {}
        if done.returncode != 0:
            return f"{name}: {last.get('message') or f'the download exited {done.returncode}'}"
        self.env["HF_HUB_OFFLINE"] = "1"  # the cache has the whole revision now
        return None

    def notify(self, event: str, **fields: object) -> None:
        """Tell the job's notification URLs (jobs/host/notify_messenger.py); never waits or fails the job."""
        self.notifier.send(event, **fields)

    def cancelled(self) -> bool:
        return os.path.exists(self.path(FILES["cancel_marker"]))

    def _on_signal(self, signum: int, _frame: object) -> None:
        # someone stopped the launcher itself: take the training down with it, record the end, no retry
        self.signalled = signum
        if self.child is not None:
            stop_group(self.child.pid, signum)

    def run_attempt(self, attempt: Attempt) -> tuple[int | None, health.Diagnosis | None, dict]:
        """Run one attempt to its end (or stop it at the first NaN); (exit code, diagnosis, process ids)."""
        trainer_log = os.path.join(self.output, TRAINER_LOG)
        train_log = self.path(FILES["train_log"])
        log_start = text_at = file_size(train_log)
        log_at = file_size(trainer_log)  # steps already there were logged by earlier attempts
        begun = time.time()
        attempt.state = AttemptState.RUNNING
        self.save_job()
        try:
            env = {**self.env, **{k: v for a in self.job.attempts for k, v in a.env.items()}}
            argv, env = self.in_runtime(self.argv, env, str(attempt.n))
            self.child = start_training(self.dir, argv, env, self.lock_fds, self.job.limits or {})
        except OSError as e:
            attempt.state, attempt.reason = AttemptState.FAILED, f"cannot start {self.argv[0]}: {e}"
            self.save_job()
            return None, None, {}
        child = self.child
        ids = {"child_pid": child.pid, "child_start": start_time(child.pid), "pgid": child.pid}
        self.states.write(JobState.RUNNING, attempt=attempt.n, **ids)
        if self.cancelled():
            stop_group(child.pid, signal.SIGTERM)  # cancel arrived before there was a pgid to kill
        reader = metrics.TrainerLogReader()
        stopped: health.Diagnosis | None = None
        carry = ""
        while True:
            done = child.poll() is not None
            data, log_at = read_from(trainer_log, log_at)
            reader.feed(data)
            if attempt.first_step is None and reader.points:  # recorded at once: a lost launcher keeps it
                attempt.first_step = min(p.step for p in reader.points)
                self.save_job()
                self.notify("first_step", step=attempt.first_step, loss=reader.points[0].loss)
            text, text_at = read_from(train_log, text_at)
            lines = (carry + text.decode(errors="replace")).rsplit("\n", 1)
            complete, carry = (lines[0], lines[1]) if len(lines) == 2 else ("", lines[0])
            if stopped is None and not self.cancelled() and self.signalled is None:
                found = health.nan_diagnosis(reader.points) or health.console_nan(complete)
                if found is not None:
                    stopped = found if found.step is not None else replace(found, step=self._last(reader))
                    self.stop(child, runtime.container_name(self.job.id, str(attempt.n)))
            if done:
                break
            time.sleep(SUPERVISE["poll_s"])
        code = child.wait()
        stop_group(child.pid, signal.SIGKILL)  # anything of its group still left (workers)
        # a container outlives its killed `podman run` (a NaN stop's SIGKILL): it must not hold the GPU
        runtime.stop(self.runtime, runtime.container_name(self.job.id, str(attempt.n)))
        self.child = None
        exit_code = 128 - code if code < 0 else code
        log_tail, _ = read_from(train_log, log_start, int(SUPERVISE["log_tail_bytes"]))
        diagnosis = health.diagnose(
            points=reader.points,
            log_text=log_tail.decode(errors="replace"),
            trainer_state=self._trainer_state(begun),
            exit_code=exit_code,
        )
        if stopped is not None and (diagnosis is None or diagnosis.kind is not health.Kind.NAN):
            diagnosis = stopped
        steps = [p.step for p in reader.points]
        attempt.first_step, attempt.last_step = (min(steps), max(steps)) if steps else (None, None)
        attempt.exit_code, attempt.ended_at = exit_code, now()
        if diagnosis is not None:
            attempt.state = AttemptState.STOPPED if stopped is not None else AttemptState.FAILED
            attempt.reason = diagnosis.summary()
        self.save_job()
        return exit_code, diagnosis, ids

    @staticmethod
    def _last(reader: metrics.TrainerLogReader) -> int | None:
        return health.last_step(reader.points)

    def stop(self, child: subprocess.Popen, container: str) -> None:
        """SIGTERM the attempt, SIGKILL after the grace period: its process group in a venv; in a container
        host's image, the container `container` through the engine (a signal to `podman run` would end the
        client and leave the training running)."""
        if not runtime.signal_container(self.runtime, container, signal.SIGTERM):
            stop_group(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=SUPERVISE["stop_grace_s"])
        except subprocess.TimeoutExpired:
            runtime.signal_container(self.runtime, container, signal.SIGKILL)
            stop_group(child.pid, signal.SIGKILL)

    def _trainer_state(self, since: float) -> dict | None:
        """output/trainer_state.json when this attempt wrote it (the end of a run): grad_norm per step."""
        path = os.path.join(self.output, TRAINER_STATE)
        with contextlib.suppress(OSError):
            if os.path.getmtime(path) >= since:
                return read_json(path) or None
        return None

    # ---------------------------------------------------------------------------------------- remedies

    def next_plan(self, diagnosis: health.Diagnosis) -> remedies.Attempt | remedies.GiveUp:
        return remedies.next_attempt(
            {**self.job.lf_defaults, **self.base_config()},
            diagnosis,
            self.job.attempts,
            self.spec_remedies(),
            checkpoint_listing=remedies.output_listing(self.output),
            vram_total=self.job.memory_total,
        )

    def apply(self, plan: remedies.Attempt, diagnosis: health.Diagnosis) -> None:
        """Prepare the output folder for the planned attempt, record it in job.json, write config.yaml."""
        n = len(self.job.attempts) + 1
        self.prepare_output(plan.resume_from_checkpoint, plan.discard_checkpoints, n)
        new = plan.record(n, now())
        new.changes = {k: [old, value] for k, (old, value) in plan.changes.items()}
        new.cause = cause_of(diagnosis)
        self.job.attempts.append(new)
        self.save_job()
        self.write_config()
        self.notify("remedy", attempt=n, cause=new.cause, changes=new.line())

    def prepare_output(self, resume: str | None, discard: list, n: int) -> None:
        """Fresh start: move output/ aside (output.attempt-K). Resume from checkpoint-N: delete the
        checkpoints after it and keep only steps <= N in trainer_log.jsonl (the full file is kept as
        trainer_log.attempt-K.jsonl), so every step appears once in the final log."""
        previous = n - 1
        if resume is None:
            if os.path.isdir(self.output):
                os.replace(self.output, self.path(f"{OUTPUT}.attempt-{previous}"))
            return
        for name in discard:
            shutil.rmtree(os.path.join(self.output, name), ignore_errors=True)
        step = next(c.step for c in remedies.checkpoints([resume]))
        log = os.path.join(self.output, TRAINER_LOG)
        if not os.path.exists(log):
            return
        with open(log, "rb") as f:
            lines = f.read().splitlines(keepends=True)
        shutil.copyfile(log, self.path(f"trainer_log.attempt-{previous}.jsonl"))
        kept = []
        for line in lines:
            point = metrics.parse_line(line.decode(errors="replace"))
            if point is None or point.step <= step:
                kept.append(line)
        tmp = f"{log}.tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.writelines(kept)
        os.replace(tmp, log)

    def plan_resume(self, max_step: int | None = None) -> None:
        """`radeonlab resume`: a new attempt from the newest complete checkpoint (none: a fresh start).

        max_step: no later than this step (a multi-node job resumes every rank from the newest checkpoint
        all its nodes hold; 0: a fresh start on every rank)."""
        state = read_json(self.path("state.json"))
        if not self.job.attempts:
            self.job.attempts.append(Attempt(n=1, created_at=self.job.created_at))
        last = self.job.attempts[-1]
        # recorded as live, but its launcher is gone
        if state.get("state") in (None, JobState.QUEUED, JobState.RUNNING):
            cause = EndReason.PROCESS_GONE.message
        else:
            cause = str(state.get("reason") or state.get("state"))
        if last.state.is_live():
            last.state, last.reason = AttemptState.FAILED, cause
            last.ended_at = last.ended_at or now()
        listing = remedies.output_listing(self.output)
        checkpoint = remedies.resume_checkpoint(listing, None, safe_step=max_step)
        resume_step = next((c.step for c in remedies.checkpoints(listing) if c.path == checkpoint), None)
        later = [
            c.path for c in remedies.checkpoints(listing) if resume_step is not None and c.step > resume_step
        ]
        n = last.n + 1
        self.prepare_output(checkpoint, later, n)
        where = f"resume from {checkpoint}" if checkpoint else "fresh start (no complete checkpoint)"
        if max_step is not None:
            held = f"up to step {max_step}" if max_step else "none"
            where += f" (the checkpoints every node holds: {held})"
        self.job.attempts.append(
            Attempt(
                n=n,
                created_at=now(),
                resume_from_checkpoint=checkpoint,
                note=f"resume: {cause}; {where}",
                cause=cause.split(" (")[0],
            )
        )
        self.save_job()

    def result_of(self, attempt: Attempt) -> Result:
        """Which attempt made the adapter and with which settings (the overrides over the first config)."""
        settings = remedies.effective_config({}, self.job.attempts)
        return Result(
            attempt=attempt.n,
            settings=settings,
            resumed_from=attempt.resume_from_checkpoint,
            config="config.yaml",
            summary=attempt.line(),
        )
