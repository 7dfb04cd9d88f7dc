#!/usr/bin/env bash
# Proctor's demo on kind: a local Kubernetes in Docker, the chart, the mixed reference agent
# in-cluster, the demo Evaluation until it is Succeeded, and its results pulled.
#
#   scripts/kind-demo.sh [--dry-run] [--name CLUSTER] [--output-dir DIR]
#
#   1. creates the cluster from kind-config.yaml (kept when it already exists);
#   2. builds the runner image and the demo's task images, and loads them into the nodes;
#   3. installs charts/proctor (helm upgrade --install);
#   4. applies the demo: a namespace that enforces Pod Security "baseline" (and warns at
#      "restricted"), the agent behind a Service, its AgentUnderTest, examples/demo-agent.yaml;
#   5. waits for the Evaluation, prints its status and pulls the results into DIR
#      (default out/kind-demo).
#
# Needs Docker, kind, kubectl and helm on PATH, and an x86-64 host: SWE-bench's task images
# (and the demo's) are amd64 only. --dry-run prints every command and manifest instead of
# running them (nothing is needed for it). `kind delete cluster --name CLUSTER` removes
# the cluster afterwards.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1

dry_run=""
cluster=proctor
out=out/kind-demo
namespace=proctor-demo
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry_run=1 ;;
    --name) cluster=${2:?--name needs a cluster name}; shift ;;
    --output-dir) out=${2:?--output-dir needs a folder}; shift ;;
    -h | --help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "kind-demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

arch=${PROCTOR_HOST_ARCH:-$(uname -m)}
case $arch in
  x86_64 | amd64) ;;
  *) echo "kind-demo: this host is $arch, but SWE-bench's task images (and the demo's) are" \
       "x86-64 (amd64) only; run the demo on an x86-64 machine" >&2
     exit 2 ;;
esac

version=$(awk -F'"' '$1 ~ /^version *= */ {print $2; exit}' pyproject.toml)
runner=proctor-runner:$version
demo_images=(proctor/demo-datekit:0.4 proctor/demo-datekit:0.5 proctor/demo-datekit:0.6
             proctor/demo-textkit:1.0 proctor/demo-textkit:1.1 proctor/demo-textkit:1.2)

say() { echo "kind-demo: $*" >&2; }
run() {  # run COMMAND...: runs it, or prints it (shell-quoted) in a dry run
  if [ -n "$dry_run" ]; then
    printf '+'; printf ' %q' "$@"; printf '\n'
  else
    "$@"
  fi
}
apply() {  # apply < MANIFEST: kubectl apply of the manifest on stdin, printed whole in a dry run
  local manifest
  manifest=$(cat)
  if [ -n "$dry_run" ]; then
    printf '+ kubectl apply -f - <<EOF\n%s\nEOF\n' "$manifest"
  else
    printf '%s\n' "$manifest" | kubectl apply -f -
  fi
}

if [ -z "$dry_run" ]; then
  for tool in docker kind kubectl helm; do
    command -v "$tool" >/dev/null || { say "$tool is not on PATH; install it first"; exit 2; }
  done
fi

# --- 1. the cluster --------------------------------------------------------------------------
if [ -z "$dry_run" ] && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  say "cluster $cluster exists: using it"
else
  run kind create cluster --name "$cluster" --config kind-config.yaml --wait 5m
fi
run kubectl config use-context "kind-$cluster"

# --- 2. images -------------------------------------------------------------------------------
[ -x .venv/bin/proctor ] || run bash scripts/setup.sh
run docker build -f runner-image/Dockerfile -t "$runner" .
run .venv/bin/proctor images build-demo
run kind load docker-image --name "$cluster" "$runner" "${demo_images[@]}"

# --- 3. the chart ----------------------------------------------------------------------------
run helm upgrade --install proctor charts/proctor --namespace proctor-system \
  --create-namespace --set image.tag="$version" --set image.pullPolicy=IfNotPresent --wait

# --- 4. the demo -----------------------------------------------------------------------------
apply <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $namespace
  labels:
    pod-security.kubernetes.io/enforce: baseline
    pod-security.kubernetes.io/warn: restricted
EOF
bash scripts/demo-agent.sh "$namespace" "$runner" | apply
run kubectl -n "$namespace" rollout status deployment/demo-agent --timeout=300s
run kubectl -n "$namespace" apply -f examples/demo-agent.yaml

# --- 5. wait, show, pull ---------------------------------------------------------------------
run kubectl -n "$namespace" wait --for=condition=Succeeded evaluation/demo --timeout=30m
run kubectl -n "$namespace" get evaluation demo -o wide
run kubectl -n "$namespace" get events --field-selector involvedObject.kind=Evaluation
run .venv/bin/proctor results pull demo -n "$namespace" --output-dir "$out"
say "done: the results are in $out (kind delete cluster --name $cluster removes the cluster)"
