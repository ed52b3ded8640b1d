"""Security defaults, checked from the source and on ONE provisioned SIMULATED workstation (hd1, shared with
tests/e2e/test_faults.py through tests/support/faultlab.py).

- host keys: strict by default, through the `radeonlab` command (tests/e2e/test_transport.py covers the
  transport itself: accept command, accept-new, changed key; tests/unit/test_hosts.py the inventory default);
- secrets (HF_TOKEN in the laptop's environment and in the spec's env) never on a command line, in a log,
  in the job record or in the laptop's SQLite;
- hostile names quoted: a spec file named with `;`, `$()`, backticks and quotes runs nothing;
- training never runs as root; no sudo in the job runner; every file the deploy writes has an explicit
  owner, group and mode.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from radeonlab.jobs.ssh import connection as transport
from radeonlab.sandbox.hosts import Sandbox
from tests.support.faultlab import (
    HOST,
    INVENTORY,
    JOBS_DIR,
    LAB_HOME,
    LONG_STEPS,
    Lab,
    cli,
    listing,
    shared_lab,
    state_on_host,
    submit,
    wait_logged_step,
)

REPO = Path(__file__).resolve().parents[2]
SECRET_IN_SPEC = "hf_SPECsecret0123456789abcdef"
SECRET_ON_LAPTOP = "hf_LAPTOPsecret0123456789abcdef"  # HF_TOKEN in the laptop's environment
SPEC_SECRET_NAME = "WANDB_API_KEY"  # a token in the spec's env (another name: no precedence question)
# A secret known by its value only (issue 27 S9): a plain name, a URL carrying a user and password.
VALUE_SECRET_NAME = "EXPERIMENT_TRACKER"
VALUE_SECRET = "https://lab:pw0rd-VALUEsecret@tracker.lab.example/api"
HOSTILE_STEM = "my job; $(touch pwned) 'q' \"dq\" `touch pwned2` é"
FILE_OPS = ("put", "template", "directory", "file", "link", "download", "sync", "copy")
OWNERSHIP = ("user", "group", "mode")
# Known defects, reported: tests that show them are xfail(strict) so a fix is noticed.
FILE_OP_DEFECTS: dict[str, str] = {}


def on_a_host(test: Callable) -> Callable:
    """The marks of a test on the provisioned host: a sandbox host, provisioned with the training stack,
    training (the module's source-only tests run anywhere)."""
    return pytest.mark.slow(pytest.mark.sandbox(test))


# --- from the source: no sudo in the job runner, explicit owners and modes in the deploy ------------------
def _string_literals(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, "rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type == tokenize.STRING:
                yield tok.start[0], tok.string


def test_the_job_runner_never_uses_sudo() -> None:
    """Every command the runner sends to a host is built from string literals in jobs/: none says sudo."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {text[:80]}"
        for path in sorted((REPO / "src/radeonlab/jobs").rglob("*.py"))
        for line, text in _string_literals(path)
        if re.search(r"\bsudo\b", text) and not text.lstrip("rbuf").startswith(('"""', "'''"))
    ]
    assert found == []


def _file_ops() -> list[tuple[str, ast.Call]]:
    ops = []
    package = REPO / "src/radeonlab"
    for path in sorted([*(package / "roles").rglob("*.py"), *(package / "deploy").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "_inner":
                func = func.value  # files.put._inner(...) inside a wrapping operation
            if (
                isinstance(func, ast.Attribute)
                and func.attr in FILE_OPS
                and isinstance(func.value, ast.Name)
                and func.value.id == "files"
            ):
                ops.append((f"{path.relative_to(REPO)}:files.{func.attr}", node))
    return ops


def _op_params() -> list:
    params = []
    for key, node in _file_ops():
        marks = (
            [pytest.mark.xfail(strict=True, reason=FILE_OP_DEFECTS[key])] if key in FILE_OP_DEFECTS else []
        )
        params.append(pytest.param(node, id=f"{key}:{node.lineno}", marks=marks))
    return params


def test_the_roles_write_files() -> None:
    assert len(_file_ops()) >= 8  # the parser finds the deploy's file operations (the test below can fail)


@pytest.mark.parametrize("call", _op_params())
def test_every_file_the_deploy_writes_has_owner_group_and_mode(call: ast.Call) -> None:
    given = {k.arg for k in call.keywords if k.arg is not None}  # **kwargs count for nothing: be explicit
    removes = any(
        k.arg == "present" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in call.keywords
    )
    if removes:
        return  # a removal writes nothing: no owner or mode to get wrong
    assert set(OWNERSHIP) <= given, f"missing {sorted(set(OWNERSHIP) - given)}"


# --- on the provisioned host -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = shared_lab(sandbox, tmp_path_factory.mktemp("seclab"))
    print(f"\n{HOST} provisioned in {lab.provision_s:.1f}s")
    return lab


@on_a_host
def test_provisioned_files_have_the_owners_and_modes_of_the_contract(lab: Lab) -> None:
    stat = lab.host.exec("stat -c '%n %U %G %a' /etc/radeonlab/host.json /etc/profile.d/radeonlab*.sh")
    for line in stat.stdout.splitlines():
        name, user, group, mode = line.split()
        assert (user, group, mode) == ("root", "root", "644"), line
    owners = lab.host.exec(f"find {LAB_HOME} -maxdepth 1 -printf '%p %u\\n'").stdout.splitlines()
    assert owners and all(line.endswith(" lab") for line in owners), owners
    dirs = lab.host.exec(["stat", "-c", "%U %G %a", LAB_HOME, JOBS_DIR]).stdout.split("\n")
    assert dirs[:2] == ["lab lab 750", "lab lab 750"], dirs  # ~/radeonlab (venv, jobs: users' data); the jobs


def _inventory_with_known_hosts(lab: Lab, known: Path) -> Path:
    entry = lab.host.inventory_entry()
    data = {k: entry[k] for k in ("ssh_hostname", "ssh_port", "ssh_user", "ssh_key")}
    path = known.with_suffix(".py")
    path.write_text(f"hosts = [({HOST!r}, {{**{data!r}, 'ssh_known_hosts_file': {str(known)!r}}})]\n")
    return path  # no ssh_strict_host_key_checking: the default is what is tested


@on_a_host
@pytest.mark.parametrize("case", ["unknown", "changed"])
def test_host_keys_are_checked_strictly_by_default_through_submit(
    lab: Lab, tmp_path: Path, case: str
) -> None:
    known = tmp_path / "known_hosts"
    if case == "unknown":
        known.write_text("")
    else:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
        other = " ".join((tmp_path / "k.pub").read_text().split()[:2])
        known.write_text(f"[{lab.host.address}]:{lab.host.port} {other}\n")
    inventory = _inventory_with_known_hosts(lab, known)
    before = listing(lab.host, JOBS_DIR)
    result = cli(lab, "submit", str(lab.spec("hostkey.yaml", {"max_steps": 5})), "-i", str(inventory))
    assert result.exit_code == 1
    last = result.stderr.strip().splitlines()[-1]
    if case == "unknown":
        assert f"accept it with: ssh-keyscan -p {lab.host.port} -t ed25519 {lab.host.address} >> " in last, (
            last
        )
    else:
        assert "HOST KEY CHANGED" in last and "Refusing to connect" in last, last
    assert listing(lab.host, JOBS_DIR) == before  # nothing uploaded or launched
    assert known.read_text().count("\n") == (0 if case == "unknown" else 1)  # nothing recorded silently


@pytest.fixture(scope="module")
def secret_job(lab: Lab) -> Iterator[dict]:
    """A long job from a spec with a hostile file name, HF_TOKEN in its env and in the laptop's; every
    command sent to the host during submit is recorded; the host's command lines are read while it runs."""
    spec = lab.spec(f"{HOSTILE_STEM}.yaml", {"max_steps": LONG_STEPS, "save_steps": 1000})
    env = f"    {SPEC_SECRET_NAME}: {SECRET_IN_SPEC}\n    {VALUE_SECRET_NAME}: {VALUE_SECRET}\n"
    spec.write_text(spec.read_text() + f"radeonlab:\n  env:\n{env}")
    sent: list[str] = []
    real_channel = transport.Remote._channel

    def recording(self: transport.Remote, command: str, timeout: float | None = None):  # noqa: ANN202
        sent.append(command)
        return real_channel(self, command, timeout)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transport.Remote, "_channel", recording)
        job_id = submit(lab, spec, env={"HF_TOKEN": SECRET_ON_LAPTOP})
    wait_logged_step(lab.host, job_id)
    state = state_on_host(lab.host, job_id)
    cmdlines = lab.host.exec(
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done", check=False
    ).stdout
    environ = lab.host.exec(["cat", f"/proc/{state['child_pid']}/environ"], check=False).stdout.split("\0")
    uids = lab.host.exec(f"ps -o uid=,pid=,args= -g {state['pgid']}").stdout.splitlines()
    yield {"id": job_id, "sent": sent, "cmdlines": cmdlines, "environ": environ, "uids": uids, "state": state}
    cli(lab, "cancel", job_id, "-i", INVENTORY)


@on_a_host
def test_a_hostile_spec_name_is_quoted_everywhere_and_runs_nothing(lab: Lab, secret_job: dict) -> None:
    job_id = secret_job["id"]
    assert job_id.startswith("my-job-touch-pwned-q-dq-touch-pwned2-e-"), job_id
    assert secret_job["state"]["state"] == "running"
    found = lab.host.exec("find / -xdev -name 'pwned*' 2>/dev/null", check=False).stdout
    assert found == ""
    assert not list(lab.work.rglob("pwned*")) and not list(Path.cwd().glob("pwned*"))
    record = json.loads(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/job.json"]).stdout)
    assert record["spec_file"] == f"{HOSTILE_STEM}.yaml"  # kept exactly, as data


@on_a_host
def test_training_never_runs_as_root(lab: Lab, secret_job: dict) -> None:
    lab_uid = lab.host.exec(["id", "-u", "lab"]).stdout.strip()
    assert secret_job["uids"], "no process in the job's group"
    for line in secret_job["uids"]:
        assert line.split()[0] == lab_uid, line
    # the training process itself is among them (not only its launcher), and it is the job's recorded child
    child = str(secret_job["state"]["child_pid"])
    trainer = [line for line in secret_job["uids"] if line.split()[1] == child]
    assert trainer and "llamafactory-cli" in trainer[0], (child, secret_job["uids"])


@on_a_host
def test_secrets_are_never_on_a_command_line(lab: Lab, secret_job: dict) -> None:
    for secret in (SECRET_IN_SPEC, SECRET_ON_LAPTOP, VALUE_SECRET):
        assert not [c for c in secret_job["sent"] if secret in c], "a command sent by submit carries it"
        assert secret not in secret_job["cmdlines"], "a process on the host has it in its argv"


@on_a_host
def test_secrets_are_in_no_record_log_or_cache(lab: Lab, secret_job: dict) -> None:
    job_dir = f"{JOBS_DIR}/{secret_job['id']}"
    leaks = lab.host.exec(
        ["grep", "-rlF", "-e", SECRET_IN_SPEC, "-e", SECRET_ON_LAPTOP, "-e", VALUE_SECRET, job_dir, "/tmp"],
        check=False,
    ).stdout
    assert leaks == "", f"on the host: {leaks}"
    record = json.loads(lab.host.exec(["cat", f"{job_dir}/job.json"]).stdout)
    # the names only, to resume with; EXPERIMENT_TRACKER by its value (a URL with a password)
    assert sorted(record["secret_names"]) == sorted(["HF_TOKEN", SPEC_SECRET_NAME, VALUE_SECRET_NAME])
    assert SPEC_SECRET_NAME not in record["env"] and VALUE_SECRET_NAME not in record["env"]
    gone = lab.host.exec(["test", "-e", f"{job_dir}/env.secret"], check=False).returncode != 0
    assert gone  # read and deleted by the launcher before training started
    home = Path(lab.env["RADEONLAB_HOME"])
    for path in (p for p in home.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert SECRET_IN_SPEC.encode() not in data and SECRET_ON_LAPTOP.encode() not in data, path
        assert VALUE_SECRET.encode() not in data, path


@on_a_host
def test_the_laptops_hf_token_reaches_the_training_process(secret_job: dict) -> None:
    assert f"HF_TOKEN={SECRET_ON_LAPTOP}" in secret_job["environ"]


@on_a_host
def test_the_specs_secret_reaches_the_training_process(secret_job: dict) -> None:
    assert f"{SPEC_SECRET_NAME}={SECRET_IN_SPEC}" in secret_job["environ"]
    assert f"{VALUE_SECRET_NAME}={VALUE_SECRET}" in secret_job["environ"]


def test_quote_argv_is_the_only_way_commands_are_built() -> None:
    """Remote commands come from radeonlab.jobs.ssh.connection.quote_argv / shlex; no f-string is sent to
    Remote.run."""
    offenders = []
    for path in sorted((REPO / "src/radeonlab/jobs").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run", "_exec", "_channel")
                and node.args
                and isinstance(node.args[0], (ast.JoinedStr, ast.BinOp))  # a command text built by hand
            ):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == [], "a remote command built as a string instead of an argv list"
