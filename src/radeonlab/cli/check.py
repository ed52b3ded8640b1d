"""`radeonlab check SPEC`: print `file:line: severity: message (fix: ...)` per problem; exit 1 on errors.

`--host H` also looks on host H for the folders the spec names that are not on the laptop (an absolute
model_name_or_path or adapter folder: jobs/spec/paths.py), in one probe round trip, as submit does."""

from __future__ import annotations

import json
from pathlib import Path

import click

from radeonlab.cli.options import inventory_option, inventory_path
from radeonlab.errors import SpecError, shown
from radeonlab.jobs.spec import paths
from radeonlab.jobs.spec.checks import check_spec
from radeonlab.jobs.spec.load import Spec, load
from radeonlab.jobs.spec.needs import need_lines, needs
from radeonlab.jobs.spec.problems import ERROR, INFO, Problem, has_errors


def model_problems(path: Path, loaded: Spec) -> list[Problem]:
    """The spec's model as the Hub answers ($HF_ENDPOINT, $HF_TOKEN or the login file): a refusal is an
    error at model_name_or_path's line; an unreachable Hub is a note (submit asks again, and the hosts)."""
    from radeonlab.errors import ModelError
    from radeonlab.jobs.plan import model

    line = loaded.line_of("model_name_or_path")
    try:
        info = model.resolve(loaded)
    except ModelError as exc:
        if paths.hub_cache_id(str(loaded.train.get("model_name_or_path"))):
            return []  # a Hub cache folder not found here: check_spec said so, with its Hub id
        return [Problem(str(path), line, str(exc), ERROR)]
    if info.offline:
        return [Problem(str(path), line, f"{info.name}: {info.note}", INFO)]
    if info.sha:
        return [Problem(str(path), line, f"{info.name} resolves to commit {info.sha}", INFO)]
    if info.local_dir:
        folder = Path(info.local_dir)
        size = sum(p.stat().st_size for p in info.files)
        inside = loaded.base_dir.resolve() in folder.resolve().parents
        where = "" if inside else " (outside the spec's folder)"
        amount = f"{len(info.files)} file(s), {size / 1e6:.1f} MB"
        message = f"local model folder {folder}{where}: {amount} to upload (dotfiles never)"
        return [Problem(str(path), line, message, INFO)]
    return []


def host_answers(loaded: Spec, inventory: str | None, host: str) -> paths.OnHost:
    """What `host` holds of the spec's workstation folders (nothing asked when the spec names none)."""
    from radeonlab.jobs.fleet.inventory import get_host, load_inventory
    from radeonlab.jobs.fleet.probe import ProbeAsk, read_host
    from radeonlab.jobs.ssh.connection import connect

    wanted = paths.host_values(loaded)
    target = get_host(load_inventory(inventory_path(inventory)), host)
    if not wanted:
        return paths.OnHost(target.name, {})
    with connect(target) as remote:
        return paths.OnHost(target.name, read_host(remote, jobs="none", ask=ProbeAsk(tuple(wanted))).paths)


@click.command("check")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the problems as a JSON list of objects")
@click.option(
    "--dataset-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="read dataset_info.json and local datasets from this folder instead of the spec's dataset_dir",
)
@click.option("--no-hub", "hub_off", is_flag=True, help="do not ask the Hub about the spec's model")
@click.option(
    "--host",
    metavar="HOST",
    help="look on this host of the inventory for the folders the spec names that are not on this laptop "
    "(an absolute model_name_or_path or adapter_name_or_path), as submit does",
)
@inventory_option
def command(
    spec: Path,
    as_json: bool,
    dataset_dir: Path | None,
    hub_off: bool,
    host: str | None,
    inventory: str | None,
) -> None:
    """Check a job spec (LLaMA-Factory keys and values, the radeonlab block, local datasets and files, and
    the Python packages it needs on the host)."""
    try:
        loaded = load(spec)  # once: parsing is most of a large spec's time (tests/bench/checker.py)
    except SpecError as err:
        problems = [Problem(err.file, err.line, err.message)]
    else:
        on_host = host_answers(loaded, inventory, host) if host else None
        problems = check_spec(loaded, dataset_dir=dataset_dir, on_host=on_host)
        problems += need_lines(needs(loaded))  # no host here: what the job needs on one, as info lines
        if not hub_off:
            problems += model_problems(spec, loaded)
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in problems], indent=1))
    else:
        for problem in problems:
            click.echo(str(problem))
        errors = sum(p.severity == "error" for p in problems)
        summary = f"{shown(spec)}: {errors} error(s), {len(problems) - errors} other finding(s)"
        click.echo(summary, err=True)
    raise SystemExit(1 if has_errors(problems) else 0)
