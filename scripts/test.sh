#!/usr/bin/env bash
# The whole test suite on a fresh machine: Python environment, system packages (PostgreSQL), lint,
# then every test. Pulsar is downloaded from Maven Central (cached under ~/.cache) by the test setup.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f scripts/install_system_deps.sh ]; then
  bash scripts/install_system_deps.sh
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports
.venv/bin/mypy  # the pure core's types: [tool.mypy] files in pyproject.toml
exec .venv/bin/python -m pytest "$@"
