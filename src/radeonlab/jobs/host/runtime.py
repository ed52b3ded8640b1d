"""Where a job's training-stack programs run on its host: the venv's, or inside the host's image (issue 29).

Standard library only: the launcher and supervisor (system python3) build these commands; they themselves
stay on the host, and so do the GPU readings. Only the programs of the training stack run in the container:
llamafactory-cli, the model download, the notifier, and the venv tools (`chat`, `export`, `fetch --try`,
`models`): the laptop runs those by `<venv>/bin/python` as on a venv host, and on a container host that is
a shim the deploy writes (roles/verify), which runs `python3 -m radeonlab.jobs.host.runtime exec -- python
...` on the system python3 with radeonlab's host code on PYTHONPATH, as every host tool has it.

A container host's record (/etc/radeonlab/host.json) names the image and `container_command`, the engine
and AMD's run options, as the deploy checked the stack with them (roles/verify). A program then runs as

    podman run --device=/dev/kfd ... --userns=keep-id --group-add=keep-groups --rm --init
        --name=radeonlab-<job>-<n>
        -i --network=host -v DIR:DIR ... -w JOB_DIR -e NAME ... IMAGE PROGRAM ARGS...

The training user's own (rootless) engine runs it, never sudo: the deploy put the image in that user's store
(roles/verify), keep-id makes the user the container's user (the job's files stay the user's) and
keep-groups passes the user's video and render groups on to the devices. With Docker (a host's own, which
the user reaches through the docker group: roles/container engines.py) the same is said by number:
`--user=UID:GID` and a `--group-add=GID` for each of the user's groups.

The job folder and the host's model cache are mounted at the same path inside, so every path in job.json,
config.yaml and the environment means the same file in and out. The environment goes in by name only
(`-e NAME` takes the value from the engine's own environment), so no value, no secret, is written to disk
or put in an argument list. Which names: every variable radeonlab set for the program (the job's caches,
GPUs, env, secrets, a remedy's) and the GPU settings the profile.d file exports (HSA_OVERRIDE_GFX_VERSION,
PYTORCH_ROCM_ARCH, ...); the rest of the host's login environment (PATH, HOME, the host's ROCm paths) is the
host's, not the image's.

    python3 -m radeonlab.jobs.host.runtime exec -- python ARGS...   (the shim <venv>/bin/python runs it)
    python3 -m radeonlab.jobs.host.runtime stop NAME
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from radeonlab.contract.records import HOST_RECORD_PATH, HostRecord

CONTAINER_HOME = "cache/home"  # HOME inside the container, under the job folder (the image's is root's)
TOOL_HOME = ".home"  # ... and under the jobs folder for a venv tool (chat, export, models)
EXPORT_LINE = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
STOP_TIMEOUT_S = 30.0


def exported_names(path: str) -> list[str]:
    """The variables a profile.d file exports (`export NAME=...` lines); [] when it is not there."""
    try:
        with open(path) as f:
            return EXPORT_LINE.findall(f.read())
    except OSError:
        return []


@dataclass(frozen=True)
class Runtime:
    """The host record's runtime, as the job runner uses it: `kind` "venv" or "container"."""

    kind: str = "venv"
    venv: str = ""
    image: str = ""
    image_digest: str = ""
    command: tuple[str, ...] = ()  # the engine and its run options (container)
    mounts: tuple[str, ...] = ()  # folders mounted at the same path (the host's model cache)
    gpu_names: tuple[str, ...] = ()  # what the profile.d file exports

    @classmethod
    def of(cls, record: HostRecord | None, venv: str) -> Runtime:
        """The runtime a host record says (a host without one, or a venv host: the venv `venv`)."""
        if record is None or record.runtime != "container":
            return cls(venv=venv)
        return cls(
            kind="container",
            venv=venv,
            image=record.image,
            image_digest=record.image_digest,
            command=tuple(record.container_command),
            mounts=tuple(m for m in (record.model_cache,) if m),
            gpu_names=tuple(exported_names(record.gpu_env_file)),
        )

    @property
    def container(self) -> bool:
        return self.kind == "container"

    def program(self, name: str) -> str:
        """The training stack's `name` (llamafactory-cli, python): the venv's, or the image's by name."""
        if self.container:
            return "python3" if name == "python" else name
        return os.path.join(self.venv, "bin", name)

    def passed(self, env: Mapping[str, str], base: Mapping[str, str]) -> list[str]:
        """The names that go into the container: set or changed by radeonlab (not as in the login
        environment `base`), or exported by the profile.d file; never PATH (the image's own)."""
        names = {k for k, v in env.items() if base.get(k) != v} | {k for k in self.gpu_names if k in env}
        return sorted(names - {"PATH"})

    def command_for(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        name: str,
        workdir: str,
        mounts: Sequence[str] = (),
        base: Mapping[str, str] | None = None,
        tty: bool = False,
        home: str = CONTAINER_HOME,
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of the process that runs `argv` with `env`: itself in the venv; in the
        container, the engine's command (its environment has the values; its argv names only)."""
        if not self.container:
            return list(argv), dict(env)
        names = [n for n in self.passed(env, os.environ if base is None else base) if n != "HOME"]
        # HOME inside: the image's (/root) is not the user's, so the user's caches go under the job folder
        # (the engine's own HOME stays: rootless Podman finds the user's image store by it)
        home = os.path.join(workdir, home)
        os.makedirs(home, exist_ok=True)
        folders = list(dict.fromkeys([workdir, *mounts, *self.mounts]))
        # --init: a small init (Podman's catatonit) is the container's PID 1 and passes signals on. Without
        # it the program is PID 1, for which the kernel drops a signal it has no handler for: `podman kill
        # --signal=15` was ignored (measured on the sandbox: a 40 s loop ran its time out; with --init it
        # ended in 1.1 s), so a NaN stop could not end an attempt (signal_command).
        run = [*self.command, "--rm", "--init", f"--name={name}", "-i", "--network=host"]
        run += self.user_options()
        run += ["-t"] if tty else []
        for folder in folders:
            run += ["-v", f"{folder}:{folder}"]
        run += ["-w", workdir, "-e", f"HOME={home}"]
        for key in names:
            run += ["-e", key]
        run += [self.image, *argv]
        return run, dict(env)

    @property
    def engine(self) -> str:
        return self.command[0] if self.command else "podman"

    def user_options(self) -> list[str]:
        """Docker's: this process's user and groups by number (Podman's keep-id and keep-groups are in the
        record's command already); the groups are the devices' (video, render) among others."""
        if self.engine != "docker":
            return []
        groups = sorted(set(os.getgroups()) - {os.getgid()})
        return [f"--user={os.getuid()}:{os.getgid()}", *(f"--group-add={g}" for g in groups)]

    def signal_command(self, name: str, signum: int) -> list[str]:
        """Signal the container `name` through its engine ([] in a venv). The engine's `kill` reaches the
        container's init (--init), which passes it on to the training; a signal to `podman run` itself ends
        that client at once and leaves the container training (seen on the sandbox)."""
        if not self.container:
            return []
        return [self.engine, "kill", f"--signal={int(signum)}", name]

    def stop_command(self, name: str) -> list[str]:
        """Remove the container `name` in any state (its `podman run` was killed): [] in a venv. Docker's
        `rm --force` has no --ignore or --time (it kills at once; a missing container is an error, which
        `stop` ignores)."""
        if not self.container:
            return []
        if self.engine == "docker":
            return ["docker", "rm", "--force", name]
        return [self.engine, "rm", "--force", "--ignore", f"--time={int(STOP_TIMEOUT_S)}", name]

    def job_fields(self) -> dict[str, str]:
        """What job.json records of where the job ran."""
        return {"runtime": self.kind, "image": self.image, "image_digest": self.image_digest}


def container_name(job_id: str, what: str) -> str:
    """The container of one attempt ("radeonlab-<job>-1") or step ("radeonlab-<job>-pull")."""
    return f"radeonlab-{job_id}-{what}"


def read_record(path: str = HOST_RECORD_PATH) -> HostRecord | None:
    try:
        with open(path) as f:
            return HostRecord.from_dict(json.load(f))
    except (OSError, ValueError, TypeError):
        return None


def signal_container(runtime: Runtime, name: str, signum: int) -> bool:
    """Send `signum` to the container `name` (Runtime.signal_command); False in a venv (nothing sent)."""
    argv = runtime.signal_command(name, signum)
    if argv:
        with contextlib.suppress(subprocess.TimeoutExpired):  # a hung engine must not hang the stop
            subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                timeout=STOP_TIMEOUT_S,
            )  # fmt: skip
    return bool(argv)


def stop(runtime: Runtime, name: str) -> None:
    """Remove the container `name` if it is still there (a killed `podman run` leaves it running)."""
    argv = runtime.stop_command(name)
    if argv:
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tool_names(env: Mapping[str, str]) -> list[str]:
    """The variables a venv tool gets inside the container: what the laptop sends a tool (the job's caches,
    the Hub's settings, notification URLs) and radeonlab's host code (PYTHONPATH)."""
    return [k for k in env if k.startswith(TOOL_ENV_PREFIXES) or k in TOOL_ENV_NAMES]


TOOL_ENV_PREFIXES = ("HF_", "HUGGING_FACE_", "RADEONLAB_", "TRANSFORMERS_")
TOOL_ENV_NAMES = frozenset({"PYTHONPATH", "MPLCONFIGDIR"})


def exec_tool(argv: Sequence[str]) -> int:
    """Run a venv tool (argv: `python -m radeonlab.jobs.host.<tool> ...`) in this host's image, its standard
    streams the caller's (a terminal: -t). The folders it may read or write are mounted: radeonlab's host
    code (PYTHONPATH), the jobs folder, the model cache. What the venv's `python` is on a container host
    (the shim roles/verify writes there)."""
    record = read_record()
    runtime = Runtime.of(record, record.venv if record else "")
    argv = [runtime.program(argv[0]), *argv[1:]]
    if not runtime.container:
        os.execv(argv[0], argv)
    env = dict(os.environ)
    names = set(tool_names(env)) | {n for n in runtime.gpu_names if n in env}
    base = {k: v for k, v in env.items() if k not in names}
    jobs = record.jobs_dir if record else os.getcwd()
    folders = [f for f in (env.get("PYTHONPATH", ""), jobs) if f]
    name = container_name("tool", str(os.getpid()))
    run, env = runtime.command_for(
        argv, env, name=name, workdir=jobs, mounts=folders, base=base, tty=os.isatty(0), home=TOOL_HOME
    )
    try:
        return subprocess.run(run, env=env).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        stop(runtime, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radeonlab.jobs.host.runtime", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p_exec = sub.add_parser("exec")
    p_exec.add_argument("argv", nargs=argparse.REMAINDER)
    p_stop = sub.add_parser("stop")
    p_stop.add_argument("name")
    args = parser.parse_args(argv)
    if args.verb == "stop":
        record = read_record()
        stop(Runtime.of(record, record.venv if record else ""), args.name)
        return 0
    return exec_tool(args.argv[1:] if args.argv[:1] == ["--"] else args.argv)


if __name__ == "__main__":
    sys.exit(main())
