#!/usr/bin/env bash
# Starts a second local control plane next to the first (hack/cluster-up.sh): etcd, API server on
# 127.0.0.1:6444, controller manager, scheduler and kwok with 2 simulated nodes, no real node,
# state in .cluster-worker/ (WORKER_CLUSTER_DIR). The MultiKueue tests start it when it is not up
# (and stop it after); run by hand, it stays up until hack/worker-cluster-down.sh.
# Ports: WORKER_APISERVER_PORT, WORKER_ETCD_PORT, WORKER_KCM_PORT, WORKER_SCHEDULER_PORT, WORKER_KWOK_PORT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/worker-cluster-env.sh"
exec "$here/cluster-up.sh"
