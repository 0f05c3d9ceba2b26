#!/usr/bin/env bash
# The main job on embedded defaults: set up, then plan a rebalance of the shipped example cluster
# with AvgShedder over two consecutive runs (a large gap fires on the second run) and list the
# bundles Pulsar's split rules would split.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
load_data=${1:-examples/load-data.json}
echo "== AvgShedder plan for $load_data (2 consecutive runs)"
.venv/bin/pulsar-rebalance shed --load-data "$load_data" --strategy AvgShedder --runs 2
echo "== UniformLoadShedder plan"
.venv/bin/pulsar-rebalance shed --load-data "$load_data" --strategy UniformLoadShedder
echo "== split candidates"
.venv/bin/pulsar-rebalance split-candidates --load-data "$load_data"
