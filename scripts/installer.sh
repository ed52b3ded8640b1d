# Sourced by scripts/bootstrap.sh (bash): what installs the laptop's packages into a venv ($VENV, default .venv).
#   choose_installer      uv into the venv from its hash-pinned wheel (once), else pip; sets INSTALLER
#   venv_install STEP ARGS...   `uv pip install ARGS` (or `pip install ARGS`) into the venv, its output in
#                               $VENV/logs/STEP.log: one line here, or the log's last lines on a failure
# uv (Astral's Rust installer: parallel downloads, files linked from its cache, ~/.cache/uv, so a re-run links
# instead of unpacking) is the same pin the workstations get: python_stack_uv_version and
# python_stack_uv_sha256 in src/radeonlab/roles/python_stack/defaults.py (PyPI's
# uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl; tests/e2e/test_bootstrap.py keeps the two
# equal). pip installs instead where that wheel cannot be installed (no x86_64 Linux, no PyPI, another file
# under its name) or when RADEONLAB_BOOTSTRAP_INSTALLER=pip (the documented fallback setting).
UV_VERSION=0.13.9
UV_SHA256=d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19
VENV=${VENV:-.venv}

choose_installer() {
  mkdir -p "$VENV/logs"
  INSTALLER=${RADEONLAB_BOOTSTRAP_INSTALLER:-uv}
  [ "$INSTALLER" = uv ] || { INSTALLER=pip; return 0; }
  # uv says "uv 0.13.9 (x86_64-unknown-linux-gnu)": that version there, nothing to install
  case "$("$VENV/bin/uv" --version 2>/dev/null)" in "uv $UV_VERSION "*) return 0 ;; esac
  local log=$VENV/logs/uv.log
  echo "uv==$UV_VERSION --hash=sha256:$UV_SHA256" >"$VENV/logs/uv-pin.txt"
  # pip refuses any other file under uv's name (--require-hashes) and installs nothing then
  if "$VENV/bin/pip" install --disable-pip-version-check --require-hashes --no-deps -r "$VENV/logs/uv-pin.txt" \
    >"$log" 2>&1; then
    echo "bootstrap: uv $UV_VERSION from its hash-pinned wheel into $VENV"
  else
    INSTALLER=pip
    echo "bootstrap: uv $UV_VERSION could not be installed from its hash-pinned wheel ($log); pip installs instead"
  fi
}

venv_install() {  # STEP-NAME ARGS...
  local log=$VENV/logs/$INSTALLER-$1.log; shift
  local t0=$SECONDS
  local cmd=("$VENV/bin/pip" install --disable-pip-version-check)
  [ "$INSTALLER" = uv ] && cmd=("$VENV/bin/uv" pip install --python "$VENV/bin/python")
  if ! "${cmd[@]}" "$@" >"$log" 2>&1; then
    echo "bootstrap: $INSTALLER failed; its output: $log (last lines below)" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  echo "bootstrap:   done in $((SECONDS - t0))s ($INSTALLER's output: $log)"
}
