#!/usr/bin/env bash
# Kueue on the real cluster of scripts/cluster.sh, built here from its Go module.
#
#   scripts/kueue.sh build       build Kueue's manager and its image once (cached; a second
#                                build does nothing)
#   scripts/kueue.sh manifests   print the manifests `up` applies
#   scripts/kueue.sh up          build if needed, import the image into the node, apply
#                                the manifests, wait until Kueue's webhooks answer
#   scripts/kueue.sh down        delete what `up` applied (its webhooks first)
#
# No registry ships Kueue's image here, but the Go module proxy serves sigs.k8s.io/kueue:
# `go install` builds its manager, the image is that one static binary (run as 65532), and
# the manifests are Kueue's own kustomization (config/default, from the same module) as
# `kubectl kustomize` renders it, changed in five ways: the image is this one (never
# pulled); only batch/v1 Jobs are managed (the other frameworks' CRDs are not there), and
# only the webhooks of Jobs and of Kueue's own kinds are kept (a pod webhook would refuse
# every pod of the cluster while Kueue is down);
# the optional visibility API (an aggregated APIService this API server is not set up
# to proxy) is left out; the manager asks for 100m CPU instead of 500m (the node has 2
# cores). Kueue makes its webhook certificate itself (internal cert management).
#
# KUBECONFIG: the cluster's admin kubeconfig (default: scripts/cluster.sh's).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=v0.17.0
MODULE=sigs.k8s.io/kueue
IMAGE=proctor.local/kueue:$VERSION
export KUBECONFIG=${KUBECONFIG:-$ROOT/.cluster/admin.kubeconfig}

say() { echo "kueue: $*" >&2; }
die() { say "$*"; exit 1; }

kubectl() {
  local bin
  bin=$("$ROOT/.venv/bin/python" "$ROOT/tests/support/k8s_tools.py" kubectl) || die "no kubectl"
  "$bin" "$@"
}

# Sets CACHE to the cached build (bin/manager, image.tar, the module's config/), building
# it first where it is missing.
build() {
  local key tmp src
  key=$( { go version 2>/dev/null || echo "no go"; echo "$MODULE@$VERSION"; } | sha256sum | cut -c1-12)
  CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/proctor-kueue/$VERSION-$key
  [ -e "$CACHE/complete" ] && return 0
  # One build at a time (the test command starts one in the background; a test's `up`
  # may come while it runs): the second waits for the first, then finds it complete.
  mkdir -p "$(dirname "$CACHE")"
  exec 9>"$CACHE.lock"
  flock 9
  [ -e "$CACHE/complete" ] && return 0
  command -v go >/dev/null || die "Go is needed to build $MODULE@$VERSION"
  say "building $MODULE@$VERSION into $CACHE (several minutes on 2 cores the first time) ..."
  rm -rf "$CACHE"; mkdir -p "$CACHE"
  tmp=$CACHE/bin.partial; mkdir -p "$tmp"
  SECONDS=0
  # CGO off: a static binary, which runs alone in its image. -modcacherw: deletable cache.
  GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-modcacherw go install -trimpath -ldflags "-s -w" \
    "$MODULE/cmd/kueue@$VERSION" >"$CACHE/build.log" 2>&1 ||
    die "go install $MODULE/cmd/kueue@$VERSION failed: $(tail -n 3 "$CACHE/build.log")"
  mkdir -p "$CACHE/bin"; mv "$tmp/kueue" "$CACHE/bin/manager"; rmdir "$tmp"
  src=$(GOFLAGS=-modcacherw go mod download -json "$MODULE@$VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src/config/default" ] || die "the module $MODULE@$VERSION has no config/default"
  cp -r "$src/config" "$CACHE/config"; chmod -R u+w "$CACHE/config"
  # The image of that one binary, /manager as Kueue's manifests run it, as 65532 (they
  # require a non-root user).
  bash "$ROOT/scripts/cluster.sh" archive "$CACHE/bin/manager" "$IMAGE" 65532 "$CACHE/image.tar"
  touch "$CACHE/complete"
  say "built in ${SECONDS}s"
}

# Kueue's kustomization with the four changes above, as one stream of documents.
manifests() {
  build
  kubectl kustomize "$CACHE/config/default" | "$ROOT/.venv/bin/python" -c '
import sys, yaml
image = sys.argv[1]
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
out = []
for d in docs:
    if d["kind"] == "APIService":
        continue  # the visibility API: optional, and this API server does not proxy it
    if d["kind"] == "Deployment":
        (c,) = d["spec"]["template"]["spec"]["containers"]
        c["image"], c["imagePullPolicy"] = image, "Never"
        c["resources"]["requests"]["cpu"] = "100m"
    if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        # Only the webhooks of Jobs and of the kinds of Kueue: the others (pods, Deployments,
        # ...) refuse every create of their kind in the cluster while Kueue is down.
        d["webhooks"] = [w for w in d["webhooks"] if all(
            set(r["apiGroups"]) <= {"batch", "kueue.x-k8s.io"} for r in w["rules"])]
    if d["kind"] == "ConfigMap" and "controller_manager_config.yaml" in d.get("data", {}):
        config = yaml.safe_load(d["data"]["controller_manager_config.yaml"])
        config["integrations"] = {"frameworks": ["batch/job"]}
        d["data"]["controller_manager_config.yaml"] = yaml.safe_dump(config)
    out.append(d)
yaml.safe_dump_all(out, sys.stdout)
' "$IMAGE"
}

up() {
  build
  bash "$ROOT/scripts/cluster.sh" import "$CACHE/image.tar" >/dev/null
  manifests | kubectl apply --server-side --force-conflicts -f - >/dev/null
  kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s >&2
  # Ready means the manager runs; its webhooks answer once it has made their certificate
  # and the API server trusts it: a dry-run create through the webhook says when.
  local _
  for _ in $(seq 120); do
    if kubectl create --dry-run=server -f - >/dev/null 2>&1 <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: proctor-webhook-probe}
YAML
    then
      say "up: the controller and its webhooks answer"
      return 0
    fi
    sleep 1
  done
  die "Kueue's webhooks did not answer in 120s: $(kubectl -n kueue-system logs deployment/kueue-controller-manager --tail=5 2>&1)"
}

down() {
  build
  # Webhooks first: without their server, they would refuse every Job of the cluster.
  kubectl delete mutatingwebhookconfiguration kueue-mutating-webhook-configuration \
    --ignore-not-found >/dev/null
  kubectl delete validatingwebhookconfiguration kueue-validating-webhook-configuration \
    --ignore-not-found >/dev/null
  manifests | kubectl delete --ignore-not-found --wait=false -f - >/dev/null
  say "down"
}

case "${1:-}" in
  build) build ;;
  manifests) manifests ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 build|manifests|up|down" >&2; exit 2 ;;
esac
