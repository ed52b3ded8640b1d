"""pyinfra inventory of the SIMULATED sandbox workstations: `pyinfra inventories/sandbox.py deploy/setup.py`.

The inventory itself is src/radeonlab/sandbox/inventory.py (installed with the package, so the sandbox uses
it too); every top-level list there is a pyinfra group, and this file takes them all.
"""

from radeonlab.sandbox.inventory import *  # noqa: F403  (the groups: workstations, and those the test bed names)
