"""pyinfra inventories: home.py to edit, sandbox.py for the SIMULATED sandbox hosts (installed as
radeonlab.inventories)."""
