"""`radeonlab cancel JOB`: stop the job's whole process tree on its host(s) and record it as cancelled.

A multi-node job is cancelled on every rank at once (each rank's launcher records the cancel before it
signals, so no rank records the others' end as its own failure)."""

from __future__ import annotations

import contextlib
import sys
from concurrent.futures import ThreadPoolExecutor

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, job_argument, json_option


@click.command("cancel")
@job_argument
@inventory_option
@host_option
@json_option
def command(job_id: str, inventory: str, host: str | None, as_json: bool) -> None:
    """Cancel JOB: SIGTERM its process group, SIGKILL after a grace period; state becomes cancelled.

    A multi-node job is cancelled on all its hosts; JOB is found on its rank 0."""
    from radeonlab.errors import RadeonlabError
    from radeonlab.jobs.apply import launch
    from radeonlab.jobs.apply.submit import open_job
    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.fleet.inventory import load_inventory
    from radeonlab.jobs.plan import nodes as multinode
    from radeonlab.jobs.ssh.connection import TransportError

    with open_job(job_id, inventory, host) as session:
        peers = multinode.peer_hosts(session.job.host_job.job)
        targets = load_inventory(inventory) if peers else {}
        with ThreadPoolExecutor(max_workers=max(1, len(peers))) as pool:
            pending = {
                (rank, name): pool.submit(multinode.cancel_rank, targets, name, inventory, job_id)
                for rank, name in peers
            }
            result = session.remote.run(launch.cancel_argv(session.paths))
            state, _alive = launch.parse_state_output(result.stdout)
            job = session.refresh()
            ranks = []
            for (rank, name), future in pending.items():
                try:
                    peer = future.result()
                    ranks.append({"rank": rank, "host": name, "state": peer.state.value, "error": None})
                except (RadeonlabError, TransportError) as exc:  # that rank then fails on its own
                    ranks.append({"rank": rank, "host": name, "state": None, "error": str(exc)})
    with contextlib.closing(store.connect()) as conn:
        store.upsert_from_host(conn, job.host_job)
    if as_json:
        echo_json({"id": job_id, "host": session.target.name, **state.to_dict(), "peers": ranks})
    else:
        click.echo(f"{job_id} on {session.target.name}: {state.state.value} ({state.reason or 'no reason'})")
        for r in ranks:
            click.echo(f"  rank {r['rank']} on {r['host']}: {r['state'] or 'not cancelled: ' + r['error']}")
    if any(r["error"] for r in ranks):
        sys.exit(1)
