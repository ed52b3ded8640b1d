"""Print the per-host verification table once, when the host-record operation has run on every host."""

from __future__ import annotations

from pyinfra.api.state import BaseStateCallback, State
from rich.console import Console
from rich.table import Table

from radeonlab.roles.verify import record as rec
from radeonlab.roles.verify.operations import RESULTS

# Hashes of the host-record operation (the same on every host: one name, one place in the deploy).
WATCHED: set[str] = set()


def render(results: dict) -> Table:
    table = Table(title="radeonlab: verified hosts")
    for column in rec.TABLE_COLUMNS:
        table.add_column(column)
    for name in sorted(results):
        record, report, checked_at = results[name]
        table.add_row(*rec.table_row(record, report, checked_at))
    return table


class PrintVerifyTable(BaseStateCallback):
    @staticmethod
    def operation_end(state: State, op_hash) -> None:
        if op_hash in WATCHED and RESULTS:
            # stderr: `pyinfra --json` keeps stdout for its own JSON.
            Console(stderr=True, width=200).print(render(RESULTS))


def register(state: State, op_hash: str) -> None:
    WATCHED.add(op_hash)
    if not any(isinstance(h, PrintVerifyTable) for h in state.callback_handlers):
        state.add_callback_handler(PrintVerifyTable())
