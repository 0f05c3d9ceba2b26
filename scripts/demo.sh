#!/usr/bin/env bash
# The main job on embedded defaults: set up, then run the whole product on this machine — a local
# Pulsar cluster with skewed traffic, collection, a Spark plan, the Airflow approval gate (approved
# automatically unless other arguments are given, e.g. `bash scripts/demo.sh` with no --approve
# prints the Airflow UI address and waits), execution, and the measured load before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_system_deps.sh
export SPARK_LOCAL_IP=127.0.0.1
if [ "$#" -eq 0 ]; then set -- --approve; fi
exec .venv/bin/pulsar-rebalance-dev demo "$@"
