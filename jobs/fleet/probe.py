"""The state of every workstation at a glance: `radeonlab fleet` (logic here, the CLI is
radeonlab/cli/fleet.py).

One thread and one SSH connection per host, ONE remote round trip per host: a bash script (sent on stdin)
prints the host record, the GPU readings (jobs/host/readings.py) and a summary of the jobs folder. A host that
does not answer within the timeout is reported unreachable with the reason and never stalls the others:
the caller stops waiting at the deadline, whatever the SSH library is blocked on (a TCP connect, a server
that accepts connections but never sends its SSH banner, a hung command).
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.host.readings import GpuReading, parse_readings_output, readings_script
from radeonlab.jobs.ssh.connection import Remote, TransportError, connect
from radeonlab.roles.gpu.cards import card_name
from radeonlab.roles.verify.defaults import DEFAULTS as VERIFY_DEFAULTS
from radeonlab.roles.verify.defaults import RECORD_SCHEMA

from radeonlab.contract.state import JobState

FLEET_DEFAULTS: dict[str, Any] = {
    "timeout_s": 10.0,  # per host, from the start of the command: connect + the one round trip
}
SECTIONS = ("@record", "@readings", "@jobs")

# Runs under the host's python3 with the host record's path: what the jobs folder holds, as one JSON line.
# A job whose state.json says running but whose processes are gone is "stale" (the host rebooted or the
# launcher was killed); `radeonlab status` records it as failed, fleet only reports it.
# Host-side helper shared by the probes (fleet's and placement's): is this pid a live process?
HOST_PY_ALIVE = """
def alive(pid):
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return isinstance(pid, int)
    return True
"""
_JOBS_PY = f"""
import json, os, sys
{HOST_PY_ALIVE}try:
    jobs_dir = json.load(open(sys.argv[1]))["jobs_dir"]
except Exception as e:
    print(json.dumps({{"error": "no jobs_dir in the host record (%s)" % type(e).__name__}}))
    sys.exit(0)
try:
    names = sorted(os.listdir(jobs_dir))
except FileNotFoundError:  # provisioned, no job submitted yet
    names = []
except Exception as e:
    print(json.dumps({{"error": "%s: %s" % (type(e).__name__, e)}}))
    sys.exit(0)
out = {{"running": [], "queued": 0, "stale": []}}
for name in names:
    try:
        state = json.load(open(os.path.join(jobs_dir, name, "state.json")))
    except Exception:
        continue
    if state.get("state") == {JobState.QUEUED.value!r}:
        out["queued"] += 1
    elif state.get("state") == {JobState.RUNNING.value!r}:
        live = alive(state.get("pid")) or alive(state.get("child_pid"))
        out["running" if live else "stale"].append(name)
print(json.dumps(out))
"""


def probe_script() -> str:
    """The one script each host runs ($1 = the host record's path): three marked sections."""
    return "\n".join(
        [
            'echo "@record"; cat -- "$1" 2>/dev/null; echo',
            'echo "@readings"',
            f"( {readings_script()} )",  # a subshell: the readings script ends with `exit 0`
            'echo "@jobs"',
            f'python3 -c {shlex.quote(_JOBS_PY)} "$1" 2>&1 || echo \'{{"error": "python3 failed"}}\'',
            "exit 0",
        ]
    )


@dataclass
class GpuStatus:
    index: int
    name: str | None = None
    gfx: str | None = None
    vram_used: int | None = None
    vram_total: int | None = None
    temp_c: float | None = None
    power_w: float | None = None


@dataclass
class HostStatus:
    """One row of the fleet table (and one dict of `--json`)."""

    host: str
    reachable: bool
    error: str | None = None  # why unreachable (one line), or what went wrong reading the host
    provisioned: bool = False
    provisioned_note: str = ""  # why not provisioned: no record, unreadable, schema mismatch
    gpus: list[GpuStatus] = field(default_factory=list)
    rocm: str | None = None
    torch: str | None = None
    running: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    queued: int | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_sections(stdout: str) -> dict[str, str]:
    """{"@record": text, "@readings": text, "@jobs": text} from the probe script's output."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line in SECTIONS:
            current = sections.setdefault(line, [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in sections.items()}


def judge_record(text: str) -> tuple[dict[str, Any] | None, str]:
    """(record, note): the record when present and of the current schema, else None and why not."""
    if not text:
        return None, "no host record"
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None, "host record unreadable (not JSON)"
    if not isinstance(record, dict):
        return None, "host record unreadable (not an object)"
    if record.get("schema") != RECORD_SCHEMA:
        return None, f"host record schema {record.get('schema')!r}, expected {RECORD_SCHEMA}"
    return record, ""


def _gpus(record: Mapping[str, Any] | None, readings: Sequence[GpuReading]) -> list[GpuStatus]:
    by_index = {r.index: r for r in readings}
    entries = list((record or {}).get("gpus") or [])
    if not entries:  # no record: the cards sysfs shows, unnamed
        return [
            GpuStatus(r.index, None, None, r.vram_used, r.vram_total, r.temp_c, r.power_w) for r in readings
        ]
    out = []
    for g in entries:
        r = by_index.get(int(g["index"]))
        out.append(
            GpuStatus(
                int(g["index"]),
                g.get("name"),
                g.get("gfx"),
                r.vram_used if r and r.vram_used is not None else g.get("vram_used"),
                r.vram_total if r and r.vram_total is not None else g.get("vram_total"),
                r.temp_c if r else None,
                r.power_w if r else None,
            )
        )
    return out


def card_changes(entries: Sequence[Mapping[str, Any]], readings: Sequence[GpuReading]) -> str:
    """Where the live cards differ from the ones the host record describes (by PCI device id), or "".

    A recorded GPU with no live card (removed, or amdgpu not loaded after a kernel update) is a change too.
    Records without device ids (older ones) and readings without them compare as unchanged.
    """
    by_index = {r.index: r for r in readings}
    out = []
    for g in entries:
        live = by_index.get(int(g["index"]))
        if g.get("device_id") is None:
            continue
        if live is None:
            gone = "is not in sysfs (card removed, or amdgpu not loaded)"
            out.append(f"GPU {g['index']} {g.get('name')} {gone}")
        elif live.device_id is not None and int(g["device_id"]) != live.device_id:
            now = card_name(live.device_id, live.revision)
            out.append(f"GPU {g['index']} was {g.get('name')}, is now {now}")
    return "; ".join(out)


def parse_probe(name: str, stdout: str) -> HostStatus:
    """A reachable host's row from the probe script's output."""
    sections = split_sections(stdout)
    record_text = sections.get("@record", "")
    record, note = judge_record(record_text)
    loose: Mapping[str, Any] = record or {}
    if record is None and record_text:  # an old or damaged record may still say something useful
        try:
            parsed = json.loads(record_text)
            loose = parsed if isinstance(parsed, dict) else {}
        except json.JSONDecodeError:
            loose = {}
    readings = parse_readings_output(sections.get("@readings", ""), loose.get("gpus") or ())
    changed = card_changes(loose.get("gpus") or (), readings)
    if record is not None and changed:  # provisioned for another card: wrong arch, override, record
        record, note = None, f"card changed since provisioning: {changed}; re-run deploy/setup.py"
    status = HostStatus(
        host=name,
        reachable=True,
        provisioned=record is not None,
        provisioned_note=note,
        gpus=_gpus(loose, readings),
        rocm=((loose.get("rocm") or {}).get("installed")) or None,
        torch=((loose.get("torch") or {}).get("version")) or None,
    )
    try:
        jobs = json.loads((sections.get("@jobs") or "{}").splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        jobs = {"error": "jobs summary unreadable"}
    if "error" in jobs:
        if record is not None:  # without a record there is no jobs folder to read: not an error
            status.error = f"jobs folder: {jobs['error']}"
    else:
        status.running, status.stale, status.queued = jobs["running"], jobs["stale"], jobs["queued"]
    return status


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


def probe_host(
    target: HostTarget,
    timeout: float,
    opened: Callable[[Remote], None] = lambda r: None,
    *,
    script: Callable[[], str] | None = None,
    parse: Callable[[str, str], HostStatus] | None = None,
) -> HostStatus:
    """Connect, run the probe script once, parse. Never raises for a host problem: it becomes the row.

    `script`/`parse` default to fleet's; placement passes its own (fleet's plus a queue section).
    """
    start = time.monotonic()
    record_path = str(target.data.get("verify_record_path", VERIFY_DEFAULTS["verify_record_path"]))
    try:
        with connect(target) as remote:
            opened(remote)
            left = max(0.1, timeout - (time.monotonic() - start))
            result = remote.run_script((script or probe_script)(), [record_path], check=False, timeout=left)
    except TransportError as exc:
        return HostStatus(target.name, False, _one_line(str(exc)), seconds=time.monotonic() - start)
    status = (parse or parse_probe)(target.name, result.stdout)
    status.seconds = round(time.monotonic() - start, 3)
    return status


def gather(
    targets: Sequence[HostTarget],
    timeout: float = FLEET_DEFAULTS["timeout_s"],
    probe: Callable[..., HostStatus] = probe_host,
) -> list[HostStatus]:
    """Every host's status, probed in parallel, in the targets' order; a host still silent at the
    deadline is unreachable ("no answer within N s"), its thread abandoned (daemon) and its connection
    closed if it had opened one."""
    results: dict[str, HostStatus] = {}
    remotes: dict[str, Remote] = {}
    lock = threading.Lock()

    def work(target: HostTarget) -> None:
        def opened(remote: Remote) -> None:
            with lock:
                remotes[target.name] = remote

        try:
            status = probe(target, timeout, opened)
        except Exception as exc:  # a bug or an unexpected library error: still one row, not a traceback
            status = HostStatus(target.name, False, f"{type(exc).__name__}: {_one_line(str(exc))}")
        with lock:
            results[target.name] = status

    threads = [threading.Thread(target=work, args=(t,), name=f"fleet-{t.name}", daemon=True) for t in targets]
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    out = []
    with lock:
        for target in targets:
            status = results.get(target.name)
            if status is None:
                status = HostStatus(target.name, False, f"no answer within {timeout:g} s", seconds=timeout)
                if target.name in remotes:
                    remotes[target.name].close()  # its command is hung: end it
            out.append(status)
    return out


def exit_code(statuses: Sequence[HostStatus]) -> int:
    """0 when every host answered, 1 when any is unreachable."""
    return 0 if all(s.reachable for s in statuses) else 1
