"""Provision Radeon workstations: `pyinfra -y inventories/home.py deploy/setup.py`.

The composition lives in the package (src/radeonlab/deploy/setup.py), so an installed radeonlab (the sandbox,
`pip install .`) runs the same code: `pyinfra INVENTORY radeonlab.deploy.setup.provision` is this file.
"""

from radeonlab.deploy.setup import provision

provision()
