#!/usr/bin/env bash
# Install Proctor with its test tools (as root, a Docker daemon too: scripts/docker-daemon.sh),
# lint, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/docker-daemon.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
