# The second local control plane (a MultiKueue worker cluster, e2e/test_kueue_multikueue.py):
# sourced by hack/worker-cluster-up.sh and hack/worker-cluster-down.sh. Every listener differs
# from the first cluster's (API server 6443, etcd 2379-2381, kwok 10247, controller manager 10257,
# scheduler 10259), and its state has a directory of its own, so the two never meet.
WORKER_CLUSTER_DIR=${WORKER_CLUSTER_DIR:-$root/.cluster-worker}
export CLUSTER_DIR=$WORKER_CLUSTER_DIR
export APISERVER_PORT=${WORKER_APISERVER_PORT:-6444}
export ETCD_PORT=${WORKER_ETCD_PORT:-2389}  # and the two ports after it (peer, metrics)
export KCM_PORT=${WORKER_KCM_PORT:-10267}
export SCHEDULER_PORT=${WORKER_SCHEDULER_PORT:-10269}
export KWOK_PORT=${WORKER_KWOK_PORT:-10277}
export KWOK_NODES=${WORKER_KWOK_NODES:-2}
# No real node: the worker cluster's pods are kwok's.
export REAL_NODE=0
