#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs Proctor into it, with test tools if asked.
# Usage: bash scripts/setup.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "Proctor needs Python 3.11+"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extra=""
[ "${1:-}" = "--test" ] && extra="[test]"
# A plain (not editable) install: what a user gets, package data included.
.venv/bin/python -m pip install -q ".${extra}"
