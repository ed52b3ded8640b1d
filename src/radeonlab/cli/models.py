"""`radeonlab models pull|list|rm`: the Hub models in the workstations' shared caches."""

from __future__ import annotations

import json
import threading
from typing import Any

import click

from radeonlab.cli.options import (
    echo_json,
    inventory_option,
    inventory_path,
    json_option,
    limit_option,
    limit_value,
)

PULL_TIMEOUT_S = 24 * 3600.0  # a 70B model over a slow link; each host reports its own failure sooner


def _hosts(inventory: str | None, limit: str | None) -> tuple[str, list[Any]]:
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts

    inv = inventory_path(inventory)
    return inv, select_hosts(load_inventory(inv), limit_value(limit))


def _hub_env(record: Any, target: Any, token: Any) -> dict[str, str]:
    from radeonlab.jobs.plan.model import ENDPOINT_KEY

    env = {"HF_HUB_CACHE": record.model_cache} if record.model_cache else {}
    if target.data.get(ENDPOINT_KEY):
        env["HF_ENDPOINT"] = str(target.data[ENDPOINT_KEY])
    if token is not None and token.value:
        env["HF_TOKEN"] = token.value  # on the channel's stdin, never in argv
    return env


@click.group("models")
def command() -> None:
    """The Hub models each workstation's shared cache holds (every job of a host uses that cache)."""


@command.command("pull")
@click.argument("model")
@click.option("--revision", default=None, help="a branch, tag or commit (default: main)")
@inventory_option
@limit_option
@json_option
def pull(model: str, revision: str | None, inventory: str | None, limit: str | None, as_json: bool) -> None:
    """Download MODEL into the cache of every selected host, with progress per host: from the Hub on one
    host (the lab cache host when the inventory names one), copied from there to the others, each file
    checked against the Hub's sha256 or ETag. The Hub is asked from here first (unknown, gated without
    access: refused before any host downloads). Exit 1 when a host failed."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from radeonlab.errors import ModelError
    from radeonlab.jobs.fleet import modelcopy
    from radeonlab.jobs.fleet.inventory import load_inventory
    from radeonlab.jobs.fleet.probe import read_host, require_record
    from radeonlab.jobs.spec import hub
    from radeonlab.jobs.ssh.connection import connect
    from radeonlab.jobs.ssh.group import HostResult, each_host

    inv, targets = _hosts(inventory, limit)
    token = hub.laptop_token()
    endpoint = next(
        (str(t.data["radeonlab_hf_endpoint"]) for t in targets if t.data.get("radeonlab_hf_endpoint")), None
    )
    answer = hub.resolve_model(model, revision=revision, endpoint=endpoint, token=token)
    if answer.answer not in (hub.Answer.HUB, hub.Answer.UNREACHABLE):
        raise ModelError(answer.message)
    rev = answer.sha or revision or "main"
    # Every host gets the commit the laptop resolved; the branch or tag it came from is recorded beside it,
    # so a job naming `main` finds the model in the cache when the Hub is down.
    named = revision or "main"
    pin = ["--revision", rev, *(["--ref", named] if named != rev else [])]
    total = sum(f.size for f in answer.files) or None
    files = modelcopy.hub_files(answer.files)
    lock = threading.Lock()
    records: dict[str, Any] = {}
    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
        disable=as_json,
    )

    def one(remote: Any) -> dict[str, Any]:
        """From the Hub, with the token (the only hosts that ever get it)."""
        record = require_record(read_host(remote, jobs="none"), inv)
        target = remote.target
        with lock:
            records[target.name] = record
            task = bars.add_task(target.name, total=total)
        python = f"{record.venv}/bin/python"
        last: dict[str, Any] = {}
        with remote.open_tool(
            "models", ["pull", model, *pin], python=python, env=_hub_env(record, target, token)
        ) as chan:
            chan.close_input()
            while (event := chan.read_json()) is not None:
                last = event
                if event.get("event") == "progress":
                    bars.update(task, completed=event.get("bytes_done"), total=event.get("bytes_total"))
            code, err = chan.finish()
        if code != 0:
            raise ModelError(f"{target.name}: {last.get('message') or err or f'exit {code}'}")
        return last

    def copied(remote: Any) -> dict[str, Any]:
        """From the source host's cache; what the receiver refuses twice comes from the Hub after all."""
        record = require_record(read_host(remote, jobs="none"), inv)
        with lock:
            task = bars.add_task(f"{remote.target.name} <- {source.name}", total=total)
        with connect(source) as from_remote:
            done = modelcopy.copy_model(
                modelcopy.Side.of(from_remote, records[source.name]),
                modelcopy.Side.of(remote, record),
                model, rev, named, files, lambda n: bars.advance(task, n),
            )  # fmt: skip
        row = {"repo": model, "sha": rev, "fetched": 0, "copied": done["copied"], "from": source.name}
        if done["refused"]:
            row["refused"] = done["refused"]
        return row if done["complete"] else {**row, **one(remote)}

    source = modelcopy.pick_source(targets, load_inventory(inv))
    fan_out = answer.answer is hub.Answer.HUB and all(f["etag"] for f in files)
    with bars:
        if not fan_out:  # the laptop cannot check copies against the Hub: every host asks it, as before
            results = each_host(targets, one, PULL_TIMEOUT_S)
        else:
            results = each_host([source], one, PULL_TIMEOUT_S)
            rest = [t for t in targets if t.name != source.name]
            if results[0].ok:
                results += each_host(rest, copied, PULL_TIMEOUT_S)
            else:
                results += [HostResult(t.name, error=f"not copied: {source.name} failed") for t in rest]
    if as_json:
        echo_json([{"host": r.host, "error": r.error, **(r.value or {})} for r in results])
    else:
        for r in results:
            click.echo(f"{r.host}: {r.error or _pulled_line(model, rev, r.value or {})}")
    raise SystemExit(0 if all(r.ok for r in results) else 1)


def _pulled_line(model: str, rev: str, row: dict[str, Any]) -> str:
    line = f"{model}@{rev[:12]} in the cache"
    if row.get("from"):
        line += f" (copied from {row['from']}: {row.get('copied', 0):,} bytes"
        line += f", {row.get('fetched', 0):,} from the Hub)" if row.get("fetched") else ")"
    for why in (row.get("refused") or {}).values():
        line += f"; refused a copy: {why}"
    return line


@command.command("list")
@inventory_option
@limit_option
@json_option
def list_models(inventory: str | None, limit: str | None, as_json: bool) -> None:
    """What each host's cache holds: repo, revision, size, complete or not, last used."""
    from rich.console import Console
    from rich.table import Table

    from radeonlab.jobs.fleet.probe import read_host, require_record
    from radeonlab.jobs.ssh.group import each_host

    inv, targets = _hosts(inventory, limit)

    def one(remote: Any) -> list[dict[str, Any]]:
        record = require_record(read_host(remote, jobs="none"), inv)
        env = _hub_env(record, remote.target, None)
        result = remote.tool("models", ["list"], python=f"{record.venv}/bin/python", env=env)
        lines = result.stdout.strip().splitlines()
        return list(json.loads(lines[-1])) if lines else []

    results = each_host(targets, one, 60.0)
    if as_json:
        echo_json([{"host": r.host, "error": r.error, "models": r.value} for r in results])
        raise SystemExit(0 if all(r.ok for r in results) else 1)
    table = Table()
    for column in ("host", "model", "revision", "size", "complete", "last used"):
        table.add_column(column)
    for r in results:
        if r.error:
            table.add_row(r.host, f"[red]{r.error}", "", "", "", "")
        for m in r.value or []:
            for rev in m.get("revisions") or [{}]:
                refs = ",".join(rev.get("refs") or []) or "-"
                table.add_row(
                    r.host,
                    m.get("repo", "?"),
                    f"{str(rev.get('sha', '?'))[:12]} ({refs})",
                    f"{(rev.get('size') or 0) / 1e9:.2f} GB",
                    "yes" if rev.get("complete") else "no",
                    str(m.get("last_used") or "-"),
                )
    Console().print(table)
    raise SystemExit(0 if all(r.ok for r in results) else 1)


@command.command("rm")
@click.argument("model")
@click.option("--revision", default=None, help="only this revision (default: every revision)")
@inventory_option
@limit_option
@json_option
def rm(model: str, revision: str | None, inventory: str | None, limit: str | None, as_json: bool) -> None:
    """Remove MODEL from the cache of every selected host."""
    from radeonlab.jobs.fleet.probe import read_host, require_record
    from radeonlab.jobs.ssh.group import each_host

    inv, targets = _hosts(inventory, limit)

    def one(remote: Any) -> dict[str, Any]:
        record = require_record(read_host(remote, jobs="none"), inv)
        args = ["rm", model, *(["--revision", revision] if revision else [])]
        result = remote.tool(
            "models", args, python=f"{record.venv}/bin/python", env=_hub_env(record, remote.target, None)
        )
        return result.last_json()

    results = each_host(targets, one, 120.0)
    if as_json:
        echo_json([{"host": r.host, "error": r.error, **(r.value or {})} for r in results])
    else:
        for r in results:
            click.echo(f"{r.host}: {r.error or r.value}")
    raise SystemExit(0 if all(r.ok for r in results) else 1)
