#!/usr/bin/env bash
# A real S3-compatible server on loopback, for the object store's tests and for trying
# `proctor run --upload` / `proctor results pull s3://...` by hand.
#
#   scripts/s3-server.sh build   build the server once (cached; a second build does nothing)
#   scripts/s3-server.sh up      build if needed, start it on 127.0.0.1:<a free port> with
#                                an empty bucket proctor-results (PROCTOR_S3_BUCKET names
#                                another), print AWS_ENDPOINT_URL=...,
#                                AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=...
#                                (one a line: `export $(scripts/s3-server.sh up)`)
#   scripts/s3-server.sh stop    stop it, keeping its data and port (a store gone down)
#   scripts/s3-server.sh start   start it again after `stop`, on the same port and data
#   scripts/s3-server.sh down    stop it and remove its data
#
# PROCTOR_S3_HOST is the address it binds and prints (default 127.0.0.1; a node's IP
# lets pods reach it, as the real-cluster tests need).
#
# The server is Versity's S3 gateway (versitygw) with its posix backend: one Go module
# that `go install` builds from the Go module proxy in 2 to 3 minutes on 2 cores (MinIO's
# server is in maintenance and its module's `replace` directives make `go install` refuse
# it). Buckets are folders of the data folder; object metadata goes to a sidecar folder,
# so the filesystem needs no extended attributes. Path-style requests, static keys
# (PROCTOR_S3_ACCESS_KEY / PROCTOR_S3_SECRET_KEY, or test defaults: loopback only).
# State (pid, log, data) lives in PROCTOR_S3_DIR (default .s3/); `down` needs the same.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=v1.8.0
MODULE=github.com/versity/versitygw/cmd/versitygw
STATE=${PROCTOR_S3_DIR:-$ROOT/.s3}
HOST=${PROCTOR_S3_HOST:-127.0.0.1}
ACCESS=${PROCTOR_S3_ACCESS_KEY:-proctor-test}
SECRET=${PROCTOR_S3_SECRET_KEY:-proctor-test-secret}

say() { echo "s3-server: $*" >&2; }
die() { say "$*"; exit 1; }

# Sets BIN to the cached binary, building it first where it is missing.
build() {
  local key cache tmp
  key=$( { go version 2>/dev/null || echo "no go"; echo "$MODULE@$VERSION"; } | sha256sum | cut -c1-12)
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/proctor-s3/$VERSION-$key
  BIN=$cache/bin/versitygw
  [ -e "$cache/complete" ] && return 0
  # A build made by another Go still runs: take it rather than fail without Go.
  if ! command -v go >/dev/null; then
    local any
    any=$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/proctor-s3/"$VERSION"-*/complete 2>/dev/null | head -n1)
    [ -n "$any" ] || die "Go is needed to build the S3 server ($MODULE@$VERSION)"
    BIN=$(dirname "$any")/bin/versitygw
    return 0
  fi
  say "building $MODULE@$VERSION into $cache (2 to 3 minutes on 2 cores the first time) ..."
  rm -rf "$cache"; mkdir -p "$cache"
  tmp=$cache/bin.partial; mkdir -p "$tmp"
  SECONDS=0
  # CGO off: a static binary. -modcacherw keeps the module cache deletable.
  if ! GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-modcacherw go install -trimpath -ldflags "-s -w" \
       "$MODULE@$VERSION" >"$cache/build.log" 2>&1; then
    die "go install $MODULE@$VERSION failed: $(tail -n 3 "$cache/build.log")"
  fi
  mv "$tmp" "$cache/bin"
  touch "$cache/complete"
  say "built in ${SECONDS}s"
  # Earlier builds (other versions or toolchains) take 80 MB each.
  find "$(dirname "$cache")" -mindepth 1 -maxdepth 1 ! -path "$cache" -exec rm -rf {} +
}

running() { [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; }

free_port() {
  python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$HOST"
}

answers() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Starts the server on $1 (a port) in the background; true once it answers (30 s at most).
serve() {
  "$BIN" --access "$ACCESS" --secret "$SECRET" --port "$HOST:$1" --quiet \
    posix --sidecar "$STATE/meta" "$STATE/data" >>"$STATE/log" 2>&1 &
  echo $! >"$STATE/pid"
  SECONDS=0
  while [ "$SECONDS" -lt 30 ] && running; do
    answers "$1" && return 0
    sleep 0.2
  done
  running && kill "$(cat "$STATE/pid")"
  return 1
}

up() {
  build
  mkdir -p "$STATE"
  if running; then cat "$STATE/env"; return 0; fi
  rm -rf "$STATE/data" "$STATE/meta"; mkdir -p "$STATE/data" "$STATE/meta"
  # The posix backend serves each folder of the data folder as a bucket.
  mkdir "$STATE/data/${PROCTOR_S3_BUCKET:-proctor-results}"
  # The port is free when chosen; another process may take it before the server binds,
  # so a server that exits at once is started again on another.
  local port try
  : >"$STATE/log"
  for try in 1 2 3; do
    port=$(free_port)
    if serve "$port"; then
      printf 'AWS_ENDPOINT_URL=http://%s:%s\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' \
        "$HOST" "$port" "$ACCESS" "$SECRET" >"$STATE/env"
      cat "$STATE/env"
      return 0
    fi
    say "try $try: the server did not answer on port $port: $(tail -n 2 "$STATE/log")"
  done
  rm -f "$STATE/pid"
  die "the S3 server did not start (log: $STATE/log)"
}

start() {
  build
  [ -f "$STATE/env" ] || die "nothing to start again in $STATE: run up first"
  if running; then cat "$STATE/env"; return 0; fi
  local url port
  url=$(sed -n 's/^AWS_ENDPOINT_URL=//p' "$STATE/env")
  port=${url##*:}
  serve "$port" || die "the S3 server did not start again on port $port (log: $STATE/log)"
  cat "$STATE/env"
}

stop() {
  if running; then
    local pid
    pid=$(cat "$STATE/pid")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$STATE/pid"
}

down() {
  stop
  rm -rf "$STATE/env" "$STATE/data" "$STATE/meta"
}

case "${1:-}" in
  build) build; echo "$BIN" ;;
  up) up ;;
  stop) stop ;;
  start) start ;;
  down) down ;;
  *) die "usage: $0 build|up|stop|start|down" ;;
esac
