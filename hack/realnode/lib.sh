# Settings and helpers shared by hack/realnode/up.sh and down.sh. Expects CLUSTER_DIR.
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

rlog() { echo "[realnode] $*" >&2; }
rdie() { rlog "ERROR: $*"; exit 1; }

kubectl_admin() { "$CLUSTER_DIR/bin/kubectl" --kubeconfig="$CLUSTER_DIR/kubeconfig" "$@"; }
ctr_k8s() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

pid_of() { [ -s "$CLUSTER_DIR/pids/$1.pid" ] && cat "$CLUSTER_DIR/pids/$1.pid"; }

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
# running <pid>: exists and is not a zombie (PID 1 here may not reap what up.sh left behind)
running() { kill -0 "$1" 2>/dev/null && ! awk '{exit $3 != "Z"}' "/proc/$1/stat" 2>/dev/null; }
alive() { local p; p=$(pid_of "$1") && running "$p"; }  # alive <name>: per its PID file

stop_pid() {  # stop_pid <name>: TERM, wait up to 10 s, KILL; removes the PID file
  local name=$1 pid i
  pid=$(pid_of "$name") || return 0
  if running "$pid"; then
    rlog "stopping $name ($pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$CLUSTER_DIR/pids/$name.pid"
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
