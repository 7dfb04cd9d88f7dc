#!/usr/bin/env bash
# See the operator at work without a cluster: starts the test cluster (tests/cluster: an API
# server on loopback whose kubelet runs each pod's steps as local processes), a reference
# agent on port 9009 (the one examples/agent.yaml names) and `proctor operator`, writes a
# kubeconfig, and prints the kubectl commands to try. Ctrl-C stops everything.
# Usage: bash scripts/try-operator.sh     (logs and the kubeconfig in out/try-operator/, or in
#                                         the folder TRY_OPERATOR_DIR names)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] && .venv/bin/python -c 'import kmock' 2>/dev/null \
  || bash scripts/setup.sh --test        # the test cluster needs the test extras
work="${TRY_OPERATOR_DIR:-$PWD/out/try-operator}"
mkdir -p "$work"
rm -f "$work/kubeconfig"
# kubectl: PROCTOR_KUBECTL, the one the tests fetch into .tools/, or the one on PATH.
kubectl="$(.venv/bin/python tests/k8s_tools.py kubectl)"

pids=()
stop() {
  trap - INT TERM EXIT
  echo; echo "Stopping the operator, the agent and the test cluster..."
  for (( i=${#pids[@]}-1; i>=0; i-- )); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT

PYTHONPATH=tests .venv/bin/python -m cluster --kubeconfig "$work/kubeconfig" \
  >"$work/cluster.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/kubeconfig" ] && break; sleep 0.2; done
[ -s "$work/kubeconfig" ] || { echo "The test cluster did not start: see $work/cluster.log"; exit 1; }
export KUBECONFIG="$work/kubeconfig"

.venv/bin/proctor agent serve --kind mixed --host 127.0.0.1 --port 9009 >"$work/agent.log" 2>&1 &
pids+=($!)
# The agent runs on loopback, which the operator refuses unless told to allow it.
.venv/bin/proctor operator --namespace default --allow-local-endpoints >"$work/operator.log" 2>&1 &
pids+=($!)

cat <<EOF

The test cluster, a reference agent (port 9009) and the operator are running; logs are in
$work/. In another terminal:

  export KUBECONFIG=$work/kubeconfig
  alias kubectl=$kubectl
  kubectl apply -f examples/agent.yaml -f examples/demo-agent.yaml
  kubectl get evaluations --watch          # -o wide: the Ready reason and the dataset
  kubectl wait --for=condition=Succeeded evaluation/demo --timeout=10m
  kubectl describe evaluation demo         # conditions, results, Events
  kubectl get jobs,pods,configmaps
  kubectl explain evaluation.spec.dataset
  kubectl delete evaluation demo

Ctrl-C here stops everything.
EOF
wait
