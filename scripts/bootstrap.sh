#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (as root) to run radeonlab's sandbox, demo and tests:
# the machine packages the sandbox needs, and a venv (.venv) with radeonlab and its test tools.
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "bootstrap: run as root (the sandbox needs mount, unshare and chroot)" >&2; exit 1; }

# debootstrap builds the sandbox hosts; gnupg signs the simulated AMD apt repository; apt-utils has
# apt-ftparchive; openssh-client talks to the hosts; sqlite3 is handy to read the job store; chromium is the
# browser the dashboard's test drives headless (through the playwright package, never its own browser download);
# tmux is the terminal the interactive tests (watch's panel, chat) type into and read back.
apt_packages=(debootstrap gnupg apt-utils openssh-client iproute2 util-linux sqlite3 curl chromium tmux)
missing=()
for p in "${apt_packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: machine packages: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || { echo "bootstrap: making .venv ($PY)"; "$PY" -m venv .venv; }
# uv installs the packages (pip where uv cannot be installed): scripts/installer.sh. Their output goes to a
# log file (one line per step here); a failure names it and shows its last lines.
source scripts/installer.sh
choose_installer
echo "bootstrap: $INSTALLER: radeonlab and its test tools into .venv ..."
venv_install radeonlab -e ".[test,bench]"
# What the laptop side of the sandbox needs to make the tiny model and read adapters (torch, transformers,
# tokenizers, peft): the versions come from src/radeonlab/roles/python_stack/defaults.py, the one place they are pinned.
mapfile -t laptop_reqs < <(.venv/bin/python -m radeonlab.sandbox laptop-requirements)
echo "bootstrap: $INSTALLER: the laptop side's ${laptop_reqs[*]} (CPU torch: a minute or more the first time) ..."
venv_install laptop "${laptop_reqs[@]}"
echo "bootstrap: ready (.venv)"
