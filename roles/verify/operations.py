"""The verify role's operation: gather the report when it runs (after the stack is installed), write the
host record only when what it says changed."""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import files

from roles.gpu.cards import Gpu
from roles.rocm.facts import RocmInstalledVersion
from roles.verify import record as rec
from roles.verify.facts import HostRecord, StackReport

# host name -> (record, report), filled as the operation runs; read by the end-of-run table.
RESULTS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}


@operation()
def host_record(
    path: str,
    user: str,
    home: str,
    venv: str,
    jobs_dir: str,
    cpu_only: bool,
    rocm_stream: str,
    rocm_version: str,
    rocm_version_file: str,
    llamafactory_version: str,
    gpus: Sequence[Gpu],
    matmul_size: int = 1024,
):
    """Write the host record at `path` (root:root 0644) from what the host reports now.

    The facts are read inside the operation, so on a first run they see the stack the earlier operations
    installed. A record that differs only in volatile fields (written_at, vram_used) is left as it is.
    """
    report = host.get_fact(StackReport, python=f"{venv}/bin/python", matmul_size=matmul_size, _sudo_user=user)
    old = host.get_fact(HostRecord, path=path)
    new = rec.build_record(
        host=host.name,
        user=user,
        home=home,
        venv=venv,
        jobs_dir=jobs_dir,
        cpu_only=cpu_only,
        rocm={
            "stream": rocm_stream,
            "version": rocm_version,
            "installed": host.get_fact(RocmInstalledVersion, path=rocm_version_file),
        },
        report=report,
        llamafactory_version=llamafactory_version,
        gpus=gpus,
        written_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    if rec.is_current(old, new):
        assert old is not None
        RESULTS[host.name] = (old, report)
        host.noop(f"host record {path} is current")
        return
    RESULTS[host.name] = (new, report)
    yield from files.put._inner(
        src=io.StringIO(rec.dumps(new)), dest=path, user="root", group="root", mode="644"
    )
