#!/usr/bin/env bash
# Quick start: install Proctor and validate the bundled demo dataset end to end
# (every task with its gold patch, then with no patch), in the process sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/proctor validate -f examples/demo-gold.yaml --output-dir "${1:-proctor-results/demo}"
