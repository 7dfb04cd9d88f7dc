#!/usr/bin/env bash
# Install Proctor with its test tools (as root, a Docker daemon too: scripts/docker-daemon.sh),
# build the S3 server of the object store's tests (scripts/s3-server.sh), lint, type-check,
# bring up the real Kubernetes of scripts/cluster.sh where one can start (root, Docker,
# mmdebstrap, and Go or a cached build of its binaries), and run the whole test suite.
# A cluster already running is used and left running; one started here is stopped at the end.
# Where none can start, the real-cluster tests skip, saying why (PROCTOR_REQUIRE_CLUSTER=1:
# they fail instead).
#
# Each phase prints its time and the load average beside it, and pytest the test modules
# over 30 s (tests/support/suite_plan.py).
set -euo pipefail
cd "$(dirname "$0")/.."

started_at=$SECONDS
since() {  # the time since started_at, with the load average
  echo "$(( SECONDS - started_at ))s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
}
phase() {  # phase NAME: the time since the last phase ended
  echo "test.sh: $1 took $(since)"
  started_at=$SECONDS
}

bash scripts/setup.sh --test
phase "install"
bash scripts/docker-daemon.sh
phase "the Docker daemon"

started=""
why=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "tests"); from support import real_cluster; print(real_cluster.missing() or "")')
cluster_log=$(mktemp)
if [ -n "$why" ]; then
  echo "test.sh: no real cluster here, so the real-cluster tests skip: $why"
else
  case $(bash scripts/cluster.sh status) in *"kubelet: running"*) ;; *) started=1 ;; esac
  [ -z "$started" ] || trap 'bash scripts/cluster.sh down' EXIT
  # Its build (minutes, the first time) goes on while the S3 server builds and the lint
  # and type check run; the tests start once it is up.
  bash scripts/cluster.sh up >"$cluster_log" 2>&1 &
  cluster_pid=$!
  # Kueue's manager too (minutes the first time): its module's `scripts/kueue.sh up` waits
  # for this build, and says why if it failed.
  bash scripts/kueue.sh build >/dev/null 2>&1 &
fi
# The object store's tests run against a real S3 server built with Go (2 to 3 minutes the
# first time, then cached); where it cannot build they skip or, with PROCTOR_REQUIRE_S3=1,
# fail, saying why.
bash scripts/s3-server.sh build >/dev/null || echo "test.sh: the S3 server did not build (above)"
phase "the S3 server's build"
.venv/bin/ruff check .
phase "lint"
# [tool.mypy] in pyproject.toml: the package; strict on core, k8s, local, runner, sandboxes, store
.venv/bin/mypy
phase "type check"

# PROCTOR_TEST_DEADLINE (epoch seconds; CI sets it): interrupt pytest then, as Ctrl-C does,
# so that it still prints what failed and why, rather than being killed without a word.
limit=0  # none
if [ -n "${PROCTOR_TEST_DEADLINE:-}" ]; then
  limit=$(( PROCTOR_TEST_DEADLINE - $(date +%s) )); [ "$limit" -gt 0 ] || limit=1
fi
# The suite runs as two pytest processes side by side, each line of their output prefixed
# with its half's name: the real cluster's tests (`-m cluster`) spend most of their time
# waiting for pods, and the rest keep the machine busy meanwhile. The rest start now; the
# cluster's once it is up. A half that selects nothing (a path given that holds none of it)
# is no failure.
half() {  # half NAME MARKER [pytest args]: one half of the suite, its output prefixed
  local name=$1 marker=$2; shift 2
  local code=0
  timeout --signal INT --kill-after 120 "$limit" .venv/bin/python -m pytest -m "$marker" "$@" \
    2>&1 | sed -u "s/^/[$name] /" || code=$?
  [ "$code" -ne 5 ] || code=0
  echo "test.sh: the $name tests ended with status $code after $(since)"
  return "$code"
}
half rest "not cluster" "$@" &
rest_pid=$!

if [ -z "$why" ]; then
  if wait "$cluster_pid"; then
    how="already running"; [ -z "$started" ] || how="started here"
    grep -v '^KUBECONFIG=' "$cluster_log" || true
    phase "the real cluster's start ($how)"
    line=$(tail -n1 "$cluster_log")
    "$(.venv/bin/python tests/support/k8s_tools.py kubectl)" --kubeconfig "${line#KUBECONFIG=}" version
  else
    cat "$cluster_log"
    echo "test.sh: scripts/cluster.sh up failed (above): the real-cluster tests will try again"
  fi
fi
rm -f "$cluster_log"
df -h . | awk 'NR == 2 {print "test.sh: " $4 " free on the disk of the checkout (" $5 " used)"}'
status=0
half cluster "cluster" "$@" || status=$?
wait "$rest_pid" || status=$?
phase "the tests"
exit "$status"
