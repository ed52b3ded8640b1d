"""Facts the verify role reads: parse only, never change anything."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pyinfra.api import FactBase

from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN

CHECK_SCRIPT = (Path(__file__).parent / "check_stack.py").read_text()


def stack_check_command(python: str, matmul_size: int) -> str:
    """The check itself: the venv's python runs CHECK_SCRIPT (nothing when the venv is missing)."""
    py = shlex.quote(python)
    return f"if [ -x {py} ]; then {py} -c {shlex.quote(CHECK_SCRIPT)} {int(matmul_size)}; fi"


def login_shell_command(user: str, command: str) -> str:
    """`command` in a fresh login shell of `user` (run as root): runuser (util-linux, in every Debian and
    Ubuntu base system) -l starts a new login with the user's groups as /etc/group has them now; bash as the
    login shell, as jobs get (`bash -lc`), whatever shell the user's passwd entry names."""
    return f"runuser -l {shlex.quote(user)} -s /bin/bash -c {shlex.quote(command)}"


class StackReport(FactBase):
    """What the venv's torch sees (roles/verify/check_stack.py's JSON), or None when the venv is missing.
    With `container` (a container host): what the image's torch sees, run by that command as root.

    Run as root (the role's privilege arguments) into a fresh login of the training user, as jobs run
    (jobs/ssh: `bash -lc` in the user's own SSH login): `runuser -l` starts a new session, so groups added
    in this run (video, render) count and /etc/profile.d (ROCm paths, the card's overrides) applies.
    """

    def command(self, python: str, user: str, matmul_size: int = 1024, container: str = "") -> str:
        if container:  # `podman run ... IMAGE` (roles/container plan.run_prefix): the image's python
            return f"{container} {shlex.quote(python)} -c {shlex.quote(CHECK_SCRIPT)} {int(matmul_size)}"
        return login_shell_command(user, stack_check_command(python, matmul_size))

    def process(self, output: list[str]) -> dict | None:
        lines = [line for line in output if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None


class HostRecord(FactBase):
    """The host record as written by an earlier run (parsed JSON), or None."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict | None:
        text = "\n".join(output).strip()
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None  # a damaged record is rewritten


class StackCheckState(FactBase):
    """What the stack check's result depends on, on the host, and the check saved by an earlier run.

    {"fingerprint": ["<line>", ...], "saved": {"inputs": ..., "checked_at": ..., "report": {...}} or None}

    The fingerprint lines are cheap stat/id output (no Python, no torch import): the venv's interpreter and
    installed distributions (every pip install/uninstall rewrites a *.dist-info/RECORD), the dpkg database
    (ROCm, the driver, python3), the linker cache, the boot (a reboot may load another amdgpu), the user's
    groups and the device nodes' modes (GPU access). Any change in them means the check must run again.
    """

    def command(self, venv: str, saved_path: str, user: str, devices: list[str]) -> str:
        v, u = shlex.quote(venv), shlex.quote(user)
        # Device patterns come from role data and are meant to be globbed (as in roles/access DeviceNodes).
        return (
            # printf, not echo: dash's echo would turn the JSON's "\\n" escapes into line breaks.
            f"printf 'saved=%s\\n' \"$(cat {shlex.quote(saved_path)} 2>/dev/null)\"; "
            f"readlink -f {v}/bin/python 2>/dev/null; "
            f"stat -Lc 'python %s %Y' {v}/bin/python 2>/dev/null; "
            f"stat -c '%n %s %Y' {v}/lib/python*/site-packages/*.dist-info/RECORD 2>/dev/null; "
            "stat -c '%n %s %Y' /var/lib/dpkg/status /etc/ld.so.cache 2>/dev/null; "
            "cat /proc/sys/kernel/random/boot_id 2>/dev/null; "
            f"echo groups=$(id -Gn {u} 2>/dev/null); "
            f'for d in {" ".join(devices)}; do [ -e "$d" ] && stat -c \'%n %a %U %G\' "$d"; done; true'
        )

    def process(self, output: list[str]) -> dict:
        saved_lines = [line.removeprefix("saved=") for line in output if line.startswith("saved=")]
        try:
            saved = json.loads(saved_lines[0]) if saved_lines and saved_lines[0].strip() else None
        except json.JSONDecodeError:
            saved = None  # a damaged file: the check runs again and rewrites it
        return {"fingerprint": [line for line in output if not line.startswith("saved=")], "saved": saved}


class ImageId(FactBase):
    """The image ID (its config's digest: the same in every store it is copied to) of `image` in the store
    of the user the fact runs as; None when Podman or the image is missing."""

    def command(self, image: str) -> str:
        return (
            "command -v podman >/dev/null || exit 0; cd / && "
            f"podman image inspect --format '{{{{.Id}}}}' {shlex.quote(image)} 2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        return next((line.strip() for line in output if line.strip()), None)


class UserEngine(FactBase):
    """Whether the container engine starts containers for the user the fact runs as, and has the init jobs
    start with (`run --init`, jobs/host/runtime.py; engines.py says where each engine looks for it):
    {"ok": True}, or {"ok": False, "error": its last lines}; None when the engine is not installed. Podman
    runs rootless (it needs a user namespace of its own); Docker answers through its daemon's socket (the
    user needs the docker group)."""

    def command(self, engine: str = PODMAN) -> str:
        row = ENGINE_TABLE[engine]
        inits = " ".join(row.init_paths)
        missing = f"no {row.init_name}, the init of {engine} run --init (install {row.init_package})"
        return (
            f"command -v {engine} >/dev/null || exit 0; cd / && "
            f"if out=$({engine} {row.ready} 2>&1); then "
            f'for f in {inits}; do if [ -x "$f" ]; then echo ok; exit 0; fi; done; '
            f"echo failed; echo {shlex.quote(missing)}; "
            "else echo failed; printf '%s\\n' \"$out\" | grep -v 'level=warning' | tail -n 2; fi"
        )

    def process(self, output: list[str]) -> dict[str, object] | None:
        lines = [line.strip() for line in output if line.strip()]
        if not lines:
            return None
        return {"ok": lines[0] == "ok", "error": "; ".join(lines[1:])}
