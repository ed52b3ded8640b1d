"""The CLI's conventions, the same for every verb (radeonlab/cli/__init__.py, options.py): help, one error
format `radeonlab: error: ...`, exit 2 for usage and input errors, where the inventory comes from (options
before the verb, the environment, the user config file), job references (a unique prefix, @last), shell
completion, and no traceback from a library's error unless --debug.

No host is reached: inventories name hosts that listen nowhere (127.0.77.250:1, connection refused at once),
and what a verb tried to reach shows which inventory and which job it resolved."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest
from click.testing import CliRunner, Result

from radeonlab.cli import VERBS, main
from radeonlab.cli.options import CONFIG_ENV, INVENTORY_ENV, LIMIT_ENV
from radeonlab.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, InputError, JobNotFoundError
from radeonlab.jobs.fleet import store
from radeonlab.jobs.track import handle as handle_module
from radeonlab.jobs.track.handle import resolve_ref

CLOSED = '{"ssh_hostname": "127.0.77.250", "ssh_port": 1, "ssh_user": "lab"}'
INVENTORY = f'hosts = [("a", {CLOSED}), ("b", {CLOSED})]\n'
IDS = ["demo-20260101-000000-aaaa", "demo-20260102-000000-bbbb", "seed-20260103-000000-cccc"]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A laptop with no inventory configured anywhere: a fresh RADEONLAB_HOME, no config file, a working
    directory without inventories/home.py. Returns the folder holding inv.py (two closed hosts)."""
    for name in (INVENTORY_ENV, LIMIT_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "no-config.toml"))
    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inv.py").write_text(INVENTORY)
    return tmp_path


def cli(*args: str) -> Result:
    """`radeonlab ARGS` in this process (the name the console script gives it; CliRunner's would be `cli`)."""
    return CliRunner().invoke(main, list(args), prog_name="radeonlab", catch_exceptions=False)


def error_line(result: Result, code: int) -> str:
    """The one `radeonlab: error:` line, after asserting the exit code and that nothing else was printed."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("radeonlab: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def remember(*ids: str) -> None:
    """Jobs the laptop's cache knows (as `submit` or `list` leave them), oldest first."""
    with contextlib.closing(store.connect()) as conn:
        for job_id in ids:
            created = f"{job_id.split('-')[1][:4]}-01-0{job_id.split('-')[1][-1]}T00:00:00Z"
            job = {"id": job_id, "name": job_id.split("-")[0], "created_at": created, "gpus": [0]}
            store.upsert_from_host(conn, store.HostJob("a", f"/j/{job_id}", job, {"state": "running"}))


# --- help and usage errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_has_help(verb: str) -> None:
    result = cli(verb, "--help")
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.startswith(f"Usage: radeonlab {verb} "), result.stdout  # click's, for every verb
    assert "Options:" in result.stdout


def test_sandbox_is_a_click_group_that_hides_its_internal_verb() -> None:
    """`radeonlab sandbox --help` was argparse's and listed laptop-requirements, which only
    scripts/bootstrap.sh calls: it is hidden now and still answers, as `python -m radeonlab.sandbox`."""
    shown = cli("sandbox", "--help").stdout
    assert shown.startswith("Usage: radeonlab sandbox [OPTIONS] COMMAND [ARGS]...")
    listed = shown.split("Commands:")[1].split()
    assert {"up", "provision", "down", "status", "demo"} <= set(listed) and "laptop-requirements" not in shown
    assert cli("sandbox", "up", "--help").stdout.startswith("Usage: radeonlab sandbox up [OPTIONS]")
    done = subprocess.run([sys.executable, "-m", "radeonlab.sandbox", "laptop-requirements"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = [line.split("==")[0] for line in done.stdout.split()]
    assert names == ["torch", "transformers", "peft", "safetensors"]
    line = error_line(cli("sandbox", "up", "--cards", "rx1"), EXIT_USAGE)  # bad input: one line, nothing made
    assert line.startswith("radeonlab: error: --cards rx1: no simulated card 'rx1' (rx7900xtx, ")


def test_the_top_level_help_lists_every_verb_and_the_exit_codes() -> None:
    result = cli("--help")
    assert result.exit_code == EXIT_OK
    assert all(f"  {verb} " in result.stdout or f"  {verb}\n" in result.stdout for verb in VERBS), (
        result.stdout
    )
    assert "0 ok, 1 a job or host failed, 2 a usage or input error" in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["frobnicate"], "No such command 'frobnicate'. (see radeonlab --help)"),
        (["status"], "Missing argument 'JOB'. (see radeonlab status --help)"),
        (["list", "--no-such-option"], "No such option '--no-such-option'. (see radeonlab list --help)"),
        (["completion", "tcsh"], "Invalid value for '{bash|zsh|fish}': 'tcsh' is not one of"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    assert says in error_line(cli(*args), EXIT_USAGE)


@pytest.mark.parametrize("ref", ["Demo_1", "../etc", "a;b", "demo-2026 01"])
def test_a_bad_job_id_is_an_input_error(lab: Path, ref: str) -> None:
    line = error_line(cli("status", ref, "-i", "inv.py"), EXIT_USAGE)
    assert (
        line == f"radeonlab: error: not a radeonlab job id: {ref!r} (ids look like demo-20250101-120000-ab12)"
    )


def test_no_inventory_anywhere_names_every_way_to_give_one(lab: Path) -> None:
    line = error_line(cli("list"), EXIT_USAGE)
    assert "-i FILE" in line and INVENTORY_ENV in line and str(lab / "no-config.toml") in line


# --- where the inventory and --limit come from -----------------------------------------------------------
def tried(result: Result) -> list[str]:
    """The hosts a `list` run reached for (each is unreachable here: its name starts a stderr line)."""
    return [line.split(":")[0] for line in result.stderr.splitlines() if ": unreachable (" in line]


def test_options_before_the_verb(lab: Path) -> None:
    result = cli("-i", "inv.py", "--limit", "b", "list")
    assert result.exit_code == EXIT_FAILURE, result.output  # b is unreachable: shown from the cache
    assert tried(result) == ["b"]
    assert "b: unreachable (cannot reach b (127.0.77.250:1)" in result.stderr
    assert tried(cli("-i", "inv.py", "list")) == ["a", "b"]
    assert tried(cli("-i", "nope.py", "list", "-i", "inv.py")) == ["a", "b"]  # the verb's own option wins


def test_the_user_config_file_is_used_when_nothing_else_says(
    lab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "conf" / "config.toml"
    config.parent.mkdir()
    config.write_text('inventory = "../inv.py"  # relative to this file\nlimit = "a"\n')
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.chdir(config.parent)  # elsewhere: the relative path is the config file's, not the cwd's
    assert tried(cli("list")) == ["a"]
    assert tried(cli("list", "--limit", "b")) == ["b"]  # an option beats the config file
    monkeypatch.setenv(LIMIT_ENV, "a,b")
    assert tried(cli("list")) == ["a", "b"]  # ... and so does the environment
    config.write_text("inventory = [broken\n")
    line = error_line(cli("list"), EXIT_USAGE)
    assert line.startswith(f"radeonlab: error: {config}: not a valid config file: ")


# --- job references -------------------------------------------------------------------------------------
def not_found_id(result: Result) -> str:
    """The job id a handle looked for (it is on no host here: every host is closed)."""
    line = error_line(result, EXIT_FAILURE)  # hosts did not answer: a host failure, not bad input
    assert " on a, b; unreachable: a (cannot reach a " in line, line
    return line.removeprefix("radeonlab: error: no job ").split(" ")[0]


def test_a_unique_prefix_and_last_resolve_from_the_local_cache(lab: Path) -> None:
    remember(*IDS)
    assert not_found_id(cli("status", "seed", "-i", "inv.py")) == IDS[2]
    assert not_found_id(cli("logs", "demo-20260102", "-i", "inv.py")) == IDS[1]
    assert not_found_id(cli("status", "@last", "-i", "inv.py")) == IDS[2]  # the newest job
    assert not_found_id(cli("cancel", IDS[0], "-i", "inv.py")) == IDS[0]  # a full id needs no cache


def test_an_ambiguous_or_unknown_prefix_is_refused(lab: Path) -> None:
    remember(*IDS)
    line = error_line(cli("status", "demo", "-i", "inv.py"), EXIT_USAGE)
    assert line == f"radeonlab: error: 'demo' matches 2 jobs ({IDS[1]}, {IDS[0]}...): type more of the id"
    line = error_line(cli("status", "zzz", "-i", "inv.py"), EXIT_USAGE)
    assert "no job id starting with 'zzz' is known on this laptop" in line


def test_resolve_ref_without_a_cache() -> None:
    assert resolve_ref(IDS[0], []) == IDS[0]  # a full id is taken as it is
    with pytest.raises(JobNotFoundError, match="@last: no job is known on this laptop yet"):
        resolve_ref("@last", [])
    with pytest.raises(InputError, match="not a radeonlab job id"):
        resolve_ref("", [])


def test_shell_completion_offers_job_ids_from_the_cache(lab: Path) -> None:
    """What bash asks the installed `radeonlab` while the user types `radeonlab status de<TAB>`."""
    remember(*IDS)
    exe = Path(sys.executable).with_name("radeonlab")
    env = {**os.environ, "_RADEONLAB_COMPLETE": "bash_complete", "COMP_CWORD": "2"}
    done = subprocess.run(
        [str(exe)], env={**env, "COMP_WORDS": "radeonlab status de"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"plain,{IDS[1]}", f"plain,{IDS[0]}"]  # newest first, no SSH
    last = subprocess.run(
        [str(exe)], env={**env, "COMP_WORDS": "radeonlab fetch @"}, capture_output=True, text=True
    )
    assert last.stdout.splitlines() == ["plain,@last"]
    verbs = subprocess.run(
        [str(exe)],
        env={**env, "COMP_WORDS": "radeonlab st", "COMP_CWORD": "1"},
        capture_output=True,
        text=True,
    )
    assert verbs.stdout.splitlines() == ["plain,status"]


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _radeonlab_completion radeonlab"),
        ("zsh", "#compdef radeonlab"),
        ("fish", "complete --no-files --command radeonlab"),
    ],
)
def test_completion_prints_the_shells_script(shell: str, marker: str) -> None:
    result = cli("completion", shell)
    assert result.exit_code == EXIT_OK and marker in result.stdout and "_RADEONLAB_COMPLETE" in result.stdout


# --- a library's error: one line, the traceback only with --debug ----------------------------------------
@pytest.fixture
def silent_inventory(lab: Path) -> Iterator[Path]:
    """An inventory whose one host accepts TCP (and says nothing): connecting gets as far as SSH."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        (lab / "silent.py").write_text(
            f'hosts = [("s", {{"ssh_hostname": "127.0.0.1", "ssh_port": {port}}})]\n'
        )
        yield lab / "silent.py"


def test_a_paramiko_error_at_connect_is_one_line(
    silent_inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """paramiko fails during the SSH handshake: the transport says which host and why, in one line."""

    def refuse(self: paramiko.Transport, *_a: object, **_k: object) -> None:
        raise paramiko.SSHException("Incompatible ssh peer (no acceptable kex algorithm)")

    monkeypatch.setattr(paramiko.Transport, "start_client", refuse)
    line = error_line(cli("status", IDS[0], "-i", str(silent_inventory)), EXIT_FAILURE)
    assert line.endswith("SSH connection failed: Incompatible ssh peer (no acceptable kex algorithm))"), line


def test_an_untranslated_library_error_shows_its_traceback_only_with_debug(
    lab: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_target: object) -> None:
        raise paramiko.SSHException("banner mangled")  # as if it escaped jobs/ssh's translation

    monkeypatch.setattr(handle_module, "connect", broken)
    line = error_line(cli("status", IDS[0], "-i", "inv.py"), EXIT_FAILURE)
    assert line == "radeonlab: error: SSHException: banner mangled (--debug shows where)"
    debug = cli("--debug", "status", IDS[0], "-i", "inv.py")
    assert debug.exit_code == EXIT_FAILURE
    assert "Traceback (most recent call last)" in debug.stderr and "in broken\n" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == line


# --- README's verb table is the CLI's ----------------------------------------------------------------------
def readme_verb_rows() -> dict[str, list[str]]:
    """README "The CLI": verb -> its row's cells (verb, hosts, --json, exit status)."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = text.split("| verb | hosts | `--json` |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].strip("`").split()[0]] = cells
    return rows


def test_the_readme_verb_table_names_every_verb_with_the_options_it_says() -> None:
    rows = readme_verb_rows()
    assert sorted(rows) == sorted(VERBS)
    for verb, (_, hosts, as_json, _) in rows.items():
        # a group's options are its subcommands' (`models pull|list|rm`)
        shown = cli(*verb.split(), *(["list"] if verb == "models" else []), "--help").stdout
        if "--limit" in hosts:
            assert "--limit" in shown, verb
        if "--host" in hosts:
            assert "--host" in shown, verb
        if as_json.startswith(("yes", "JSON lines", "with")):
            assert "--json" in shown, verb
        elif as_json == "no":
            assert "--json" not in shown, verb


def test_prune_dry_run_names_the_jobs_it_would_remove(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`prune --dry-run` said "would remove 2 job folder(s)" without saying which: it lists them, each with
    its age and size as the host reported them (--json carries them), or the id alone from an older host."""
    from radeonlab.jobs.fleet import inventory
    from radeonlab.jobs.ssh import group

    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(inventory, "load_inventory", lambda path: {"ws1": object()})
    monkeypatch.setattr(inventory, "select_hosts", lambda targets, limit: list(targets.values()))
    removed = ["demo-20260101-000000-aaaa", "sweep-20260102-000000-bbbb"]
    jobs = [{"id": removed[0], "age_s": 45 * 86400 + 300, "bytes": 3_500}, {"id": removed[1], "age_s": 5400}]
    answer = {"removed": removed, "jobs": jobs, "blobs": 3, "bytes": 4096}
    older = {"removed": removed, "blobs": 3, "bytes": 4096}  # a host whose tool predates "jobs"
    monkeypatch.setattr(
        group,
        "each_host",
        lambda targets, fn, deadline: [group.HostResult("ws1", answer), group.HostResult("ws2", older)],
    )
    result = CliRunner().invoke(main, ["prune", "--older-than", "30d", "--dry-run", "-i", "inv.py"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "ws1: would remove 2 job folder(s) and 3 stored file(s), 4,096 bytes",
        "  demo-20260101-000000-aaaa  ended 45d ago, 3.5 KB",
        "  sweep-20260102-000000-bbbb  ended 1h ago",
        "ws2: would remove 2 job folder(s) and 3 stored file(s), 4,096 bytes",
        "  demo-20260101-000000-aaaa",
        "  sweep-20260102-000000-bbbb",
    ]
    shown = CliRunner().invoke(main, ["prune", "--older-than", "30d", "--dry-run", "--json", "-i", "inv.py"])
    assert json.loads(shown.output)[0]["jobs"] == jobs


def test_two_jobs_fetched_with_the_same_to_keep_both_adapters(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`fetch A --to runs/` then `fetch B --to runs/` wrote both flat into runs/: B's adapter replaced A's.
    `--to DIR` puts each job's files in DIR/JOB, so both adapters stay (the transfer itself is stubbed: it
    writes the adapter each job's host would send)."""
    from radeonlab.jobs.ssh.transfer import FetchReport, FileTransfer
    from radeonlab.jobs.track import results

    ADAPTER = "output/adapter_model.safetensors"

    class Handle(contextlib.nullcontext):
        def __init__(self, job_id: str) -> None:
            super().__init__()
            self.id, self.remote = job_id, None
            self.job, self.dir = SimpleNamespace(model={}), SimpleNamespace(root=f"/srv/jobs/{job_id}")

        def __enter__(self) -> Handle:
            return self

    def fake_fetch(remote, root, local: Path, names, under, progress) -> FetchReport:
        adapter = local / ADAPTER
        adapter.parent.mkdir(parents=True, exist_ok=True)
        adapter.write_text(f"weights of {Path(root).name}")  # the job folder it came from
        return FetchReport([FileTransfer(ADAPTER, "0" * 64, 1, 1, False)])

    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(handle_module.JobHandle, "open", lambda ref, inventory, host: Handle(ref))
    monkeypatch.setattr(results, "wanted_files", lambda handle, checkpoint: [ADAPTER])
    monkeypatch.setattr(results, "fetch", fake_fetch)
    runs = tmp_path / "runs"
    for job_id in IDS[:2]:
        result = CliRunner().invoke(main, ["fetch", job_id, "--to", str(runs), "-i", "inv.py"])
        assert result.exit_code == 0, result.output
        assert f"results in {runs / job_id}" in result.output
    assert sorted(p.name for p in runs.iterdir()) == IDS[:2]
    for job_id in IDS[:2]:
        assert (runs / job_id / ADAPTER).read_text() == f"weights of {job_id}"
        assert json.loads((runs / job_id / "base_model.json").read_text())["job"] == job_id
