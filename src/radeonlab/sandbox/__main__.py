"""`python -m radeonlab.sandbox ...` = `radeonlab sandbox ...` (the verb lives in radeonlab/cli/sandbox.py):
SIMULATED workstations from a shell, with radeonlab's one error line and exit codes."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from radeonlab.cli import cli

    args = sys.argv[1:] if argv is None else argv
    return int(cli.main(["sandbox", *args], prog_name="radeonlab", standalone_mode=False))


if __name__ == "__main__":
    sys.exit(main())
