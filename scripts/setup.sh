#!/usr/bin/env bash
# Create .venv and install the project with every extra and its dev tools (the `dev` extra, and the dev tools'
# own distribution in devtools/: `pulsar-rebalance-dev`), both editable, on the versions constraints.txt pins.
# Idempotent: reinstalls only when a pyproject.toml or constraints.txt changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

python_bin=${PYTHON:-}
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin=$candidate; break; fi
  done
fi
"$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "setup: Python 3.11 or newer is required (found $("$python_bin" --version 2>&1))" >&2
  exit 1
}

[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml devtools/pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[dev]' -e ./devtools -c constraints.txt
  rm -f .venv/.installed-*
  touch "$stamp"
fi
