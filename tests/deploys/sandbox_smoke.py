"""A tiny deploy for tests/e2e/test_sandbox.py: a group and a file, changed once then left alone.

No `_sudo=` here: it comes from inventories/sandbox.py's host data, which this deploy checks.
"""

from io import StringIO

from pyinfra import host
from pyinfra.operations import files, server

server.group(name="Ensure group radeonlab-smoke", group="radeonlab-smoke", system=True)

files.put(
    name="Write /etc/radeonlab-smoke",
    src=StringIO(f"card={host.data.get('sandbox_card')}\n"),
    dest="/etc/radeonlab-smoke",
    user="root",
    group="radeonlab-smoke",
    mode="640",
)
