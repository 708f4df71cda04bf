#!/usr/bin/env bash
# Adds one REAL node to the local cluster (hack/cluster-up.sh must be up):
#   containerd (Debian's, own config/state/socket under $CLUSTER_DIR/realnode) + runc,
#   a CNI bridge ($BRIDGE, $POD_SUBNET, no default route and no NAT: pods reach each other, the
#   bridge address and the `kubernetes` Service, DNATed to the API server on the host's loopback), CoreDNS on the host at $GATEWAY:53 serving cluster.local from the
#   API server (nothing is forwarded), the kubelet of the pinned release registering node
#   "realnode" (label mpijob-operator.dev/real-node=true, taint ...=true:NoSchedule), and the
#   locally built images localhost/pause:local and localhost/mpi-pi:{<hash>,latest}; and, where the
#   machine allows, NetworkPolicies enforced by sigs.k8s.io/kube-network-policies
#   (hack/realnode/network-policies.sh; REALNODE_NETWORK_POLICIES=0 leaves them unenforced).
#
#   hack/realnode/up.sh            bring it up (idempotent: a second run only checks it)
#   hack/realnode/up.sh --check    exit 0 if this machine can run a real node, else print why
#
# PID files: $CLUSTER_DIR/pids/{containerd,coredns,kubelet}.pid; logs: $CLUSTER_DIR/logs/.
# Pods for the real node need: nodeSelector mpijob-operator.dev/real-node: "true", a toleration
# for the taint, and imagePullPolicy IfNotPresent/Never. hack/realnode/down.sh undoes it all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
export CLUSTER_DIR
# shellcheck source=hack/lib/realnode.sh
source "$here/../lib/realnode.sh"
t_start=$SECONDS
PACKAGES=(containerd runc containernetworking-plugins debootstrap)

# ---------------------------------------------------------------------------------- checks
missing_packages() {
  local p out=()
  command -v containerd >/dev/null && command -v ctr >/dev/null || out+=(containerd)
  command -v runc >/dev/null || out+=(runc)
  for p in bridge host-local loopback; do [ -x "$CNI_BIN/$p" ] || { out+=(containernetworking-plugins); break; }; done
  command -v debootstrap >/dev/null || out+=(debootstrap)
  command -v iptables >/dev/null || out+=(iptables)
  echo "${out[*]}"
}

kubelet_bin() {  # the cluster's link, KUBEBUILDER_ASSETS, or hack/build-k8s.sh's cache
  local b
  # shellcheck source=hack/versions.sh
  source "$here/../versions.sh"
  for b in "$CLUSTER_DIR/bin/kubelet" "${KUBEBUILDER_ASSETS:-/nonexistent}/kubelet" \
    "$(k8s_bin_dir)/kubelet"; do
    [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

# Prints every reason this machine cannot run the real node; returns 1 if there is one.
check() {
  local why=() m c
  [ "$(uname -s)" = Linux ] || why+=("not Linux")
  [ "$(id -u)" = 0 ] || why+=("needs root (containerd, runc, mounts, a bridge)")
  if [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ]; then :; else
    why+=("no cgroup mounts (need cgroup v1 memory/cpu/pids under /sys/fs/cgroup, or cgroup v2)")
  fi
  if [ -d /sys/fs/cgroup/memory ]; then
    for c in cpu cpuacct memory pids devices freezer cpuset; do
      [ -d "/sys/fs/cgroup/$c" ] || why+=("cgroup v1 controller $c is not mounted at /sys/fs/cgroup/$c")
    done
  fi
  grep -qw overlay /proc/filesystems || why+=("no overlay filesystem in /proc/filesystems (containerd's overlayfs snapshotter)")
  for c in ip unshare openssl sha256sum curl; do command -v "$c" >/dev/null || why+=("$c is missing"); done
  m=$(missing_packages)
  if [ -n "$m" ]; then
    if ! command -v apt-get >/dev/null; then
      why+=("missing: $m (and no apt-get to install them)")
    elif ! apt-cache show $m >/dev/null 2>&1 && ! { apt-get update -qq >/dev/null 2>&1 && apt-cache show $m >/dev/null 2>&1; }; then
      why+=("missing Debian packages that apt cannot find: $m")
    fi
  fi
  if owner=$(other_owner); then
    why+=("the real node of another local cluster ($owner) runs on this machine (stop that cluster first)")
  fi
  kubelet_bin >/dev/null || why+=("no kubelet at $CLUSTER_DIR/bin/kubelet (hack/build-k8s.sh builds it unless WITH_KUBELET=0)")
  [ -n "${COREDNS:-}" ] || command -v go >/dev/null || why+=("go is missing (CoreDNS is built from its Go module; or set COREDNS=/path/to/coredns)")
  [ -s "$CLUSTER_DIR/pki/ca.key" ] || why+=("no cluster CA at $CLUSTER_DIR/pki/ca.key (start the control plane first)")
  [ -s "$CLUSTER_DIR/kubeconfig" ] || why+=("no admin kubeconfig at $CLUSTER_DIR/kubeconfig")
  if [ "$(id -u)" = 0 ] && ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    if ip link add mpijob-chk0 type bridge 2>/dev/null; then ip link del mpijob-chk0; else
      why+=("cannot create a network bridge (ip link add type bridge failed)")
    fi
  fi
  if [ ${#why[@]} -gt 0 ]; then printf '%s\n' "${why[@]}"; return 1; fi
  return 0
}

if [ "${1:-}" = --check ]; then
  if out=$(check); then echo "ok: this machine can run the real node"; exit 0; fi
  echo "$out" | paste -sd';' | sed 's/;/; /g'
  exit 1
fi
[ $# -eq 0 ] || die "usage: $0 [--check]"

step_t=$SECONDS
step() { log "$* (+$((SECONDS - step_t))s, total $((SECONDS - t_start))s)"; step_t=$SECONDS; }

node_ready() {
  [ "$(kubectl_admin get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
wait_until() {  # wait_until <what> <seconds> <command...>
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 4; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  log "$what: not ready after ${secs}s"
  return 1
}

# Images: built (or found in the cache) and imported into containerd unless it has them.
images=
import_images() {
  [ -n "$images" ] || images=$("$here/../images/build.sh" all)
  PAUSE_TAR=$(echo "$images" | awk '$1 == "pause" {print $2}')
  MPI_TAR=$(echo "$images" | awk '$1 == "mpi-pi-openmpi4" {print $2}')
  MPI_REF=$(echo "$images" | awk '$1 == "mpi-pi-openmpi4" {print $3}')
  [ -n "${1:-}" ] || return 0
  local have pair ref tarball
  have=$(ctr_k8s images ls -q 2>/dev/null || true)
  for pair in "localhost/pause:local $PAUSE_TAR" "$MPI_REF $MPI_TAR"; do
    ref=${pair%% *} tarball=${pair#* }
    if ! grep -qxF "$ref" <<<"$have"; then
      log "importing $ref"
      ctr_k8s images import "$tarball" >/dev/null
      ctr_k8s images ls -q | grep -xF "$ref" >/dev/null || die "importing $tarball did not give $ref"
    fi
  done
}

# NetworkPolicies enforced on the node where the machine allows (else it says why and the node runs
# without): hack/realnode/network-policies.sh.
network_policies() {
  [ "${REALNODE_NETWORK_POLICIES:-1}" = 0 ] && { log "NetworkPolicies not enforced: REALNODE_NETWORK_POLICIES=0"; return 0; }
  "$here/network-policies.sh" up
}

# Fast path: everything already up (the images are still brought up to date).
if alive containerd && alive coredns && alive kubelet && node_ready; then
  import_images now
  network_policies
  log "real node $NODE_NAME already up ($MPI_REF)"
  exit 0
fi

if ! reasons=$(check); then
  # Missing packages are installed below; anything else is fatal.
  fatal=$(echo "$reasons" | grep -v '^missing' || true)
  [ -z "$fatal" ] || die "this machine cannot run the real node: $(echo "$fatal" | paste -sd';')"
fi
m=$(missing_packages)
if [ -n "$m" ]; then
  log "installing Debian packages: $m"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $m >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $m >/dev/null; } ||
    die "apt-get install $m failed"
  [ -z "$(missing_packages)" ] || die "still missing after apt-get: $(missing_packages)"
  step "packages installed"
fi
KUBELET=$(kubelet_bin)
echo "$CLUSTER_DIR" >"$OWNER_FILE"
mkdir -p "$RN"/{pki,cni/net.d,cni/ipam,kubelet,pod-logs,containerd,volume-plugins} "$CLUSTER_DIR"/{logs,pids} "$(dirname "$SOCK")"

# ---------------------------------------------------------------------------------- images + CoreDNS binary
import_images
step "images built or cached: localhost/pause:local, $MPI_REF"
COREDNS_BIN=$("$here/build-coredns.sh" | tail -n 1)
step "CoreDNS: $COREDNS_BIN"

# ---------------------------------------------------------------------------------- network
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
fi
ip addr show dev "$BRIDGE" | grep "inet $GATEWAY/" >/dev/null || ip addr add "$GATEWAY/${POD_SUBNET#*/}" dev "$BRIDGE"
# The bridge's MAC address is pinned, as the CNI bridge plugin pins it where it owns the gateway: a
# Linux bridge without one of its own takes the lowest MAC of its ports, so a pod whose host-side veth
# held it took the gateway's address with it when it was deleted, and every other pod's ARP entry for
# the gateway (their DNS server, CoreDNS) pointed nowhere until it expired: 30-45 s of lost name
# lookups right after a pod was replaced (docs/architecture.md section 11, "When in place"). The address
# is made from the gateway's (0a:58 and its four bytes, locally administered).
IFS=. read -r g1 g2 g3 g4 <<<"$GATEWAY"
bridge_mac=$(printf '0a:58:%02x:%02x:%02x:%02x' "$g1" "$g2" "$g3" "$g4")
# addr_assign_type 3: the address was set, the kernel no longer follows the ports
if [ "$(cat "/sys/class/net/$BRIDGE/address")" != "$bridge_mac" ] ||
   [ "$(cat "/sys/class/net/$BRIDGE/addr_assign_type")" != 3 ]; then
  ip link set "$BRIDGE" address "$bridge_mac"
fi
ip link set "$BRIDGE" up
# Nothing from the pods is routed anywhere: no forwarding on this bridge.
echo 0 >"/proc/sys/net/ipv4/conf/$BRIDGE/forwarding" 2>/dev/null || true
# The `kubernetes` Service, as kube-proxy would give it: pods route that one address to the
# bridge (the CNI route below), where it is DNATed to the API server on the host's loopback
# (route_localnet lets a packet from the bridge reach 127.0.0.1; nothing is forwarded).
echo 1 >"/proc/sys/net/ipv4/conf/$BRIDGE/route_localnet"
# shellcheck disable=SC2046
iptables -t nat -C PREROUTING $(kubernetes_service_rule) 2>/dev/null ||
  iptables -t nat -A PREROUTING $(kubernetes_service_rule)
cat >"$RN/cni/net.d/10-realnode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "realnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$GATEWAY"}]],
        "routes": [{"dst": "$KUBERNETES_SERVICE_IP/32", "gw": "$GATEWAY"}],
        "dataDir": "$RN/cni/ipam"
      }
    }
  ]
}
EOF
step "bridge $BRIDGE $GATEWAY/${POD_SUBNET#*/} and CNI config"

# ---------------------------------------------------------------------------------- containerd
if ! alive containerd; then
  sed -e "s#@RN@#$RN#g; s#@SOCK@#$SOCK#g; s#@RUNC@#$(command -v runc)#g; s#@CNI_BIN@#$CNI_BIN#g" \
    "$here/containerd.toml.in" >"$RN/containerd.toml"
  log "starting containerd ($SOCK)"
  setsid containerd --config "$RN/containerd.toml" >"$CLUSTER_DIR/logs/containerd.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/containerd.pid"
fi
wait_until containerd 30 ctr --address "$SOCK" version ||
  { tail -n 20 "$CLUSTER_DIR/logs/containerd.log" >&2; die "containerd did not start"; }
step "containerd up"
import_images now
step "images imported into containerd (k8s.io namespace)"

# ---------------------------------------------------------------------------------- certificates
P=$CLUSTER_DIR/pki
node_cert() {  # node_cert <name> <subject> <extendedKeyUsage> [subjectAltName]
  local name=$1 subj=$2 usage=$3 san=${4:-} ext
  [ -s "$RN/pki/$name.crt" ] && return 0
  ext=$(mktemp)
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"; [ -z "$san" ] || echo "subjectAltName=$san"; } >"$ext"
  openssl ecparam -name prime256v1 -genkey -noout -out "$RN/pki/$name.key" 2>/dev/null
  openssl req -new -key "$RN/pki/$name.key" -subj "$subj" -out "$RN/pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$RN/pki/$name.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -CAserial "$RN/pki/ca.srl" -days 3650 -extfile "$ext" -out "$RN/pki/$name.crt" 2>/dev/null
  rm -f "$RN/pki/$name.csr" "$ext"
  chmod 600 "$RN/pki/$name.key"
}
node_cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
node_cert kubelet-serving "/CN=$NODE_NAME" serverAuth "IP:$GATEWAY,IP:127.0.0.1,DNS:$NODE_NAME,DNS:localhost"
server=$(awk '$1 == "server:" {print $2; exit}' "$CLUSTER_DIR/kubeconfig")
cat >"$RN/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority: "$P/ca.crt"}
users:
- name: kubelet
  user: {client-certificate: "$RN/pki/kubelet-client.crt", client-key: "$RN/pki/kubelet-client.key"}
contexts:
- name: local
  context: {cluster: local, user: kubelet}
current-context: local
EOF

# ---------------------------------------------------------------------------------- CoreDNS
# Pods' resolv.conf: the kubelet writes "nameserver $GATEWAY", the cluster search domains and
# ndots:5; this file only supplies the (empty) host part, so that nothing is ever forwarded.
echo "nameserver $GATEWAY" >"$RN/resolv.conf"
cat >"$RN/Corefile" <<EOF
# Serves the cluster domain (headless Services, pod hostname+subdomain records) from the API
# server; answers NXDOMAIN for everything else: nothing is forwarded off this machine.
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $GATEWAY
    errors
    ready $COREDNS_READY
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $CLUSTER_DIR/kubeconfig local
        pods insecure
        ttl 1
        fallthrough in-addr.arpa ip6.arpa
    }
}
.:53 {
    bind $GATEWAY
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
if ! alive coredns; then
  log "starting CoreDNS on $GATEWAY:53"
  setsid "$COREDNS_BIN" -conf "$RN/Corefile" >"$CLUSTER_DIR/logs/coredns.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/coredns.pid"
fi
wait_until "CoreDNS" 60 curl -sf "http://$COREDNS_READY/ready" ||
  { tail -n 20 "$CLUSTER_DIR/logs/coredns.log" >&2; die "CoreDNS did not become ready"; }
step "CoreDNS ready on $GATEWAY:53"

# ---------------------------------------------------------------------------------- kubelet
cat >"$RN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$SOCK
# cgroup v1 hosts (deprecated upstream, still supported with this switch)
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: $GATEWAY
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $RN/pki/kubelet-serving.crt
tlsPrivateKeyFile: $RN/pki/kubelet-serving.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [$GATEWAY]
resolvConf: $RN/resolv.conf
podLogsDir: $RN/pod-logs
volumePluginDir: $RN/volume-plugins
registerNode: true
registerWithTaints:
- {key: $NODE_LABEL, value: "true", effect: NoSchedule}
protectKernelDefaults: false
makeIPTablesUtilChains: false
# Images are imported, never pulled: never garbage-collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
maxPods: 64
serializeImagePulls: false
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 5s
shutdownGracePeriod: 0s
logging: {format: text}
EOF
if ! alive kubelet; then
  log "starting kubelet ($("$KUBELET" --version))"
  setsid "$KUBELET" --config="$RN/kubelet.yaml" --kubeconfig="$RN/kubelet.kubeconfig" \
    --root-dir="$RN/kubelet" --cert-dir="$RN/pki" --hostname-override="$NODE_NAME" \
    --node-ip="$GATEWAY" --node-labels="$NODE_LABEL=true" --v=1 \
    >"$CLUSTER_DIR/logs/kubelet.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/kubelet.pid"
fi
if ! wait_until "node $NODE_NAME Ready" 120 node_ready; then
  alive kubelet || log "the kubelet exited"
  grep -E '^E|failed|error' "$CLUSTER_DIR/logs/kubelet.log" | tail -n 20 >&2
  die "node $NODE_NAME did not become Ready (log: $CLUSTER_DIR/logs/kubelet.log)"
fi
step "node $NODE_NAME Ready"
network_policies
step "NetworkPolicies"
log "real node up in $((SECONDS - t_start))s: pods need nodeSelector $NODE_LABEL=true, a toleration for the taint $NODE_LABEL=true:NoSchedule, image $MPI_REF (or localhost/mpi-pi:latest) with imagePullPolicy IfNotPresent"
