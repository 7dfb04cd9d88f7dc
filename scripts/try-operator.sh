#!/usr/bin/env bash
# Try the operator on a real Kubernetes: the one-node cluster of scripts/cluster.sh (started
# when it is not running, and left running), the runner and demo images built here and
# imported into it (nothing can be pulled), charts/proctor installed by helm (the operator
# in-cluster from its image, under the chart's ServiceAccount and Role, RBAC enforced by the
# API server), a reference agent (`mixed`) in-cluster behind a Service, then
# examples/demo-agent.yaml applied, waited for until Succeeded, and its results pulled.
#
#   scripts/try-operator.sh [--install-only] [OUTPUT_DIR [HELM_ARG...]]
#
# OUTPUT_DIR defaults to out/try-operator; HELM_ARGs go to `helm install` (--set ...).
# --install-only stops once the operator and the agent are ready, before the Evaluation.
# Names and ports, from the environment:
#   PROCTOR_RELEASE=proctor              helm release: the operator's objects, its Role and
#                                        ClusterRoles are named after it
#   PROCTOR_OPERATOR_NAMESPACE=proctor   where the operator runs
#   PROCTOR_NAMESPACE=default            where the agent and the Evaluation go; the operator
#                                        serves only this namespace (a Role there), so that
#                                        it leaves other Evaluations on a shared cluster alone
#   PROCTOR_RUNNER_TAG                   tag of proctor-runner (default <version>-<hash of the
#                                        files it is built from>: other code, another tag)
#   PROCTOR_RUNNER_IMAGE                 the whole image name instead (REPOSITORY:TAG)
#   PROCTOR_AGENT_PORT=9009              the agent's port (its container's and Service's)
#   PROCTOR_METRICS_PORT=9090            the operator's metrics port
# With KUBECONFIG set, that cluster is used as it is and no image is built: it must already
# hold proctor-runner:<tag> and the demo images.
#
# Needs root, Docker and mmdebstrap to build the images and start the cluster. Writes the
# operator's log, timings.txt (seconds per phase) and the pulled results (results/) into
# OUTPUT_DIR. Exits non-zero, saying why, when any step fails: the operator's pod crashing or
# restarting (at its start or later) is a failure, never a success.
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=""
[ "${1:-}" = --install-only ] && { install_only=1; shift; }
out=${1:-out/try-operator}
[ $# -gt 0 ] && shift
helm_args=("$@")
rm -rf "$out"; mkdir -p "$out"
out=$(cd "$out" && pwd)
release=${PROCTOR_RELEASE:-proctor}
operator_ns=${PROCTOR_OPERATOR_NAMESPACE:-proctor}
ns=${PROCTOR_NAMESPACE:-default}
agent_port=${PROCTOR_AGENT_PORT:-9009}
metrics_port=${PROCTOR_METRICS_PORT:-9090}
say() { echo "try-operator: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

[ -x .venv/bin/proctor ] || bash scripts/setup.sh >&2
version=$(.venv/bin/proctor --version | awk '{print $NF}')
# The image's inputs (runner-image/Dockerfile's COPYs; the README only feeds the package's
# description): the index's blobs, what differs from them in the work tree, and new files.
inputs=(pyproject.toml crds operator runner-image)
hash=$( { git ls-files -s -- "${inputs[@]}"; git diff HEAD -- "${inputs[@]}"
          git ls-files -z --others --exclude-standard -- "${inputs[@]}" | xargs -0 -r sha256sum
        } 2>/dev/null | sha256sum | cut -c1-12)
tag=${PROCTOR_RUNNER_TAG:-$version-$hash}
runner=${PROCTOR_RUNNER_IMAGE:-proctor-runner:$tag}
helm=$(.venv/bin/python tests/support/k8s_tools.py helm)
kubectl_bin=$(.venv/bin/python tests/support/k8s_tools.py kubectl)
kubectl() { "$kubectl_bin" "$@"; }
# The chart's full name of the release's objects (templates/_helpers.tpl).
case $release in *proctor*) fullname=$release ;; *) fullname=$release-proctor ;; esac

t0=$EPOCHREALTIME
lap() {  # lap NAME: seconds since the last lap, to timings.txt
  local now=$EPOCHREALTIME
  awk -v n="$1" -v a="$t0" -v b="$now" 'BEGIN {printf "%s %.1f\n", n, b - a}' | tee -a "$out/timings.txt" >&2
  t0=$now
}

operator_pods=(-n "$operator_ns" -l "app.kubernetes.io/instance=$release,app.kubernetes.io/component=operator")
finish() {
  local rc=$?
  set +e
  if [ -n "${KUBECONFIG:-}" ]; then
    kubectl logs "${operator_pods[@]}" --tail=-1 >"$out/operator.log" 2>&1
    if [ "$rc" != 0 ]; then
      kubectl logs "${operator_pods[@]}" --tail=-1 --previous >"$out/operator.previous.log" 2>/dev/null
      kubectl get evaluations,agentundertests,jobs,pods -n "$ns" -o wide >"$out/objects.txt" 2>&1
      kubectl get pods "${operator_pods[@]}" -o wide >>"$out/objects.txt" 2>&1
      kubectl get events -n "$ns" --sort-by=.lastTimestamp >"$out/events.txt" 2>&1
      kubectl get events -n "$operator_ns" --sort-by=.lastTimestamp >>"$out/events.txt" 2>&1
      say "logs and objects are in $out/"
    fi
  fi
  exit "$rc"
}
trap finish EXIT

# operator_state: "ready", "starting", or why it is dead (one line), from its pod's status.
operator_state() {
  local line
  line=$(kubectl get pods "${operator_pods[@]}" -o jsonpath='{range .items[*]}{.status.containerStatuses[0].ready} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.waiting.reason}{.status.containerStatuses[0].state.terminated.reason} {.status.containerStatuses[0].lastState.terminated.exitCode}{"\n"}{end}' | head -n1)
  read -r ready restarts reason code <<<"$line"
  if [ "${restarts:-0}" != 0 ]; then
    echo "the operator's container restarted $restarts times (last exit code ${code:-?}, now ${reason:-running})"
  else
    case ${reason:-} in
      CrashLoopBackOff|Error|OOMKilled|ErrImagePull|ImagePullBackOff|ErrImageNeverPull|InvalidImageName|CreateContainerConfigError|CreateContainerError|Completed)
        echo "the operator's container is $reason" ;;
      *) [ "${ready:-}" = true ] && echo ready || echo starting ;;
    esac
  fi
}

# --- the cluster and the images -------------------------------------------------------------
if [ -z "${KUBECONFIG:-}" ]; then
  line=$(scripts/cluster.sh up | tail -n1)
  export "${line?}"
  lap cluster-up
  base=${PROCTOR_RUNNER_BASE:-proctor/runner-base:bookworm}
  docker image inspect "$base" >/dev/null 2>&1 || runner-image/offline-base.sh "$base" >/dev/null
  lap build-runner-base
  docker image inspect "$runner" >/dev/null 2>&1 ||
    docker build -q --network host --build-arg "BASE=$base" -f runner-image/Dockerfile -t "$runner" . >/dev/null
  lap build-runner-image
  .venv/bin/proctor images build-demo >&2
  lap build-demo-images
  # Only what the node does not list already (its status names the images it holds).
  held=$(kubectl get nodes -o jsonpath='{range .items[*].status.images[*]}{.names}{"\n"}{end}')
  missing=()
  for image in "$runner" $(.venv/bin/python -c 'from proctor.sandboxes.demo_images import demo_tasks; print(*demo_tasks())'); do
    # As Docker names them: a first part with a dot or a colon is a registry.
    case $image in
      *.*/*|*:*/*) full=$image ;;
      */*) full=docker.io/$image ;;
      *) full=docker.io/library/$image ;;
    esac
    [[ $held == *"\"$full\""* ]] || missing+=("$image")
  done
  [ "${#missing[@]}" -eq 0 ] || docker save "${missing[@]}" | scripts/cluster.sh import - >/dev/null
  lap import-images
fi
kubectl version >&2

# --- the chart ------------------------------------------------------------------------------
# A namespace still being deleted (an earlier run's) takes no new objects: wait it out.
for space in "$ns" "$operator_ns"; do
  if [ "$(kubectl get namespace "$space" -o jsonpath='{.status.phase}' 2>/dev/null)" = Terminating ]; then
    kubectl wait --for=delete "namespace/$space" --timeout=180s >/dev/null
  fi
done
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
"$helm" uninstall "$release" -n "$operator_ns" --wait >/dev/null 2>&1 || true
# The CRDs are cluster-wide, shared by every release: helm installs them only where they are
# missing (helm 4 would otherwise fight over their fields with whoever applied them). Where
# they are there, they must be this checkout's: an operator refuses fields it does not know.
if kubectl get crd evaluations.proctor.dev agentundertests.proctor.dev >/dev/null 2>&1; then
  for kind in evaluation agentundertest; do
    [ "$(kubectl get crd "${kind}s.proctor.dev" -o jsonpath='{.spec.versions[*].schema}')" = \
      "$(kubectl create --dry-run=client -f "crds/$kind.yaml" -o jsonpath='{.spec.versions[*].schema}')" ] ||
      die "the cluster's ${kind}s.proctor.dev CRD is not this checkout's: kubectl apply --server-side --force-conflicts -f crds/ installs it (cluster-wide: on a shared cluster, for everyone)"
  done
  helm_args+=(--skip-crds)
fi
"$helm" install "$release" charts/proctor --namespace "$operator_ns" --create-namespace \
  --set image.repository="${runner%:*}" --set image.tag="${runner##*:}" --set image.pullPolicy=Never --set metrics.port="$metrics_port" \
  --set metrics.service.port="$metrics_port" --set "operator.watchNamespaces={$ns}" \
  "${helm_args[@]}" >/dev/null
for _ in $(seq 300); do
  state=$(operator_state)
  case $state in ready) break ;; starting) sleep 1 ;; *) die "$state (its log: $out/operator.log)" ;; esac
done
[ "$state" = ready ] || die "the operator was not ready within 300 s"
lap helm-install-to-operator-ready

# --- the reference agent, in-cluster --------------------------------------------------------
# The operator refuses loopback endpoints: the Jobs' pods reach the agent through a Service.
kubectl -n "$ns" delete evaluation demo --ignore-not-found --wait >/dev/null
bash scripts/demo-agent.sh "$ns" "$runner" "$agent_port" Never | kubectl apply -f - >/dev/null
kubectl -n "$ns" rollout status deployment/demo-agent --timeout=120s >&2
lap agent-ready
if [ -n "$install_only" ]; then
  state=$(operator_state)
  [ "$state" = ready ] || die "$state"
  say "the operator ($release in $operator_ns) and the agent (demo-agent in $ns) are ready"
  echo "KUBECONFIG=$KUBECONFIG"
  exit 0
fi

# --- the Evaluation -------------------------------------------------------------------------
# The demo's tasks are small: each pod asks a tenth of a core, so that one node runs several.
kubectl patch --local -f examples/demo-agent.yaml --type merge -o yaml \
  -p '{"spec": {"runner": {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}}}}' |
  kubectl -n "$ns" apply -f - >&2
# Waited for in steps, so that an operator that dies on the way is noticed at once.
for _ in $(seq 180); do
  kubectl -n "$ns" wait --for=condition=Succeeded evaluation/demo --timeout=5s >/dev/null 2>&1 && break
  state=$(operator_state)
  [ "$state" = ready ] || die "$state"
done
kubectl -n "$ns" wait --for=condition=Succeeded evaluation/demo --timeout=1s >/dev/null ||
  die "the Evaluation was not Succeeded within 15 min"
lap evaluation-to-succeeded
kubectl -n "$ns" get evaluation demo -o wide >&2
.venv/bin/proctor results pull demo -n "$ns" --output-dir "$out/results" >&2
lap results-pull
planned=$(kubectl -n "$ns" get evaluation demo -o jsonpath='{.status.items.total}')
pulled=$(grep -c . "$out/results/results.jsonl" 2>/dev/null || true)
[ "${pulled:-0}" = "$planned" ] || die "pulled ${pulled:-0} results of the $planned the Evaluation has (a .venv older than the runner image reads none: bash scripts/setup.sh)"
state=$(operator_state)
[ "$state" = ready ] || die "$state"

cat >&2 <<EOF

try-operator: the demo Evaluation succeeded on the cluster; its results are in $out/results/.
The cluster, the operator and the agent keep running. To look around:

  export KUBECONFIG=$KUBECONFIG
  alias kubectl=$kubectl_bin
  kubectl -n $ns get evaluations -o wide         # the leaderboard columns, the Ready reason
  kubectl -n $ns describe evaluation demo        # conditions, results, Events
  kubectl -n $operator_ns logs deployment/$fullname   # the operator's log
  kubectl explain evaluation.spec.dataset
  kubectl -n $ns delete evaluation demo          # deletes its Jobs and kept results too
  kubectl -n $ns apply -f examples/demo-gold.yaml   # gold patches, no agent

To stop: $helm uninstall $release -n $operator_ns; then scripts/cluster.sh down (as root)
stops the cluster when nobody else uses it.
EOF
