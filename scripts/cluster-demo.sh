#!/usr/bin/env bash
# The demo Evaluation on a real Kubernetes, end to end, checked against `proctor run`:
# scripts/try-operator.sh (the chart installed by helm, the operator in-cluster from its
# image under the chart's ServiceAccount and Role, RBAC enforced by the API server, a
# reference agent in-cluster behind a Service, `kubectl apply` of examples/demo-agent.yaml
# until it is Succeeded, `proctor results pull`), then `proctor run` of the same Evaluation
# on this machine, and the two sets of verdicts compared.
#
#   scripts/cluster-demo.sh [OUTPUT_DIR]     (default out/cluster-demo)
#
# Needs what try-operator.sh needs (root, Docker, mmdebstrap), and takes its settings
# (names, ports, the runner's tag). The cluster is started when it is not running, and
# stopped again at the end unless KEEP_CLUSTER=1 or it was already running. With KUBECONFIG
# set to another cluster nothing is started: that cluster must already hold the images.
# Writes try-operator.sh's files (timings.txt, operator.log, the pulled results in
# cluster/) and the local results folder (local/) into OUTPUT_DIR; exits non-zero when any
# step fails or a verdict differs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/cluster-demo}
mkdir -p "$out"
out=$(cd "$out" && pwd)

started_cluster=""
local_agent=""
finish() {
  local rc=$?
  set +e
  [ -n "$local_agent" ] && kill "$local_agent" 2>/dev/null
  if [ -n "$started_cluster" ] && [ "${KEEP_CLUSTER:-}" != 1 ]; then scripts/cluster.sh down; fi
  exit "$rc"
}
trap finish EXIT

if [ -z "${KUBECONFIG:-}" ]; then
  # (Not `status | grep -q`: grep's early exit would fail the pipeline under pipefail.)
  case $(scripts/cluster.sh status) in *"kubelet: running"*) ;; *) started_cluster=1 ;; esac
fi
scripts/try-operator.sh "$out"
mv "$out/results" "$out/cluster"
t0=$EPOCHREALTIME

# --- the same Evaluation with proctor run, on this machine ----------------------------------
port=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/proctor agent serve --kind mixed --host 127.0.0.1 --port "$port" >"$out/local-agent.log" 2>&1 &
local_agent=$!
sed "s#http://127.0.0.1:9009/#http://127.0.0.1:$port/#" examples/agent.yaml >"$out/local-agent.yaml"
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/.well-known/agent-card.json" >/dev/null && break; sleep 0.2; done
.venv/bin/proctor run -q -f "$out/local-agent.yaml" -f examples/demo-agent.yaml \
  --output-dir "$out/local" --sandbox docker --pull never --network none >&2
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "proctor-run-local %.1f\n", b - a}' | tee -a "$out/timings.txt" >&2

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
