#!/usr/bin/env bash
# Makes a Docker daemon answer for the Docker sandbox's tests (tests/unit/sandboxes/test_docker_sandbox.py).
#
# Only as root, and only when no daemon answers: installs what is missing of docker.io,
# mmdebstrap (the demo images' base) and docker-registry (the pull test) from Debian's
# packages, then starts dockerd with overlay2 (vfs copies the whole root filesystem per
# container), without iptables and the default bridge (hosts and CI containers that allow
# neither still run it). Otherwise it changes nothing: the Docker tests then skip, unless
# PROCTOR_REQUIRE_DOCKER=1 turns that into a failure (as CI does).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
answers() { .venv/bin/python -c 'import docker; docker.from_env(timeout=5).ping()' 2>/dev/null; }

[ "$(id -u)" = 0 ] || exit 0
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v docker-registry >/dev/null || missing+=(docker-registry)
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null; then
  echo "Installing ${missing[*]} for the Docker tests ..."
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
    >/dev/null || echo "could not install ${missing[*]}" >&2
fi
answers && exit 0
command -v dockerd >/dev/null || exit 0
log="${TMPDIR:-/tmp}/proctor-dockerd.log"
echo "Starting dockerd (log: $log) ..."
nohup dockerd --storage-driver=overlay2 --iptables=false --bridge=none >"$log" 2>&1 &
# Usually under a second; on a loaded machine its start has taken 40 s.
SECONDS=0
while [ "$SECONDS" -lt 120 ]; do
  answers && exit 0
  sleep 0.5
done
echo "dockerd did not answer within 120 s; the end of its log:" >&2
tail -n 20 "$log" >&2
