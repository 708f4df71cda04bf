#!/usr/bin/env bash
# Stops exactly the processes hack/cluster-up.sh started (by PID file) and removes the state.
# KEEP_STATE=1 keeps .cluster/ (certs, logs, etcd data) for inspection.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
export CLUSTER_DIR
source "$here/lib/cluster.sh"
[ -d "$CLUSTER_DIR" ] || { log "no cluster at $CLUSTER_DIR"; exit 0; }
# REAL_NODE=0: a cluster that never had one (hack/worker-cluster-down.sh); the real node is not its to stop.
[ "${REAL_NODE:-1}" = 0 ] || { [ -x "$here/realnode/down.sh" ] && "$here/realnode/down.sh"; }
stop_order=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)
for name in "${stop_order[@]}" $(ls "$CLUSTER_DIR/pids" 2>/dev/null | sed 's/\.pid$//'); do
  stop_pid "$name"
done
if [ "${KEEP_STATE:-0}" != 1 ]; then
  rm -rf "$CLUSTER_DIR"
  log "removed $CLUSTER_DIR"
fi
