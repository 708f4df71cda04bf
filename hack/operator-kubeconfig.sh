#!/usr/bin/env bash
# Writes a kubeconfig that authenticates as the operator's ServiceAccount (manifests/rbac), so
# that the operator runs locally with exactly the least-privilege ClusterRole users deploy:
#   hack/operator-kubeconfig.sh [out]     (default: $CLUSTER_DIR/operator.kubeconfig)
# Applies the CRD and manifests/rbac first. Needs the local cluster (hack/cluster-up.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
# shellcheck source=hack/lib/common.sh
source "$here/lib/common.sh"
out=${1:-$CLUSTER_DIR/operator.kubeconfig}

# One caller at a time (make test's pytest-xdist workers each ask at their start): two client-side
# applies creating one ClusterRole at once, the second is refused AlreadyExists.
exec {APPLY_LOCK_FD}>"$CLUSTER_DIR/operator-kubeconfig.lock"
flock "$APPLY_LOCK_FD"
kubectl_admin apply --server-side --force-conflicts -f "$root/manifests/crd/kubeflow.org_mpijobs.yaml" >/dev/null
kubectl_admin apply -k "$root/manifests/rbac" >/dev/null
crd_established mpijobs.kubeflow.org
token=$(kubectl_admin -n mpi-operator create token mpi-operator --duration=24h)
server=$(kubectl_admin config view --minify -o jsonpath='{.clusters[0].cluster.server}')
umask 077
cat >"$out" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority: $CLUSTER_DIR/pki/ca.crt
users:
- name: mpi-operator
  user:
    token: $token
contexts:
- name: mpi-operator
  context: {cluster: local, user: mpi-operator, namespace: default}
current-context: mpi-operator
KC
echo "$out"
