#!/usr/bin/env bash
# Install Proctor with its test tools (as root, a Docker daemon too: scripts/docker-daemon.sh),
# build the S3 server of the object store's tests (scripts/s3-server.sh), lint, type-check,
# bring up the real Kubernetes of scripts/cluster.sh where one can start (root, Docker,
# mmdebstrap, and Go or a cached build of its binaries), and run the whole test suite.
# A cluster already running is used and left running; one started here is stopped at the end.
# Where none can start, the real-cluster tests skip, saying why (PROCTOR_REQUIRE_CLUSTER=1:
# they fail instead).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
bash scripts/docker-daemon.sh
# The object store's tests run against a real S3 server built with Go (2 to 3 minutes the
# first time, then cached); where it cannot build they skip or, with PROCTOR_REQUIRE_S3=1,
# fail, saying why.
bash scripts/s3-server.sh build >/dev/null || echo "test.sh: the S3 server did not build (above)"
.venv/bin/ruff check .
# [tool.mypy] in pyproject.toml: the package; strict on core, k8s, local, runner, sandboxes, store
.venv/bin/mypy

started=""
why=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "tests"); from support import real_cluster; print(real_cluster.missing() or "")')
if [ -n "$why" ]; then
  echo "test.sh: no real cluster here, so the real-cluster tests skip: $why"
else
  case $(bash scripts/cluster.sh status) in *"kubelet: running"*) ;; *) started=1 ;; esac
  [ -z "$started" ] || trap 'bash scripts/cluster.sh down' EXIT
  SECONDS=0
  if line=$(bash scripts/cluster.sh up | tail -n1); then
    how="already running"; [ -z "$started" ] || how="started here"
    echo "test.sh: the real cluster was up in ${SECONDS}s ($how):"
    "$(.venv/bin/python tests/support/k8s_tools.py kubectl)" --kubeconfig "${line#KUBECONFIG=}" version
  else
    echo "test.sh: scripts/cluster.sh up failed (above): the real-cluster tests will try again"
  fi
  # Kueue's manager takes minutes to build the first time: in the background, while the
  # tests before tests/cluster/test_cluster_kueue.py run (its `scripts/kueue.sh up` waits for it,
  # and says why if it failed).
  bash scripts/kueue.sh build >/dev/null 2>&1 &
fi
df -h . | awk 'NR == 2 {print "test.sh: " $4 " free on the disk of the checkout (" $5 " used)"}'
# PROCTOR_TEST_DEADLINE (epoch seconds; CI sets it): interrupt pytest then, as Ctrl-C does,
# so that it still prints what failed and why, rather than being killed without a word.
limit=0  # none
if [ -n "${PROCTOR_TEST_DEADLINE:-}" ]; then
  limit=$(( PROCTOR_TEST_DEADLINE - $(date +%s) )); [ "$limit" -gt 0 ] || limit=1
fi
timeout --signal INT --kill-after 120 "$limit" .venv/bin/python -m pytest "$@"
