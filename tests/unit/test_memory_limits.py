"""Memory limits (`radeonlab: limits:`): which one submit accepts where, and what the host's launcher does.

- address_space_gb is RLIMIT_AS: HIP reserves large virtual address ranges at start-up, so on a host whose
  torch uses its cards it would break ROCm; submit refuses it there and takes it on a CPU-torch host.
- memory_gb is a cgroup limit (systemd-run --user --scope -p MemoryMax=): submit takes it only where the
  host record says systemd is the init. The SIMULATED sandbox hosts run no systemd, so the real systemd-run
  is not exercised here: a stand-in on PATH records the arguments the launcher gives it and runs the rest.
  Whether MemoryMax holds a real ROCm run under its limit is not verified (no card, no systemd here).
"""

from __future__ import annotations

import os
import resource
import stat
import sys
from pathlib import Path

from radeonlab.jobs.host.process import start_training
from radeonlab.jobs.plan.plan import limit_problem
from radeonlab.jobs.spec.load import load
from tests.support.laptop_doubles import demo_job, gpu, host_record

GIB = 2**30


def spec_with(tmp_path: Path, limits: str):  # noqa: ANN201
    return load(demo_job(tmp_path, extra=f"radeonlab:\n  limits: {limits}\n"))


def test_address_space_is_refused_on_a_gpu_host_and_taken_on_a_cpu_torch_host(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, "{address_space_gb: 24}")
    on_card = host_record("ws1", [gpu("rx7900xtx")], systemd=True)
    problem = limit_problem(spec, on_card)
    assert problem is not None and problem.startswith("ws1: limits.address_space_gb (RLIMIT_AS) breaks ROCm")
    assert "limits.memory_gb" in problem  # the fix
    assert limit_problem(spec, host_record("sb1", [gpu("rx7900xtx")], cpu_torch=True)) is None


def test_memory_gb_needs_systemd_on_the_host(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, "{memory_gb: 48}")
    assert limit_problem(spec, host_record("ws1", [gpu("rx7900xtx")], systemd=True)) is None
    problem = limit_problem(spec, host_record("ws1", [gpu("rx7900xtx")], systemd=False))
    assert problem is not None and "does not run systemd" in problem and "address_space_gb" in problem


def stand_in_systemd_run(bin_dir: Path, calls: Path) -> None:
    """SIMULATED systemd-run: records its arguments, then runs the command after `--` (no cgroup)."""
    bin_dir.mkdir()
    script = bin_dir / "systemd-run"
    lines = ["#!/bin/sh", f'printf "%s\\n" "$@" > {calls}', 'while [ "$1" != "--" ]; do shift; done', "shift"]
    script.write_text("\n".join([*lines, 'exec "$@"', ""]))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_memory_gb_runs_the_trainer_in_a_systemd_scope_with_memory_max(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    stand_in_systemd_run(tmp_path / "bin", calls)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, "-c", "print('trainer ran')"]
    proc = start_training(str(tmp_path), argv, env, [], {"memory_gb": 1.5})
    assert proc.wait(timeout=60) == 0
    assert calls.read_text().splitlines() == [
        "--user", "--scope", "--quiet", "--collect", "-p", f"MemoryMax={int(1.5 * GIB)}",
        "-p", "MemorySwapMax=0", "--", *argv,
    ]  # fmt: skip
    assert (tmp_path / "train.log").read_text() == "trainer ran\n"


def test_address_space_gb_is_the_trainers_rlimit_as_only(tmp_path: Path) -> None:
    show = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    proc = start_training(
        str(tmp_path), [sys.executable, "-c", show], dict(os.environ), [], {"address_space_gb": 3}
    )
    assert proc.wait(timeout=60) == 0
    assert int((tmp_path / "train.log").read_text()) == 3 * GIB
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 3 * GIB  # the launcher itself is not limited
    # no limit asked: nothing set, and no systemd-run in the way
    (tmp_path / "train.log").unlink()
    proc = start_training(str(tmp_path), [sys.executable, "-c", show], dict(os.environ), [], {})
    assert proc.wait(timeout=60) == 0
    assert int((tmp_path / "train.log").read_text()) == resource.getrlimit(resource.RLIMIT_AS)[0]


def test_limits_and_placement_must_be_finite(tmp_path: Path) -> None:
    """YAML's .nan and .inf are floats above nothing and below nothing: both used to pass `<= 0` and crash the
    launcher; check refuses them with the key."""
    for text in ("{memory_gb: .nan}", "{address_space_gb: .inf}", "{memory_gb: -.inf}"):
        spec = spec_with(tmp_path, text)
        problems = spec.block_problems
        assert any("must be a positive number (finite)" in msg for _, msg in problems), (text, problems)
    spec = load(demo_job(tmp_path, extra="radeonlab:\n  placement: {min_vram_gb: .inf}\n"))
    assert any("min_vram_gb must be a positive number (finite)" in msg for _, msg in spec.block_problems)
    assert not spec_with(tmp_path, "{memory_gb: 48}").block_problems
