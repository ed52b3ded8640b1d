"""The verify role's operation: gather the report when it runs (after the stack is installed), write the
host record only when what it says changed. The stack check (a torch import, seconds) runs only when what it
depends on changed since the saved one (StackCheckState), or when the record must be rewritten: a record is
only ever written from a check made in the same run."""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.facts.files import Directory
from pyinfra.operations import files

from radeonlab.roles.container.engines import PODMAN
from radeonlab.roles.container.facts import LocalImage, LocalImageDigest
from radeonlab.roles.gpu.cards import Gpu
from radeonlab.roles.privilege import as_root, as_user
from radeonlab.roles.rocm.facts import RocmInstalledVersion
from radeonlab.roles.verify import record as rec
from radeonlab.roles.verify.facts import (
    CHECK_SCRIPT,
    HostRecord,
    ImageId,
    StackCheckState,
    StackReport,
    UserEngine,
)

# host name -> (record, report, checked_at), filled as the operation runs; read by the end-of-run table.
# checked_at is None when the check ran in this run, else when the reused report was observed.
RESULTS: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None, str | None]] = {}


@operation()
def host_record(
    path: str,
    user: str,
    home: str,
    venv: str,
    jobs_dir: str,
    model_cache: str,
    cpu_only: bool,
    rocm_stream: str,
    rocm_version: str,
    rocm_version_file: str,
    llamafactory_version: str,
    gpus: Sequence[Gpu],
    check_path: str,
    devices: Sequence[str],
    matmul_size: int = 1024,
    recheck: bool = False,
    allow_cpu_torch: bool = False,
    torch_source: str = "",
    device_targets: Sequence[str] = (),
    image: str = "",
    container: str = "",
    container_command: Sequence[str] = (),
    engine: str = PODMAN,
):
    """Write the host record at `path` (root:root 0644) from what the host reports, and save the stack check
    with the digest of its inputs at `check_path` (root:root 0644).

    The facts are read inside the operation, so on a first run they see the stack the earlier operations
    installed. A record that differs only in volatile fields (written_at, vram_used) is left as it is.
    With `container` (the `podman run ... IMAGE` prefix; `image` its name) the check runs in the container,
    and the record names runtime "container", the image's digest, an input of the check, and how jobs start
    the image (`container_command`: the training user's own engine; `engine`: its name, engines.py).
    """
    check_state = host.get_fact(StackCheckState, venv=venv, saved_path=check_path, user=user, devices=devices)
    image_digest = (
        (host.get_fact(LocalImageDigest, image=image, engine=engine, **as_root()) or "") if container else ""
    )
    # A derived training image (roles/container derived.py) names itself and its base in its labels: the
    # record names the image by its own tag (`image` is the moving `:current`), and AMD's base beside it.
    found = host.get_fact(LocalImage, image=image, engine=engine, **as_root()) if container else None
    labels = (found or {}).get("labels") or {}
    # why the user's engine takes no job (the stack is checked as root all the same)
    jobs_problem = engine_problem(user, engine) if container else None
    # the image and how it runs are inputs of the check too
    ran_in = [f"container {container} {image_digest}"] if container else []
    inputs = rec.check_inputs(check_state["fingerprint"] + ran_in, CHECK_SCRIPT, matmul_size, gpus)
    old = host.get_fact(HostRecord, path=path)
    rocm = {
        "stream": rocm_stream,
        "version": rocm_version,
        "installed": host.get_fact(RocmInstalledVersion, path=rocm_version_file),
    }
    systemd = bool(host.get_fact(Directory, path="/run/systemd/system"))  # systemd is the running init

    ctx = rec.RecordContext(
        host=host.name,
        user=user,
        home=home,
        venv=venv,
        jobs_dir=jobs_dir,
        model_cache=model_cache,
        cpu_only=cpu_only,
        rocm=rocm,
        llamafactory_version=llamafactory_version,
        gpus=gpus,
        allow_cpu=allow_cpu_torch,
        systemd=systemd,
        torch_source=torch_source,
        device_targets=tuple(device_targets),
        runtime="container" if container else "venv",
        image=labels.get("radeonlab.image", image) if container else "",
        image_digest=image_digest,
        container_command=tuple(container_command) if container and not jobs_problem else (),
        container_problem=jobs_problem,
        base_image=labels.get("radeonlab.base.image", ""),
        base_image_digest=labels.get("radeonlab.base.digest", ""),
    )
    saved = None if recheck else rec.reusable_report(check_state["saved"], inputs)
    if rec.saved_check_will_do(ctx, old, saved):
        assert old is not None and saved is not None
        RESULTS[host.name] = (old, saved, check_state["saved"]["checked_at"])
        host.noop(f"host record {path} is current; stack check inputs unchanged, not re-run")
        return

    now = datetime.now(UTC).isoformat(timespec="seconds")
    python = "python3" if container else f"{venv}/bin/python"  # AMD's image: its python3 has torch
    report = host.get_fact(
        StackReport, python=python, user=user, matmul_size=matmul_size, container=container, **as_root()
    )
    if container:
        torch = (report or {}).get("torch")
        logger.info(f"{host.name}: stack check in the container {ctx.image}@{image_digest}: torch {torch}")
    new = rec.record_for(ctx, report, now)
    current = rec.is_current(old, new)
    RESULTS[host.name] = (old if current and old else new, report, None)
    if not current:
        yield from files.put._inner(
            src=io.StringIO(rec.dumps(new)), dest=path, user="root", group="root", mode="644"
        )
    if report is not None and not report.get("error"):  # a failed check is not reused: it runs again
        line = json.dumps({"inputs": inputs, "checked_at": now, "report": report}, sort_keys=True)
        yield from files.put._inner(
            src=io.StringIO(line + "\n"), dest=check_path, user="root", group="root", mode="644"
        )
    if new.get("problem"):  # the record says why the host is not usable; the deploy fails this host
        # as a failing command whose stderr is the one line (an exception raised here, at execution time,
        # would print gevent's traceback above pyinfra's own error line)
        yield f"echo {shlex.quote(f'radeonlab: {host.name}: ' + new['problem'])} >&2; exit 1"


@operation()
def user_image(image: str, user: str):
    """Copy `image` from root's image store (where roles/container put it) into `user`'s own, which the
    job runner's rootless Podman reads; nothing when the user has the same image ID already. Run as root.

        user_image(name="Give lab the image", image="localhost/train:current", user="lab", **as_root())

    A docker-archive keeps the image's name and its config, so its ID (what is compared) is the same."""
    problem = engine_problem(user, PODMAN)
    if problem:
        logger.warning(f"{host.name}: no jobs in the container here: {problem}")
        host.noop(problem)
        return
    # the derived image's own tag (its label) is the one the host record and jobs name: both go across
    labels = (host.get_fact(LocalImage, image=image, **as_root()) or {}).get("labels") or {}
    named = str(labels.get("radeonlab.image") or image)
    want = host.get_fact(ImageId, image=image, **as_root())
    have = host.get_fact(ImageId, image=named, **as_user(user))
    if want is None or have == want:
        host.noop(f"{user} has {named} ({have})" if have else f"no {image} in root's store to copy")
        return
    q = " ".join(shlex.quote(n) for n in dict.fromkeys([image, named]))
    yield (
        't=$(mktemp -d /var/tmp/radeonlab-image.XXXXXX) && chmod 755 "$t" && '
        f'podman save --quiet -m --format docker-archive -o "$t/image.tar" {q} && '
        'chmod 644 "$t/image.tar" && '
        f'runuser -l {shlex.quote(user)} -c "cd / && podman load --quiet -i $t/image.tar"; rc=$?; '
        'rm -rf "$t"; exit $rc'
    )


def engine_problem(user: str, engine: str = PODMAN) -> str | None:
    """Why `user`'s engine cannot start containers (its error), or None when it can. Read at execution
    time: on a first deploy Podman is installed by an earlier operation of the same run."""
    answer = host.get_fact(UserEngine, engine=engine, **as_user(user))
    if answer is None or answer["ok"]:
        return None
    how = "rootless Podman" if engine == PODMAN else "Docker"
    return f"{user}'s {how} does not start ({answer['error'] or f'{engine} info failed'})"
