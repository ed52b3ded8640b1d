#!/usr/bin/env bash
# Run radeonlab's whole test suite on this machine (as root): unit and fixture tests, and the
# end-to-end tests on simulated Radeon workstations (sandbox hosts). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check .
set +e
.venv/bin/python -m pytest --durations=15 "$@"
rc=$?
set -e
# pytest's 5 means no test ran: that is a failure here, never a pass.
[ "$rc" = 5 ] && echo "test: no tests were collected" >&2
exit "$rc"
