# The real node's settings and helpers (hack/realnode/up.sh, down.sh, smoke-test.sh, hack/image.sh).
# Expects CLUSTER_DIR; sources common.sh.
# Everything the real node writes lives in $RN ($CLUSTER_DIR/realnode), except the kubelet's
# symlinks in /var/log/containers (a path compiled into the kubelet), which down.sh removes.

RN=$CLUSTER_DIR/realnode
NODE_NAME=${REALNODE_NAME:-realnode}
BRIDGE=${REALNODE_BRIDGE:-mpijob-br0}
POD_SUBNET=${REALNODE_POD_SUBNET:-10.244.0.0/24}
# The bridge's own address: the pods' on-link DNS server (CoreDNS), the node's InternalIP and
# the kubelet's listen address. Pods get no default route: nothing leaves the bridge.
GATEWAY=${REALNODE_GATEWAY:-${POD_SUBNET%.*}.1}
# The `kubernetes` Service (the first address of kube-apiserver's service range) and where it
# really listens: with no kube-proxy, up.sh plays kube-proxy for this one Service only (a DNAT
# from the bridge to the API server on the host's loopback), so pods use in-cluster config.
KUBERNETES_SERVICE_IP=${REALNODE_KUBERNETES_SERVICE_IP:-10.96.0.1}
APISERVER_LOCAL=127.0.0.1:${APISERVER_PORT:-6443}
KUBELET_PORT=${REALNODE_KUBELET_PORT:-10250}
KUBELET_HEALTHZ_PORT=${REALNODE_KUBELET_HEALTHZ_PORT:-10248}
COREDNS_READY=127.0.0.1:${REALNODE_COREDNS_READY_PORT:-18181}
NODE_LABEL=mpijob-operator.dev/real-node
CNI_BIN=${CNI_BIN:-/usr/lib/cni}
CONTAINER_LOGS=/var/log/containers
# A unix socket path must fit in 108 bytes; fall back to /run for deep checkouts.
SOCK=$RN/containerd.sock
if [ ${#SOCK} -gt 100 ]; then
  SOCK=/run/mpijob-realnode-$(echo "$RN" | sha256sum | cut -c1-12)/containerd.sock
fi

LOG_TAG=${LOG_TAG:-realnode}
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ctr_k8s() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# The real node is one per machine (one bridge, CoreDNS on its gateway, the kubelet's ports, the
# kubepods cgroups): this file names the cluster directory that runs it.
OWNER_FILE=${REALNODE_OWNER_FILE:-/run/mpijob-operator-realnode.owner}
# other_owner: prints the cluster directory of another local cluster whose real node is up.
other_owner() {
  local owner pid
  owner=$(cat "$OWNER_FILE" 2>/dev/null) && [ -n "$owner" ] && [ "$owner" != "$CLUSTER_DIR" ] || return 1
  pid=$(cat "$owner/pids/kubelet.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null || return 1
  echo "$owner"
}
# Mount points at or under a directory, deepest first (from this mount namespace's mountinfo;
# octal escapes such as \040 are decoded).
mounts_under() {
  local dir=$1
  awk -v d="$dir" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print m }' \
    /proc/self/mountinfo | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-
}

umount_under() {  # umount_under <dir>: every mount under it; returns 1 if some remain
  local dir=$1 m tries
  for tries in 1 2 3; do
    mounts_under "$dir" | while IFS= read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    [ -z "$(mounts_under "$dir")" ] && return 0
    sleep 0.5
  done
  return 1
}

# The DNAT rule of the `kubernetes` Service (iptables arguments after the chain).
kubernetes_service_rule() {
  echo "-i $BRIDGE -d $KUBERNETES_SERVICE_IP/32 -p tcp --dport 443 -j DNAT --to-destination $APISERVER_LOCAL"
}
