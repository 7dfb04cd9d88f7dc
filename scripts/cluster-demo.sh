#!/usr/bin/env bash
# The demo Evaluation on a real Kubernetes, end to end: the chart installed by helm, the
# operator in-cluster from its image under the chart's ServiceAccount and ClusterRole (RBAC
# enforced by the API server), a reference agent in-cluster behind a Service, then
# `kubectl apply` of examples/demo-agent.yaml until it is Succeeded, `proctor results pull`,
# and the verdicts compared with `proctor run` of the same Evaluation on this machine.
#
#   scripts/cluster-demo.sh [OUTPUT_DIR]     (default out/cluster-demo)
#
# Needs root, Docker and mmdebstrap (images are built here: nothing can be pulled), and
# scripts/cluster.sh (a one-node cluster built from Kubernetes' sources; started here when
# it is not running, and stopped again at the end unless KEEP_CLUSTER=1 or it was already
# running). With KUBECONFIG set to another cluster nothing is started: that cluster must
# already hold the images (proctor-runner:<version> and the demo images).
# Writes timings.txt (seconds per phase), the pulled and local results folders and the
# operator's log into OUTPUT_DIR; exits non-zero when any step fails or a verdict differs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/cluster-demo}
rm -rf "$out"; mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -x .venv/bin/proctor ] || bash scripts/setup.sh --test
version=$(.venv/bin/proctor --version | awk '{print $NF}')
runner=proctor-runner:$version
base=${PROCTOR_RUNNER_BASE:-proctor/runner-base:bookworm}
helm=$(.venv/bin/python tests/k8s_tools.py helm)
kubectl_bin=$(.venv/bin/python tests/k8s_tools.py kubectl)
kubectl() { "$kubectl_bin" "$@"; }
say() { echo "cluster-demo: $*" >&2; }

t0=$EPOCHREALTIME
lap() {  # lap NAME: seconds since the last lap, to timings.txt
  local now=$EPOCHREALTIME
  awk -v n="$1" -v a="$t0" -v b="$now" 'BEGIN {printf "%s %.1f\n", n, b - a}' | tee -a "$out/timings.txt" >&2
  t0=$now
}

started_cluster=""
local_agent=""
finish() {
  local rc=$?
  set +e
  [ -n "$local_agent" ] && kill "$local_agent" 2>/dev/null
  if [ -n "${KUBECONFIG:-}" ] && [ -n "${kubectl_bin:-}" ]; then
    if [ "$rc" != 0 ]; then
      kubectl get evaluations,agentundertests,jobs,pods -A -o wide >"$out/objects.txt" 2>&1
      kubectl get events -A --sort-by=.lastTimestamp >"$out/events.txt" 2>&1
    fi
    kubectl -n proctor logs deployment/proctor >"$out/operator.log" 2>&1
  fi
  if [ -n "$started_cluster" ] && [ "${KEEP_CLUSTER:-}" != 1 ]; then scripts/cluster.sh down; fi
  exit "$rc"
}
trap finish EXIT

# --- images: built here from Debian's packages and PyPI -----------------------------------
demo_images=$(.venv/bin/python -c 'from proctor.sandboxes.demo_images import demo_tasks; print(*demo_tasks())')
if [ -z "${KUBECONFIG:-}" ]; then
  docker image inspect "$base" >/dev/null 2>&1 || runner-image/offline-base.sh "$base" >/dev/null
  lap build-runner-base
  docker build -q --network host --build-arg "BASE=$base" -f runner-image/Dockerfile -t "$runner" . >/dev/null
  lap build-runner-image
  .venv/bin/proctor images build-demo >&2
  lap build-demo-images

  # --- the cluster ------------------------------------------------------------------------
  # (Not `status | grep -q`: grep's early exit would fail the pipeline under pipefail.)
  case $(scripts/cluster.sh status) in *"kubelet: running"*) ;; *) started_cluster=1 ;; esac
  line=$(scripts/cluster.sh up | tail -n1)
  export "${line?}"
  lap cluster-up
  # shellcheck disable=SC2086  # one name per image
  docker save "$runner" $demo_images | scripts/cluster.sh import - >/dev/null
  lap import-images
fi
kubectl version >&2

# --- the chart ------------------------------------------------------------------------------
"$helm" uninstall proctor -n proctor --wait >/dev/null 2>&1 || true
"$helm" install proctor charts/proctor --namespace proctor --create-namespace \
  --set image.tag="$version" --set image.pullPolicy=Never >/dev/null
kubectl -n proctor rollout status deployment/proctor --timeout=300s >&2
lap helm-install-to-operator-ready

# --- the reference agent, in-cluster --------------------------------------------------------
# The operator refuses loopback endpoints: the Jobs' pods reach the agent through a Service.
kubectl delete evaluation demo --ignore-not-found --wait >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: demo-agent, namespace: default, labels: {app: demo-agent}}
spec:
  replicas: 1
  selector: {matchLabels: {app: demo-agent}}
  template:
    metadata: {labels: {app: demo-agent}}
    spec:
      containers:
      - name: agent
        image: $runner
        imagePullPolicy: Never
        args: [proctor, agent, serve, --kind, mixed, --host, 0.0.0.0, --port, "9009",
               --card-url, "http://demo-agent.default.svc:9009/"]
        ports: [{containerPort: 9009}]
        readinessProbe: {tcpSocket: {port: 9009}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: demo-agent, namespace: default}
spec:
  selector: {app: demo-agent}
  ports: [{port: 9009, targetPort: 9009}]
---
apiVersion: proctor.dev/v1alpha1
kind: AgentUnderTest
metadata: {name: local-agent, namespace: default}
spec:
  endpoint: http://demo-agent.default.svc:9009/
  requestTimeoutSeconds: 1800
  maxConcurrentTasks: 2
EOF
kubectl rollout status deployment/demo-agent --timeout=120s >&2
lap agent-ready

# --- the Evaluation -------------------------------------------------------------------------
kubectl apply -f examples/demo-agent.yaml >&2
kubectl wait --for=condition=Succeeded evaluation/demo --timeout=15m >&2
lap evaluation-to-succeeded
kubectl get evaluation demo -o wide >&2
.venv/bin/proctor results pull demo -n default --output-dir "$out/cluster" >&2
lap results-pull

# --- the same Evaluation with proctor run, on this machine ----------------------------------
port=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/proctor agent serve --kind mixed --host 127.0.0.1 --port "$port" >"$out/local-agent.log" 2>&1 &
local_agent=$!
sed "s#http://127.0.0.1:9009/#http://127.0.0.1:$port/#" examples/agent.yaml >"$out/local-agent.yaml"
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/.well-known/agent-card.json" >/dev/null && break; sleep 0.2; done
.venv/bin/proctor run -q -f "$out/local-agent.yaml" -f examples/demo-agent.yaml \
  --output-dir "$out/local" --sandbox docker --pull never --network none >&2
lap proctor-run-local

# --- the verdicts -------------------------------------------------------------------------
.venv/bin/python - "$out/cluster" "$out/local" <<'EOF'
import json
import sys
from pathlib import Path


def verdicts(folder):
    rows = [json.loads(line) for line in (Path(folder) / "results.jsonl").read_text().splitlines() if line]
    return {r["item_id"]: (r["outcome"], r.get("error_kind")) for r in rows}


cluster, local = verdicts(sys.argv[1]), verdicts(sys.argv[2])
for item in sorted(cluster.keys() | local.keys()):
    mark = "" if cluster.get(item) == local.get(item) else "   <-- differs"
    print(f"{item}: cluster {cluster.get(item)}  local {local.get(item)}{mark}", file=sys.stderr)
if cluster != local:
    sys.exit("cluster-demo: the verdicts differ")
print(f"cluster-demo: the same {len(cluster)} verdicts on the cluster and with proctor run", file=sys.stderr)
EOF
