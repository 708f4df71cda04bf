#!/usr/bin/env bash
# A kind cluster for users with Docker (make kind-up / make kind-down), an alternative to the
# local cluster of hack/cluster-up.sh. Its kubeconfig goes where that one's does, .cluster/kubeconfig,
# so `make run`, `make deploy` and the tests use whichever cluster is up.
#   hack/kind.sh up     create cluster "mpijob-operator" (reused if it exists), load mpijob-operator:dev if built
#   hack/kind.sh down   delete it (and .cluster/kubeconfig if it is kind's)
# Environment: KIND_CLUSTER_NAME (mpijob-operator), KIND_NODE_IMAGE (kind's default), IMAGE (mpijob-operator:dev),
#              CLUSTER_DIR (.cluster).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$ROOT/.cluster}"
NAME="${KIND_CLUSTER_NAME:-mpijob-operator}"
IMAGE="${IMAGE:-mpijob-operator:dev}"
KUBECONFIG_OUT="$CLUSTER_DIR/kubeconfig"

here=$(cd "$(dirname "$0")" && pwd)
LOG_TAG=kind
source "$here/lib/common.sh"

need_tools() {
  command -v kind >/dev/null 2>&1 \
    || die "'kind' is not on PATH. Install it (https://kind.sigs.k8s.io/docs/user/quick-start/#installation,
       e.g. 'go install sigs.k8s.io/kind@latest'), or use the local cluster instead: make cluster-up"
  command -v docker >/dev/null 2>&1 \
    || die "'docker' is not on PATH: kind runs its nodes as Docker containers. Install Docker, or use the
       local cluster instead (no Docker needed): make cluster-up"
  docker info >/dev/null 2>&1 \
    || die "the Docker engine is not reachable ('docker info' failed): start it, or check your access to its socket"
}

exists() { kind get clusters 2>/dev/null | grep -x "$NAME" >/dev/null; }

up() {
  need_tools
  mkdir -p "$CLUSTER_DIR"
  if [[ -f "$KUBECONFIG_OUT" ]] && ! grep -q "kind-$NAME" "$KUBECONFIG_OUT" && [[ "${FORCE:-0}" != 1 ]]; then
    die "$KUBECONFIG_OUT belongs to another cluster (the local one?): stop it first with 'make cluster-down',
       or run with FORCE=1 to overwrite that kubeconfig"
  fi
  if exists; then
    log "kind cluster $NAME already exists; reusing it"
  else
    log "creating kind cluster $NAME"
    kind create cluster --name "$NAME" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
  fi
  log "writing kubeconfig to $KUBECONFIG_OUT"
  kind get kubeconfig --name "$NAME" >"$KUBECONFIG_OUT.tmp"
  chmod 600 "$KUBECONFIG_OUT.tmp"
  mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "loading image $IMAGE into the cluster"
    kind load docker-image "$IMAGE" --name "$NAME"
  else
    log "image $IMAGE not built yet: run 'make image', then 'hack/kind.sh up' again (or 'kind load docker-image $IMAGE --name $NAME')"
  fi
  log "ready: export KUBECONFIG=$KUBECONFIG_OUT; make deploy"
}

down() {
  command -v kind >/dev/null 2>&1 || die "'kind' is not on PATH: nothing to delete with it"
  if exists; then
    log "deleting kind cluster $NAME"
    kind delete cluster --name "$NAME"
  else
    log "kind cluster $NAME does not exist"
  fi
  if [[ -f "$KUBECONFIG_OUT" ]] && grep -q "kind-$NAME" "$KUBECONFIG_OUT"; then
    rm -f "$KUBECONFIG_OUT"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
