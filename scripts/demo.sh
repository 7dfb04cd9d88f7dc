#!/usr/bin/env bash
# Quick start: install Proctor, then serve the reference agents on loopback and
# evaluate each over A2A on the bundled demo dataset, end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/proctor demo --output-dir "${1:-proctor-results/demo}"
