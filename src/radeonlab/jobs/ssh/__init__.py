"""SSH to the workstations: the only package that imports fabric and paramiko."""
