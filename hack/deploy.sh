#!/usr/bin/env bash
# `make deploy` / `make undeploy`.
#   On the local cluster (KUBECONFIG unset, or .cluster/kubeconfig): the one-file install as users
#   apply it (deploy/mpijob-operator.yaml: CRD, RBAC, admission policies, Deployment),
#   then manifests/local over it (the Deployment on the real node, image from hack/image.sh, pinned
#   to the image's content hash so that a rebuild rolls the pods); waits for both replicas to be Ready.
#   Elsewhere: kubectl apply -k manifests/ as it is (the image mpijob-operator:dev: see README).
#   undeploy: the Deployment, its Service and PDB, the RBAC and the admission policies; the CRD is kept, since deleting
#   it deletes every MPIJob of the cluster (kubectl delete -f manifests/crd/ does that).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LOG_TAG=deploy
source "$here/lib/common.sh"
root=$(cd "$here/.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
local_kc=$CLUSTER_DIR/kubeconfig
kc=${KUBECONFIG:-$local_kc}
k() { "${KUBECTL:-$CLUSTER_DIR/bin/kubectl}" --kubeconfig="$kc" "$@"; }

case ${1:-deploy} in
  deploy)
    if [ "$kc" != "$local_kc" ]; then
      k apply --server-side --force-conflicts -k "$root/manifests/"
      exit 0
    fi
    ref=$(CLUSTER_DIR=$CLUSTER_DIR "$here/image.sh" | tail -n 1)
    # --force-conflicts: fields an earlier `make deploy` (or a test) applied under another manager
    k apply --server-side --force-conflicts -f "$root/deploy/mpijob-operator.yaml"
    crd_established mpijobs.kubeflow.org
    k apply -k "$root/manifests/local/"
    k -n mpi-operator set image deployment/mpi-operator "operator=$ref" >/dev/null
    log "waiting for the rollout of $ref"
    k -n mpi-operator rollout status deployment/mpi-operator --timeout=180s >&2
    ;;
  undeploy)
    if [ "$kc" = "$local_kc" ]; then
      k delete -k "$root/manifests/local/" --ignore-not-found --wait=true
    else
      k delete -k "$root/manifests/operator/" --ignore-not-found
    fi
    k delete -k "$root/manifests/rbac/" --ignore-not-found
    k delete -k "$root/manifests/admission/" --ignore-not-found
    ;;
  *) echo "usage: $0 deploy|undeploy" >&2; exit 2 ;;
esac
