#!/usr/bin/env bash
# Run radeonlab's tests on this machine (as root).
#   ./scripts/test.sh          the whole suite (what CI runs): unit and fixture tests, and the end-to-end tests
#                              on SIMULATED Radeon workstations (sandbox hosts)
#   ./scripts/test.sh --fast   the lane to run before a commit: ruff, mypy and every test that needs no sandbox
#                              host
# Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Both lanes run in pytest-xdist workers (tests/conftest.py's scheduler keeps each test file, and the
# provisioning files' shared hosts, in one worker). The full run takes three on CI's two cores: an end-to-end
# test spends much of its time waiting (SSH, sleeps while a job trains, servers), so a third worker fills
# it (the whole suite on a fresh clone here: 2379-2504 s with two workers, 2186 s with three). The fast lane,
# CPU-bound unit tests, takes two. RADEONLAB_TEST_WORKERS=N sets the number; 1 runs the tests in this process.
workers=${RADEONLAB_TEST_WORKERS:-3}
lane=(--durations=15)
if [ "${1:-}" = "--fast" ]; then
  shift
  lane=(-m "not sandbox and not slow")
  workers=${RADEONLAB_TEST_WORKERS:-2}
fi
[ "$workers" -gt 1 ] && lane+=(-n "$workers")
bash scripts/bootstrap.sh
.venv/bin/ruff check .
# The type checker ([tool.mypy] in pyproject.toml: every module, strict on contract/ and jobs/plan); its cache is
# .mypy_cache (gitignored), so a second run reads only what changed.
.venv/bin/mypy
# The documentation site must build (mkdocs.yml: strict, so a broken link or nav entry fails); a scratch
# output folder, never the checkout.
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
set +e
.venv/bin/python -m pytest "${lane[@]}" "$@"
rc=$?
set -e
# pytest's 5 means no test ran: that is a failure here, never a pass.
[ "$rc" = 5 ] && echo "test: no tests were collected" >&2
exit "$rc"
