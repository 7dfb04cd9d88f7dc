#!/usr/bin/env bash
# Builds a base image for runner-image/Dockerfile without pulling anything: Debian bookworm
# from Debian's packages (mmdebstrap), with Python 3.11 and what the Dockerfile installs,
# imported into Docker. For machines that reach Debian's and PyPI's mirrors but no image
# registry; everyone else keeps the default base, python:3.11-slim.
#
#   runner-image/offline-base.sh [TAG]          (default proctor/runner-base:bookworm)
#   docker build --network host --build-arg BASE=proctor/runner-base:bookworm \
#       -f runner-image/Dockerfile -t proctor-runner:<version> .
#
# The image trusts the certificates this host trusts (its CA bundle replaces Debian's, and
# pip is pointed at it): pip and apt inside the build then get through wherever the host
# does, e.g. past a TLS-inspecting proxy. Build with --network host where the daemon has
# no bridge network.
set -euo pipefail
TAG=${1:-proctor/runner-base:bookworm}
CA=${PROCTOR_CA_BUNDLE:-$(python3 -c 'import ssl; p = ssl.get_default_verify_paths(); print(p.cafile or p.openssl_cafile or "")')}
command -v mmdebstrap >/dev/null || { echo "needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hooks=()
if [ -n "$CA" ] && [ -f "$CA" ]; then
  cp "$CA" "$tmp/ca.crt"
  hooks+=(--customize-hook="upload $tmp/ca.crt /etc/ssl/certs/ca-certificates.crt")
fi
# python3-venv: the Dockerfile's virtual environment; the rest is what its second stage
# would otherwise install with apt.
mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,ca-certificates,git,bash,tini \
  "${hooks[@]}" bookworm "$tmp/base.tar"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  "$tmp/base.tar" "$TAG" >/dev/null
echo "$TAG"
