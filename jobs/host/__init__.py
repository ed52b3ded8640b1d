"""Files shipped to the workstations (package data): the host-side launcher script."""
