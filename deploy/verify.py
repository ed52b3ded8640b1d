"""Re-check provisioned workstations and refresh their host records: `pyinfra -y INVENTORY deploy/verify.py`.

The code lives in the package (src/radeonlab/deploy/verify.py); this file is its pyinfra entry point.
"""

from radeonlab.deploy.verify import reverify

reverify()
