#!/usr/bin/env bash
# A one-node Kubernetes on this machine, built from Kubernetes' own Go sources.
#
#   scripts/cluster.sh up      build (once), start, wait for a Ready node, print KUBECONFIG=...
#                              (on a running cluster: import its pause and CoreDNS images
#                              again, which the kubelet's image GC removes on a full disk)
#   scripts/cluster.sh down    stop everything `up` started, pods included
#   scripts/cluster.sh status  say what runs, and whether pods can ask for gVisor
#   scripts/cluster.sh import ARCHIVE...  load images (`docker save` or OCI archives; - for
#                              stdin) into the node's containerd: nothing can be pulled here
#   scripts/cluster.sh images  list the images the node's containerd holds, one name a line
#   scripts/cluster.sh archive BINARY NAME USER OUT  write an image of that one binary
#                              (its entrypoint, run as USER) for `import` (scripts/kueue.sh)
#
# No registry ships the servers' binaries and no image can be pulled here, but the Go
# module proxy serves k8s.io/kubernetes and etcd: scripts/cluster/go.mod pins them and
# `up` builds every binary in one `go build` (shared packages compile once), cached per
# version and inputs, so a second `up` builds nothing. Pods run in containerd + runc
# from Debian's packages on a bridge CNI network; their sandbox ("pause") image is built
# here and imported. gVisor (runsc and its containerd shim, from the Go module
# gvisor.dev/gvisor) is built and cached likewise, and offered as the RuntimeClass `gvisor`;
# it is optional: where it does not build or run, the cluster comes up without it and
# `status` says why (PROCTOR_CLUSTER_GVISOR=0 skips it).
#
# Only as root (the kubelet, containerd and CNI need it). Nothing here needs systemd: every
# daemon runs in the background with its log and pid under the state folder (.cluster/, or
# PROCTOR_CLUSTER_DIR). The host's own daemons are left alone: this containerd has its own
# socket, root and state; etcd and the API server listen on their usual ports, and `up`
# refuses to start when something else holds them.
#
# PROCTOR_CLUSTER_KWOK_NODES=N: the control plane only (etcd, API server, controller
# manager, scheduler), with N simulated nodes instead of the real one: KWOK
# (sigs.k8s.io/kwok, scripts/cluster/kwok) plays their kubelets, moving each pod through
# the Stages it finds on the cluster. No containerd, kubelet, kube-proxy, CNI or DNS, so no
# root and nothing changed on the host; `up` applies KWOK's CRDs, its node Stages and its
# "fast" pod Stages (Running at once, a Job's pod Succeeded at once), which a user of the
# cluster may replace. Pod logs come from KWOK's Logs objects. PROCTOR_CLUSTER_PORT_OFFSET=K
# moves the control plane's ports (etcd, API server, controller manager, scheduler, KWOK's
# kubelet endpoint) up by K, so that such a cluster runs beside another one; `down` and
# `status` need the same PROCTOR_CLUSTER_DIR (the mode and ports are kept there).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODULE=$ROOT/scripts/cluster
STATE=${PROCTOR_CLUSTER_DIR:-$ROOT/.cluster}
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$MODULE/go.mod")

NODE=proctor-node            # a fixed name, so that tests can name the node
POD_CIDR=10.244.0.0/24       # the one node's pods (the bridge's host-local range)
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1     # the first address of SERVICE_CIDR: kubernetes.default
DNS_SERVICE_IP=10.96.0.10
PAUSE_IMAGE=proctor.local/pause:3.10
COREDNS_IMAGE=proctor.local/coredns:$(awk '{for (i = 1; i < NF; i++) if ($i == "github.com/coredns/coredns") print $(i + 1)}' "$MODULE/coredns/go.mod")
BRIDGE=proctor0
KWOK_NODES=${PROCTOR_CLUSTER_KWOK_NODES:-0}
# gvisor.dev/gvisor's `go` branch (the Go-buildable one), as the Go module proxy serves it.
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
GVISOR_PLATFORM=systrap      # no hardware virtualisation needed (KVM is not there on most VMs)
PORT_OFFSET=${PROCTOR_CLUSTER_PORT_OFFSET:-0}
# `up` keeps the mode and port offset it started with, for `down` and `status`.
if [ "${1:-}" != up ] && [ -e "$STATE/mode" ]; then
  read -r KWOK_NODES PORT_OFFSET <"$STATE/mode"
fi
ETCD_PORT=$((2379 + PORT_OFFSET))
API_PORT=$((6443 + PORT_OFFSET))
CONTROLLER_MANAGER_PORT=$((10257 + PORT_OFFSET))
SCHEDULER_PORT=$((10259 + PORT_OFFSET))
KWOK_PORT=$((10247 + PORT_OFFSET))   # the simulated nodes' kubelet endpoint (logs)

BIN=""      # set by build
GVISOR_BIN=""  # set by gvisor_build where runsc builds and runs here
PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids
RUN=$STATE/run
KUBECONFIG_PATH=$STATE/admin.kubeconfig
CRI_SOCKET=$RUN/containerd.sock
# Every daemon `up` starts, in that order.
CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler)
if [ "$KWOK_NODES" -gt 0 ]; then
  DAEMONS=("${CONTROL_PLANE[@]}" kwok)
else
  DAEMONS=(containerd "${CONTROL_PLANE[@]}" kubelet kube-proxy)
fi

say() { echo "cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# --- build ------------------------------------------------------------------------------

# The cache key covers everything that decides the binaries and images: the modules'
# files, the Go toolchain, the text of the functions that build them and the images' names.
build() {
  local major minor ldflags key cache tmp p
  major=${K8S_VERSION#v}; major=${major%%.*}
  minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
  # A plain `go build` stamps v0.0.0: kubectl version, the API server's /version and
  # the kubelet's node status would all show it. client-go keeps its own copy.
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitVersion=$K8S_VERSION"
    ldflags+=" -X $p.gitTreeState=clean"
  done
  command -v go >/dev/null || die "Go is needed to build the cluster's binaries"
  key=$( { find "$MODULE" -type f | LC_ALL=C sort | xargs cat; go version
           declare -f build image_archive kwok_manifests
           echo "$PAUSE_IMAGE $COREDNS_IMAGE"; } |
         sha256sum | cut -c1-12)
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/proctor-cluster/$K8S_VERSION-$key
  BIN=$cache/bin
  [ -e "$cache/complete" ] && return 0
  say "building Kubernetes $K8S_VERSION, etcd, CoreDNS and KWOK into $cache (about 10 minutes on 2 cores the first time) ..."
  rm -rf "$cache"; mkdir -p "$cache"
  tmp=$cache/bin.partial; mkdir -p "$tmp"
  SECONDS=0
  # `tool` is every tool the module declares (the servers, kubectl, etcd); CGO off makes
  # static binaries, as upstream releases them. -modcacherw keeps the module cache deletable.
  (cd "$MODULE" && CGO_ENABLED=0 GOFLAGS=-modcacherw go build -trimpath -ldflags "$ldflags" \
     -o "$tmp/" tool ./pause ./cri-sweep)
  # etcd's main package is the module go.etcd.io/etcd/server/v3, which Go names `server`.
  mv "$tmp/server" "$tmp/etcd"
  # CoreDNS is a module of its own: in the one above, its newer gRPC and OpenTelemetry
  # would raise the versions Kubernetes was released and tested with.
  (cd "$MODULE/coredns" && CGO_ENABLED=0 GOFLAGS=-modcacherw go build -trimpath -ldflags "-s -w" \
     -o "$tmp/coredns" .)
  # KWOK too (the simulated nodes), for the same reason: its own k8s.io versions. Its CRDs
  # and its node and pod Stages come from the same module version.
  (cd "$MODULE/kwok" && CGO_ENABLED=0 GOFLAGS=-modcacherw go build -trimpath -ldflags "-s -w" \
     -o "$tmp/" tool)
  kwok_manifests "$(cd "$MODULE/kwok" && GOFLAGS=-modcacherw go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)" \
    "$cache"
  image_archive "$tmp/pause" "$PAUSE_IMAGE" 65535 "$cache/pause.tar"
  image_archive "$tmp/coredns" "$COREDNS_IMAGE" 0 "$cache/coredns.tar"
  mv "$tmp" "$BIN"
  touch "$cache/complete"
  say "built in ${SECONDS}s"
  # Earlier builds (other versions or inputs) take 600 MB each.
  find "$(dirname "$cache")" -mindepth 1 -maxdepth 1 ! -path "$cache" -exec rm -rf {} +
}

# gVisor, built apart from build(): its own cache (so that a gVisor change rebuilds neither
# Kubernetes nor gVisor's cache when Kubernetes changes) and optional. Sets GVISOR_BIN, or
# leaves it empty and writes why to $STATE/gvisor; either way the cluster comes up.
gvisor_build() {
  local key cache tmp
  GVISOR_BIN=""
  if [ "${PROCTOR_CLUSTER_GVISOR:-1}" = 0 ]; then
    echo "absent: PROCTOR_CLUSTER_GVISOR=0" >"$STATE/gvisor"; return 0
  fi
  if ! command -v go >/dev/null; then
    echo "absent: no Go toolchain to build runsc with" >"$STATE/gvisor"; return 0
  fi
  local why
  if why=$(gvisor_unsupported); then
    echo "absent: $why" >"$STATE/gvisor"; return 0
  fi
  key=$( { go version; declare -f gvisor_build; echo "$GVISOR_VERSION"; } | sha256sum | cut -c1-12)
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/proctor-gvisor/$key
  if [ ! -e "$cache/complete" ]; then
    say "building gVisor's runsc and containerd-shim-runsc-v1 $GVISOR_VERSION into $cache (about 2 minutes on 2 cores the first time) ..."
    rm -rf "$cache"; mkdir -p "$cache"
    tmp=$cache/bin.partial; mkdir -p "$tmp"
    SECONDS=0
    if ! GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-modcacherw go install -trimpath -ldflags "-s -w" \
         "gvisor.dev/gvisor/runsc@$GVISOR_VERSION" "gvisor.dev/gvisor/shim@$GVISOR_VERSION" \
         >"$cache/build.log" 2>&1; then
      say "gVisor did not build (the cluster comes up without it): $(tail -n 3 "$cache/build.log")"
      echo "absent: go install gvisor.dev/gvisor/runsc@$GVISOR_VERSION failed: $(tail -n 1 "$cache/build.log")" >"$STATE/gvisor"
      return 0
    fi
    mv "$tmp/shim" "$tmp/containerd-shim-runsc-v1"  # the name containerd gives the shim
    mv "$tmp" "$cache/bin"
    touch "$cache/complete"
    say "gVisor built in ${SECONDS}s"
    # Earlier builds (other versions or toolchains) take 100 MB each.
    find "$(dirname "$cache")" -mindepth 1 -maxdepth 1 ! -path "$cache" -exec rm -rf {} +
  fi
  # It builds everywhere; it runs where the kernel lets its platform trace or trap a
  # sandbox's system calls (a seccomp or ptrace restriction of a container host may not).
  local tried
  if ! tried=$("$cache/bin/runsc" --platform="$GVISOR_PLATFORM" --network=none \
                 --root "$RUN/runsc-check" "do" true 2>&1); then
    say "gVisor's runsc does not run here (the cluster comes up without it): $tried"
    echo "absent: runsc --platform=$GVISOR_PLATFORM do true failed: $(echo "$tried" | tail -n 1)" >"$STATE/gvisor"
    return 0
  fi
  GVISOR_BIN=$cache/bin
  echo "present: RuntimeClass gvisor (handler runsc, platform $GVISOR_PLATFORM, gvisor.dev/gvisor $GVISOR_VERSION)" >"$STATE/gvisor"
}

# Why gVisor's containerd shim cannot run pods on this host (nothing where it may): checked
# before the build, which a host that cannot use it should not pay for. Both were seen here
# (containerd 1.6.20, CAP_SYS_RESOURCE withheld from root; runsc itself runs).
gvisor_unsupported() {
  local version capeff
  version=$(containerd --version | awk '{print $3}')
  # The shim is built on containerd 2's shim library: its `start` prints its bootstrap
  # parameters as JSON, where containerd 1.6 reads a bare address ("dial unix {...}").
  case $version in
    1.[0-6].*) echo "containerd $version is too old for gVisor's shim (it speaks containerd 2's shim protocol)"; return 0 ;;
  esac
  # The shim lowers its own OOM score to -999 and fails where it may not ("failed to set
  # OOM Score on shim: permission denied"); containerd's restrict_oom_score_adj, which
  # covers runc (see configs), does not reach it.
  capeff=$(awk '$1 == "CapEff:" {print $2}' /proc/self/status)
  if [ $(( 0x$capeff >> 24 & 1 )) = 0 ]; then
    echo "this host withholds CAP_SYS_RESOURCE from root, which gVisor's shim needs to lower its OOM score"; return 0
  fi
  return 1
}

# kwok_manifests DIR OUT: from the KWOK module's source in DIR, its CRDs (OUT/kwok-crds.yaml)
# and the Stages a KWOK cluster starts with (OUT/kwok-stages.yaml): nodes Ready at once and
# kept alive by their leases, pods Running at once, a Job's pod Succeeded at once, a
# deleted pod gone.
kwok_manifests() {
  local dir=$1 out=$2 f
  for f in "$dir"/kustomize/crd/bases/*.yaml; do echo "---"; cat "$f"; done >"$out/kwok-crds.yaml"
  for f in "$dir"/kustomize/stage/node/fast/node-initialize.yaml \
           "$dir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           "$dir"/kustomize/stage/pod/fast/pod-{ready,complete,delete}.yaml; do
    echo "---"; cat "$f"
  done >"$out/kwok-stages.yaml"
}

# image_archive BINARY NAME USER OUT: an image archive in `docker save` layout (which
# `ctr images import` reads) holding one static binary as its entrypoint. No registry can
# be reached to pull the upstream images.
image_archive() {
  local binary=$1 name=$2 user=$3 out=$4 dir layer_sha config config_sha base
  base=$(basename "$binary")
  dir=$(mktemp -d)
  mkdir -p "$dir/rootfs"
  cp "$binary" "$dir/rootfs/$base"
  tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir/rootfs" -cf "$dir/layer.tar" "$base"
  layer_sha=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
  config="{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/$base\"],\"User\":\"$user\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_sha\"]}}"
  config_sha=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
  mkdir -p "$dir/image/$layer_sha"
  mv "$dir/layer.tar" "$dir/image/$layer_sha/layer.tar"
  printf '%s' "$config" >"$dir/image/$config_sha.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
    "$config_sha" "$name" "$layer_sha" >"$dir/image/manifest.json"
  tar --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir/image" -cf "$out" .
  rm -rf "$dir"
}

# --- host packages ----------------------------------------------------------------------

# As scripts/docker-daemon.sh does: install from Debian's packages what is missing.
packages() {
  local missing=()
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  if [ "$KWOK_NODES" -gt 0 ]; then
    [ "${#missing[@]}" -eq 0 ] || die "missing ${missing[*]}"
    return 0
  fi
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)   # kube-proxy and the CNI's masquerade
  command -v conntrack >/dev/null || missing+=(conntrack)
  [ "${#missing[@]}" -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]}, and no apt-get to install them"
  say "installing ${missing[*]} ..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- certificates and configuration -------------------------------------------------------

# The address pods reach the API server at (kubernetes.default's endpoint): an endpoint
# may not be a loopback address, so it is the address of the host's default route's
# interface, or else its first global address.
node_ip() {
  local dev ip=""
  dev=$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
  [ -n "$dev" ] && ip=$(ip -4 -o addr show dev "$dev" scope global | awk '{sub("/.*", "", $4); print $4; exit}')
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global | awk '{sub("/.*", "", $4); print $4; exit}')
  [ -n "$ip" ] || die "this host has no global IPv4 address for the API server to advertise"
  echo "$ip"
}

# cert NAME SUBJECT [SANS]: a key and a certificate signed by the cluster's CA.
cert() {
  local name=$1 subject=$2 sans=${3:-}
  [ -e "$PKI/$name.crt" ] && return 0
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

kubeconfig() {
  local name=$1 server=$2
  cat >"$STATE/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: proctor
  cluster:
    certificate-authority: $PKI/ca.crt
    server: $server
users:
- name: $name
  user:
    client-certificate: $PKI/$name.crt
    client-key: $PKI/$name.key
contexts:
- name: proctor
  context: {cluster: proctor, user: $name}
current-context: proctor
EOF
}

# Kept across `up`s; a new node address gives the serving certificates a new name.
pki() {
  local ip=$1
  mkdir -p "$PKI"
  if [ "$(cat "$PKI/node-ip" 2>/dev/null)" != "$ip" ]; then
    rm -f "$PKI/apiserver.crt" "$PKI/kubelet.crt"
    echo "$ip" >"$PKI/node-ip"
  fi
  if [ ! -e "$PKI/ca.crt" ]; then
    openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=proctor-cluster-ca" -days 3650 \
      -sha256 -out "$PKI/ca.crt" 2>/dev/null
  fi
  [ -e "$PKI/sa.key" ] || openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$API_SERVICE_IP,IP:$ip"
  cert kubelet "/CN=$NODE" "DNS:$NODE,DNS:localhost,IP:127.0.0.1,IP:$ip"
  # system:masters bypasses RBAC: for the administrator and for the API server's calls
  # into the kubelet (logs, exec). Every other client gets only what RBAC grants.
  cert admin "/O=system:masters/CN=kubernetes-admin"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert kube-controller-manager "/CN=system:kube-controller-manager"
  cert kube-scheduler "/CN=system:kube-scheduler"
  cert node "/O=system:nodes/CN=system:node:$NODE"
  cert kube-proxy "/CN=system:kube-proxy"
  # The API server's identity towards aggregated API servers (and the controllers' and
  # scheduler's delegated authentication, which wait for its CA). The cluster's one CA
  # signs it: only this name may assert a user in request headers.
  cert front-proxy-client "/CN=front-proxy-client"
  # KWOK: the simulated nodes' kubelet endpoint (the API server reads pod logs there) and,
  # as the kubelet of every simulated node, a client that may write any pod's status.
  cert kwok "/O=system:masters/CN=kwok" "DNS:localhost,IP:127.0.0.1"
  local api=https://127.0.0.1:$API_PORT
  kubeconfig admin "$api"
  kubeconfig kube-controller-manager "$api"
  kubeconfig kube-scheduler "$api"
  kubeconfig node "$api"
  kubeconfig kube-proxy "$api"
  kubeconfig kwok "$api"
}

configs() {
  mkdir -p "$STATE/cni/net.d" "$STATE/containerd"
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$RUN/containerd-state"
[grpc]
  address = "$CRI_SOCKET"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Some hosts (CI's among them) withhold CAP_SYS_RESOURCE even from root, so no process
  # may lower its OOM score: runc then fails every pod sandbox (-998) and Guaranteed pod
  # (-997) with "failed to update /proc/self/oom_score_adj: Permission denied". Clamp
  # containers' scores to containerd's own instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # No systemd here: cgroups are plain directories, as the kubelet's cgroupfs driver makes them.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
  [ -z "$GVISOR_BIN" ] || gvisor_configs
  cat >"$STATE/cni/net.d/10-proctor.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "proctor",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These hosts mount cgroup v1, which the kubelet refuses unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CRI_SOCKET
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
clusterDomain: cluster.local
clusterDNS: [$DNS_SERVICE_IP]
failSwapOn: false
# The default (-999) cannot be set without CAP_SYS_RESOURCE (see containerd's config above).
oomScoreAdj: 0
# No eviction and no image GC for disk (as kind's nodes): on a shared or small disk the
# node would otherwise taint itself with disk-pressure, evict the tests' pods and delete
# images (pause among them) that nothing can pull back. A full disk fails the image builds,
# which say so; test.sh prints the free space before the tests.
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
serializeImagePulls: false
EOF
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
# Leave the host's conntrack table size alone (0: do not set it).
conntrack: {maxPerCore: 0}
# NodePorts on the node's own address only, not on every interface of the host.
nodePortAddresses: [primary]
oomScoreAdj: 0
EOF
}

# The runtime handler `runsc` (gvisor.dev/docs/user_guide/containerd/): containerd starts
# gVisor's shim from the cache (runtime_path), which runs runsc with the options file.
gvisor_configs() {
  cat >>"$STATE/containerd/config.toml" <<EOF
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
  runtime_path = "$GVISOR_BIN/containerd-shim-runsc-v1"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
    TypeUrl = "io.containerd.runsc.v1.options"
    ConfigPath = "$STATE/containerd/runsc.toml"
EOF
  cat >"$STATE/containerd/runsc.toml" <<EOF
binary_name = "$GVISOR_BIN/runsc"
root = "$RUN/runsc"
[runsc_config]
  platform = "$GVISOR_PLATFORM"
EOF
}

# --- daemons ------------------------------------------------------------------------------

pid_of() {
  local pid
  pid=$(cat "$PIDS/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# start NAME COMMAND...: in its own session, so that it outlives this script and `down`
# can signal it by its pid.
start() {
  local name=$1; shift
  mkdir -p "$LOGS" "$PIDS"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  STARTED[$name]=$EPOCHREALTIME
}
declare -A STARTED

# Seconds since the daemon NAME started, to a tenth.
since() { awk -v a="${STARTED[$1]}" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}'; }

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds; on a timeout, show the log.
wait_for() {
  local what=$1 limit=$2; shift 2
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if ! pid_of "$what" >/dev/null; then
      tail -n 30 "$LOGS/$what.log" >&2 || true
      die "$what exited"
    fi
    if [ $((SECONDS - t0)) -ge "$limit" ]; then
      tail -n 30 "$LOGS/$what.log" >&2 || true
      die "$what did not come up within ${limit}s"
    fi
    sleep 0.2
  done
  say "$what up $(since "$what")s after its start"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

api_ready() {
  curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz" >/dev/null
}

kubectl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

node_ready() {
  [ "$(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

up() {
  [ "$KWOK_NODES" -gt 0 ] || [ "$(id -u)" = 0 ] ||
    die "must run as root (the kubelet, containerd and the CNI need it)"
  local name
  if [ "$(cat "$STATE/mode" 2>/dev/null || echo "$KWOK_NODES $PORT_OFFSET")" != "$KWOK_NODES $PORT_OFFSET" ]; then
    for name in containerd "${CONTROL_PLANE[@]}" kubelet kube-proxy kwok; do
      pid_of "$name" >/dev/null && die "a cluster with other PROCTOR_CLUSTER_KWOK_NODES or" \
        "PROCTOR_CLUSTER_PORT_OFFSET runs from $STATE: take it \`down\` first"
    done
  fi
  if running_all; then
    restore_images
    echo "KUBECONFIG=$KUBECONFIG_PATH"
    return 0
  fi
  running_any && down
  echo "$KWOK_NODES $PORT_OFFSET" >"$STATE/mode"
  packages
  build
  local ip ports
  ip=$(node_ip)
  pki "$ip"
  # The control plane's; the kubelet's (10248, 10250) and kube-proxy's (10249, 10256), or KWOK's.
  ports="$ETCD_PORT $((ETCD_PORT + 1)) $API_PORT $CONTROLLER_MANAGER_PORT $SCHEDULER_PORT"
  if [ "$KWOK_NODES" -gt 0 ]; then ports+=" $KWOK_PORT"; else ports+=" 10248 10249 10250 10256"; fi
  for port in $ports; do
    port_free "$port" || die "port $port is taken: another cluster runs on this host"
  done
  # A fresh cluster each time: tests start from empty etcd and a node with no pods.
  rm -rf "$STATE/etcd"
  if [ "$KWOK_NODES" -gt 0 ]; then
    control_plane "$ip"
    kwok_nodes
  else
    real_node_prepare
    start containerd containerd --config "$STATE/containerd/config.toml"
    control_plane "$ip"
    real_node "$ip"
  fi
  echo "KUBECONFIG=$KUBECONFIG_PATH"
}

# The host's side of the real node: its configuration, a fresh pod network, the sysctls.
real_node_prepare() {
  [ "${#CRI_SOCKET}" -lt 100 ] || die "the state folder's path is too long for a unix socket: $CRI_SOCKET"
  mkdir -p "$RUN"
  gvisor_build
  configs
  rm -rf "$STATE/cni/ipam"
  # Pods reach services through the bridge: bridged traffic must pass iptables, and the
  # host must route between the bridge and its other interfaces.
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 ||
    die "cannot enable forwarding and bridge netfilter (is the br_netfilter module loaded?)"
}

# control_plane IP: etcd, the API server (advertised at IP), the controller manager and the
# scheduler; returns once the API server is ready (`controllers_ready` waits for the others).
control_plane() {
  local ip=$1
  start etcd "$BIN/etcd" --name proctor --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "proctor=http://127.0.0.1:$((ETCD_PORT + 1))" \
    --unsafe-no-fsync  # a throwaway test cluster: durability is not worth the disk waits
  wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --secure-port "$API_PORT" --advertise-address "$ip" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key"
  wait_for kube-apiserver 90 api_ready
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CONTROLLER_MANAGER_PORT" --leader-elect=false \
    --use-service-account-credentials=true \
    --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --allocate-node-cidrs=true --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$STATE/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false
}

controllers_ready() {
  wait_for kube-controller-manager 60 curl -skf "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz"
  wait_for kube-scheduler 60 curl -skf "https://127.0.0.1:$SCHEDULER_PORT/healthz"
}

# The one real node: containerd (started before the control plane), the kubelet,
# kube-proxy and CoreDNS.
real_node() {
  local ip=$1
  wait_for containerd 30 "$BIN/cri-sweep" "unix://$CRI_SOCKET"
  # Imported once per containerd root; the import is idempotent and takes well under a second.
  for image in pause coredns; do
    ctr --address "$CRI_SOCKET" --namespace k8s.io images import "$(dirname "$BIN")/$image.tar" >/dev/null
  done
  start kubelet "$BIN/kubelet" --config "$STATE/kubelet.yaml" \
    --kubeconfig "$STATE/node.kubeconfig" --root-dir "$STATE/kubelet" \
    --hostname-override "$NODE" --node-ip "$ip"
  start kube-proxy "$BIN/kube-proxy" --config "$STATE/kube-proxy.yaml"
  controllers_ready
  wait_for kubelet 120 node_ready
  wait_for kube-proxy 60 curl -sf http://127.0.0.1:10256/healthz
  dns
  [ -z "$GVISOR_BIN" ] || kubectl apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
EOF
}

# KWOK_NODES simulated nodes, kwok-node-0, 1, ...: KWOK's CRDs and Stages first (it reads
# its Stages and the pods' Logs from the cluster), then KWOK, then the Node objects it
# takes over (by their annotation) and makes Ready. Each node fits 32 pods of the runner's
# default requests (1 CPU, 2 GiB memory, 2 GiB ephemeral storage).
kwok_nodes() {
  local cache i
  cache=$(dirname "$BIN")
  kubectl apply --server-side -f "$cache/kwok-crds.yaml" >/dev/null
  kubectl wait --for condition=Established --timeout 60s -f "$cache/kwok-crds.yaml" >/dev/null
  kubectl apply -f "$cache/kwok-stages.yaml" >/dev/null
  # Node leases as a kubelet keeps them (kwokctl sets 40 s too; the binary's default is
  # none): without them the node controller finds the nodes silent after 40 s, and KWOK's
  # node-initialize Stage, matching a node no longer Ready, rewrites its status without its
  # address, so that the API server can no longer reach it for a pod's log.
  start kwok "$BIN/kwok" --kubeconfig "$STATE/kwok.kubeconfig" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip 127.0.0.1 --node-port "$KWOK_PORT" --server-address "127.0.0.1:$KWOK_PORT" \
    --tls-cert-file "$PKI/kwok.crt" --tls-private-key-file "$PKI/kwok.key" \
    --enable-crds Stage,Logs,ClusterLogs --node-lease-duration-seconds 40
  for i in $(seq 0 $((KWOK_NODES - 1))); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux, kubernetes.io/hostname: kwok-node-$i, type: kwok}
status:
  allocatable: {cpu: "32", memory: 64Gi, ephemeral-storage: 64Gi, pods: "110"}
  capacity: {cpu: "32", memory: 64Gi, ephemeral-storage: 64Gi, pods: "110"}
EOF
  done | kubectl apply -f - >/dev/null
  controllers_ready
  wait_for kwok 60 kubectl wait --for condition=Ready --timeout 1s node --all
}

# CoreDNS as a cluster addon, as kubeadm deploys it: the kube-dns Service at the address
# the kubelet hands pods as their nameserver, a Deployment under its own ServiceAccount.
dns() {
  local t0=$EPOCHREALTIME
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: system:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        prometheus :9153
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        forward . /etc/resolv.conf
        cache 30
        loop
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      # The node's resolver, for names outside the cluster.
      dnsPolicy: Default
      containers:
      - name: coredns
        image: $COREDNS_IMAGE
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        resources: {requests: {cpu: 50m, memory: 30Mi}, limits: {memory: 170Mi}}
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        - {name: metrics, containerPort: 9153, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}, initialDelaySeconds: 10}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: $DNS_SERVICE_IP
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
EOF
  kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null ||
    die "CoreDNS did not become ready (kubectl -n kube-system describe pods -l k8s-app=kube-dns)"
  # Ready is not yet reachable: until kube-proxy has written the Service's endpoint, a
  # pod's DNS query is refused.
  local n
  for n in $(seq 150); do
    iptables-save -t nat 2>/dev/null | grep -q -- '--comment "kube-system/kube-dns:dns cluster IP"' && break
    [ "$n" = 150 ] && die "kube-proxy did not route the kube-dns Service within 30 s"
    sleep 0.2
  done
  STARTED[coredns]=$t0
  say "coredns ready and routed $(since coredns)s after its manifests were applied"
}

# --- down / status ----------------------------------------------------------------------

# stop [-g SECONDS] NAME...: SIGTERM to all of them at once (most take a second or two to
# exit), and SIGKILL to any still running SECONDS (10) later.
stop() {
  local name pid pids=() grace=10
  [ "$1" = -g ] && { grace=$2; shift 2; }
  for name in "$@"; do
    pid=$(pid_of "$name") && { kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); }
    rm -f "$PIDS/$name.pid"
  done
  for _ in $(seq $((grace * 10))); do
    alive "${pids[@]}" || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

alive() {
  local pid
  for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}

down() {
  local bin
  if [ "$KWOK_NODES" -gt 0 ]; then
    # Nothing of the host was touched: no pods, rules, bridge or mounts to clean up.
    stop kwok
    stop -g 2 kube-scheduler kube-controller-manager kube-apiserver
    stop etcd
    return 0
  fi
  bin=$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/proctor-cluster/"$K8S_VERSION"-*/bin 2>/dev/null | head -n1)
  stop kube-proxy kubelet
  # With the kubelet gone, nothing restarts pods: stop them through the runtime, so that
  # their networks are torn down too.
  if pid_of containerd >/dev/null && [ -n "$bin" ]; then
    "$bin/cri-sweep" "unix://$CRI_SOCKET" || say "some pods could not be stopped (see above)"
  fi
  # The next `up` starts from empty etcd: the control plane's graceful shutdown (the API
  # server drains requests for seconds) buys nothing. etcd goes last, since the API
  # server's shutdown hangs without it.
  stop -g 2 kube-scheduler kube-controller-manager kube-apiserver
  stop etcd containerd
  # kube-proxy's service rules and the pods' bridge would otherwise outlive the cluster.
  [ -n "$bin" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  kubelet_rules_cleanup
  ip link del "$BRIDGE" 2>/dev/null || true
  # The kubelet's volume mounts (service account tokens, emptyDirs in memory) and the
  # containers' root filesystems, deepest first.
  awk -v s="$STATE/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
}

# The kubelet's own chains (KUBE-FIREWALL drops outside traffic to 127.0.0.0/8, the
# others are markers): after kube-proxy's cleanup every KUBE- chain left is the kubelet's.
kubelet_rules_cleanup() {
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle; do
      # iptables-save quotes what needs quoting (comments): eval reads it back.
      "$cmd-save" -t "$table" 2>/dev/null | sed -n '/^-A [A-Z]* .*-j KUBE-/s/^-A/-D/p' |
        while read -r rule; do eval "$cmd -t $table $rule" 2>/dev/null || true; done
      "$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p' |
        while read -r chain; do "$cmd" -t "$table" -F "$chain" 2>/dev/null || true; done
      "$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p' |
        while read -r chain; do "$cmd" -t "$table" -X "$chain" 2>/dev/null || true; done
    done
  done
}

running_any() {
  local name
  for name in "${DAEMONS[@]}"; do pid_of "$name" >/dev/null && return 0; done
  return 1
}

running_all() {
  local name
  for name in "${DAEMONS[@]}"; do pid_of "$name" >/dev/null || return 1; done
}

status() {
  local name pid any=1
  for name in "${DAEMONS[@]}"; do
    if pid=$(pid_of "$name"); then
      echo "$name: running (pid $pid, log $LOGS/$name.log)"; any=0
    else
      echo "$name: stopped"
    fi
  done
  if [ "$KWOK_NODES" = 0 ] && [ -e "$STATE/gvisor" ]; then
    echo "gvisor: $(cat "$STATE/gvisor")"
  fi
  [ "$any" = 0 ] && echo "KUBECONFIG=$KUBECONFIG_PATH"
  return 0
}

import_images() {
  local archive
  pid_of containerd >/dev/null || die "the cluster is not running (scripts/cluster.sh up)"
  [ $# -gt 0 ] || die "usage: $0 import ARCHIVE... (- for stdin)"
  for archive in "$@"; do
    ctr --address "$CRI_SOCKET" --namespace k8s.io images import "$archive"
  done
}

# On a nearly full disk the kubelet's image GC removes images no container uses, the pause
# image among them (containerd 1.6 does not pin it): then no pod starts. `up` on a running
# cluster imports the cluster's own images again (idempotent, well under a second).
restore_images() {
  local cache image
  cache=$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/proctor-cluster/"$K8S_VERSION"-*/ 2>/dev/null | head -n1)
  [ -n "$cache" ] || return 0
  for image in pause coredns; do
    ctr --address "$CRI_SOCKET" --namespace k8s.io images import "$cache/$image.tar" >/dev/null
  done
}

list_images() {
  pid_of containerd >/dev/null || die "the cluster is not running (scripts/cluster.sh up)"
  ctr --address "$CRI_SOCKET" --namespace k8s.io images ls -q
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  import) shift; import_images "$@" ;;
  images) list_images ;;
  archive) [ $# -eq 5 ] || die "usage: $0 archive BINARY NAME USER OUT"; shift; image_archive "$@" ;;
  *) echo "usage: $0 up|down|status|import ARCHIVE...|images|archive BINARY NAME USER OUT" >&2; exit 2 ;;
esac
