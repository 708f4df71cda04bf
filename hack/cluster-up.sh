#!/usr/bin/env bash
# Starts a real Kubernetes control plane on 127.0.0.1, with no Docker:
#   etcd, kube-apiserver (RBAC, self-signed certs), kube-controller-manager (default controllers),
#   kube-scheduler, and kwok simulating nodes and pod lifecycles (hack/kwok/kwok.yaml);
#   the API server's audit log records the operator's ServiceAccount alone (hack/audit/policy.yaml),
#   for `make bench` to count the operator's requests from the server's side;
#   plus, where the machine allows and REAL_NODE is not 0, one real node (hack/realnode/up.sh).
# Kubernetes' Workload API (scheduling.k8s.io/v1beta1 Workload and PodGroup, gang scheduling by the
# default kube-scheduler; beta and off by default in Kubernetes 1.37) is on unless WORKLOAD_API=0:
# the GenericWorkload feature gate on the API server, controller manager and scheduler, and the beta
# group served (--runtime-config). Pods that name no PodGroup are scheduled as without it. The
# operator's --gang-scheduling=workload needs it (docs/architecture.md section 8).
# State lives in $CLUSTER_DIR (default .cluster/): kubeconfig, bin/, pki/, logs/, pids/.
# Running it again while the cluster is up only checks it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/versions.sh"
source "$here/lib/cluster.sh"

CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
APISERVER_PORT=${APISERVER_PORT:-6443}
ETCD_PORT=${ETCD_PORT:-2379}
KWOK_NODES=${KWOK_NODES:-4}
WORKLOAD_API=${WORKLOAD_API:-1}
# The controller manager's, scheduler's and kwok's own listeners: a second cluster on this machine
# (hack/worker-cluster-up.sh) needs ports of its own.
KCM_PORT=${KCM_PORT:-10257}
SCHEDULER_PORT=${SCHEDULER_PORT:-10259}
KWOK_PORT=${KWOK_PORT:-10247}
export CLUSTER_DIR
t_start=$SECONDS
gates=() apiserver_gates=()
if [ "$WORKLOAD_API" != 0 ]; then
  gates=(--feature-gates=GenericWorkload=true)
  apiserver_gates=("${gates[@]}" --runtime-config=scheduling.k8s.io/v1beta1=true)
fi

if healthy; then
  log "cluster already up ($CLUSTER_DIR/kubeconfig)"
  if [ "$WORKLOAD_API" != 0 ] && ! workload_api_served; then
    log "note: this cluster does not serve the Workload API (started without it); restart it to turn it on"
  fi
  [ "${REAL_NODE:-1}" = 0 ] || real_node_up
  exit 0
fi
if ls "$CLUSTER_DIR"/pids/*.pid >/dev/null 2>&1; then
  log "a previous cluster is half up or dead: tearing it down first"
  "$here/cluster-down.sh"
fi
mkdir -p "$CLUSTER_DIR"/{bin,pki,logs,pids,etcd,audit}

# --- binaries: KUBEBUILDER_ASSETS or PATH (same minor release) first, else the cache/build.
need=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
[ "${REAL_NODE:-1}" = 0 ] || need+=(kubelet)
for b in "${need[@]}"; do
  p=$(find_prebuilt "$b") && ln -sf "$p" "$CLUSTER_DIR/bin/$b"
done
missing=()
for b in "${need[@]}"; do [ -e "$CLUSTER_DIR/bin/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "${REAL_NODE:-1}" != 0 ] && [ "$(id -u)" = 0 ]; then
    # The real node's images come from Debian's packages (network and disk more than CPU): build them
    # beside the Go builds. The real node's own call below waits for this one (build_lock) and finds
    # them cached; a machine that cannot run the real node has only spent some downloads.
    mkdir -p "$CLUSTER_DIR/logs"
    "$here/images/build.sh" all >"$CLUSTER_DIR/logs/images-beside-go.log" 2>&1 &
  fi
  log "building ${missing[*]} (cached after the first time)"
  with_kubelet=1; [ "${REAL_NODE:-1}" = 0 ] && with_kubelet=0
  cache_bin=$(WITH_KUBELET=$with_kubelet "$here/build-k8s.sh" | tail -n 1)
  for b in "${missing[@]}"; do ln -sf "$cache_bin/$b" "$CLUSTER_DIR/bin/$b"; done
fi
B=$CLUSTER_DIR/bin
log "binaries: $(readlink -f "$B/kube-apiserver" | xargs dirname) ($("$B/kube-apiserver" --version))"

# --- PKI: a CA, the serving cert, client certs per component, the service-account key.
make_pki "$CLUSTER_DIR/pki"
P=$CLUSTER_DIR/pki
server=https://127.0.0.1:$APISERVER_PORT
for who in admin controller-manager scheduler kwok; do
  write_kubeconfig "$CLUSTER_DIR/$who.kubeconfig" "$server" "$P/$who.crt" "$P/$who.key"
done
cp "$CLUSTER_DIR/admin.kubeconfig" "$CLUSTER_DIR/kubeconfig"

# --- etcd
start etcd "$B/etcd" --name=local --data-dir="$CLUSTER_DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls=http://127.0.0.1:$((ETCD_PORT + 1)) \
  --initial-advertise-peer-urls=http://127.0.0.1:$((ETCD_PORT + 1)) \
  --initial-cluster=local=http://127.0.0.1:$((ETCD_PORT + 1)) \
  --listen-metrics-urls=http://127.0.0.1:$((ETCD_PORT + 2)) \
  --unsafe-no-fsync --quota-backend-bytes=8589934592 --log-level=warn
wait_for "etcd" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver
start kube-apiserver "$B/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-cluster-ip-range=10.96.0.0/16 \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --authorization-mode=Node,RBAC --allow-privileged=true \
  --enable-admission-plugins=NodeRestriction \
  --endpoint-reconciler-type=none --enable-priority-and-fairness=false \
  --max-requests-inflight=1000 --max-mutating-requests-inflight=500 \
  --profiling=false --v=1 \
  --audit-policy-file="$here/audit/policy.yaml" --audit-log-path="$CLUSTER_DIR/audit/audit.log" \
  --audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=500 --audit-log-maxbackup=1 \
  ${apiserver_gates[@]+"${apiserver_gates[@]}"}
wait_for "kube-apiserver /readyz" 120 kubectl_admin get --raw /readyz

# --- kube-controller-manager: the default controllers (job, statefulset, garbage collector, ...).
start kube-controller-manager "$B/kube-controller-manager" \
  --kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
  --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --kube-api-qps=300 --kube-api-burst=600 --concurrent-job-syncs=10 \
  --concurrent-statefulset-syncs=10 --concurrent-gc-syncs=20 \
  --node-monitor-grace-period=60s --v=1 ${gates[@]+"${gates[@]}"}

# --- kube-scheduler
cat > "$CLUSTER_DIR/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $CLUSTER_DIR/scheduler.kubeconfig
  qps: 300
  burst: 600
leaderElection:
  leaderElect: false
EOF
start kube-scheduler "$B/kube-scheduler" --config="$CLUSTER_DIR/scheduler.yaml" \
  --authentication-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig="$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --v=1 ${gates[@]+"${gates[@]}"}

# --- kwok and its simulated nodes
# kwok serves the kubelet's API on its port, which every kwok node advertises (node-port, stage
# node-initialize): the API server relays `pods/log` there over HTTPS, as to a real kubelet (it
# verifies no kubelet certificate: no --kubelet-certificate-authority). The simulated containers'
# logs: hack/kwok/logs/README.md.
kwok_serving_cert "$P"
kwok_logs "$CLUSTER_DIR"
start kwok "$B/kwok" --kubeconfig="$CLUSTER_DIR/kwok.kubeconfig" --config="$here/kwok/kwok.yaml" \
  --config="$CLUSTER_DIR/kwok-logs.yaml" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.0.1 --server-address="127.0.0.1:$KWOK_PORT" --node-port="$KWOK_PORT" \
  --tls-cert-file="$P/kwok-serving.crt" --tls-private-key-file="$P/kwok-serving.key"
for i in $(seq 0 $((KWOK_NODES - 1))); do
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "256", memory: 1Ti, pods: "3000"}
  capacity: {cpu: "256", memory: 1Ti, pods: "3000"}
EOF
done
wait_for "the default ServiceAccount" 60 kubectl_admin -n default get serviceaccount default
wait_for "$KWOK_NODES Ready kwok nodes" 60 nodes_ready "$KWOK_NODES"

if [ "$WORKLOAD_API" != 0 ]; then
  wait_for "the Workload API (scheduling.k8s.io/v1beta1)" 30 workload_api_served
fi
[ "${REAL_NODE:-1}" = 0 ] || real_node_up
log "cluster up in $((SECONDS - t_start))s: export KUBECONFIG=$CLUSTER_DIR/kubeconfig"
