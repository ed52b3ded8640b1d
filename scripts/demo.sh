#!/usr/bin/env bash
# The README's main-job demo (as root, a few minutes on 2 cores): prepare the machine, then provision one
# SIMULATED Radeon workstation, train a LoRA on it with `radeonlab submit/watch/fetch --try`, print what was
# trained, the loss curve, the adapter's path and answer, and tear the workstation down. `scripts/demo.sh --keep`
# keeps it. State: $RADEONLAB_SANDBOX_DIR (default /var/tmp/radeonlab-sandbox), logs in its logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/radeonlab sandbox demo "$@"
