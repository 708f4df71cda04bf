#!/usr/bin/env bash
# `make image`: the operator's image. With a Docker engine: `docker build` of the Dockerfile.
# Without one (this project's machines): hack/images/build.sh operator builds the same image as
# an OCI tarball, cached by the hash of its inputs, and, when the local cluster's real node runs,
# imports it into that node's containerd as localhost/mpijob-operator:{<hash>,dev}.
# The last line printed is the image reference to deploy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
IMAGE=${IMAGE:-mpijob-operator:dev}
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  docker build -t "$IMAGE" "$root" >&2
  echo "$IMAGE"
  exit 0
fi
echo "[image] no Docker engine: building without it (hack/images/build.sh operator)" >&2
line=$("$here/images/build.sh" operator | tail -n 1)
tarball=$(echo "$line" | awk '{print $2}')
ref=$(echo "$line" | awk '{print $3}')
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
source "$here/lib/realnode.sh"
if [ -S "$SOCK" ] && ctr --address "$SOCK" version >/dev/null 2>&1; then
  if ! ctr_k8s images ls -q | grep -xF "$ref" >/dev/null; then
    echo "[image] importing $ref into the real node's containerd" >&2
    ctr_k8s images import "$tarball" >/dev/null
  fi
  ctr_k8s images ls -q | grep -xF "$ref" >/dev/null || { echo "[image] ERROR: $ref not in containerd" >&2; exit 1; }
else
  echo "[image] no real node running: $tarball not imported (ctr images import, or kind load image-archive)" >&2
fi
echo "$ref"
