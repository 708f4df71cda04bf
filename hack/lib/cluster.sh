# The local cluster's helpers (hack/cluster-up.sh, hack/cluster-down.sh): binaries, PKI,
# kubeconfigs, health. Expects CLUSTER_DIR; sources common.sh.
LOG_TAG=${LOG_TAG:-cluster}
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# A binary given by the user: $KUBEBUILDER_ASSETS/<name>, or <name> on PATH when its version is
# the pinned minor release (etcd and kwok: any version), so the build can be skipped.
find_prebuilt() {
  local name=$1 p
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$name" ]; then
    echo "$KUBEBUILDER_ASSETS/$name"; return 0
  fi
  p=$(command -v "$name" 2>/dev/null) || return 1
  case $name in
    etcd|kwok) echo "$p" ;;
    kubectl) "$p" version --client 2>/dev/null | grep "v${K8S_VERSION%.*}\." >/dev/null && echo "$p" ;;
    *) "$p" --version 2>/dev/null | grep "v${K8S_VERSION%.*}\." >/dev/null && echo "$p" ;;
  esac
}

wait_for() {  # wait_for <what> <seconds> <command...>
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 2; i++)); do
    "$@" >/dev/null 2>&1 && { log "$what: ok"; return 0; }
    sleep 0.5
  done
  log "$what: not ready after ${secs}s; last logs:"
  tail -n 20 "$CLUSTER_DIR"/logs/*.log >&2 || true
  die "$what did not become ready"
}

# start <name> <command...>: in its own session (survives the caller's Ctrl-C), PID file, log file.
start() {
  local name=$1; shift
  log "starting $name"
  setsid "$@" >"$CLUSTER_DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/$name.pid"
}

pids_alive() {
  local f any=1
  for f in "$CLUSTER_DIR"/pids/*.pid; do
    [ -e "$f" ] || continue
    any=0
    kill -0 "$(cat "$f")" 2>/dev/null || return 1
  done
  return $any
}

healthy() {
  [ -s "$CLUSTER_DIR/kubeconfig" ] && [ -x "$CLUSTER_DIR/bin/kubectl" ] && pids_alive &&
    kubectl_admin get --raw /readyz >/dev/null 2>&1
}

workload_api_served() {  # the API server serves Workloads and PodGroups of scheduling.k8s.io/v1beta1
  local r
  r=$(kubectl_admin api-resources --api-group=scheduling.k8s.io -o name 2>/dev/null) || return 1
  grep -qx "workloads.scheduling.k8s.io" <<<"$r" && grep -qx "podgroups.scheduling.k8s.io" <<<"$r"
}

nodes_ready() {  # nodes_ready <n>: at least n kwok nodes are Ready
  local n
  n=$(kubectl_admin get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  [ "$n" -ge "$1" ]
}

make_pki() {
  local d=$1
  [ -s "$d/ca.crt" ] && [ -s "$d/admin.crt" ] && return 0
  log "making certificates in $d"
  (
    cd "$d"
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -subj "/CN=mpijob-operator-local-ca" -days 3650 -out ca.crt 2>/dev/null
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
    cert apiserver "/CN=kube-apiserver" \
      "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      serverAuth
    cert admin "/O=system:masters/CN=admin"
    cert controller-manager "/CN=system:kube-controller-manager"
    cert scheduler "/CN=system:kube-scheduler"
    cert kwok "/O=system:masters/CN=kwok"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  )
}

kwok_logs() {  # kwok_logs <dir>: the simulated containers' logs and their ClusterLogs (hack/kwok/logs/README.md)
  local d=$1 src i
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../kwok/logs" && pwd)
  mkdir -p "$d/kwok-logs"
  cp "$src/finished.log" "$src/cut-short.log" "$d/kwok-logs/"
  for i in $(seq 0 599); do
    printf '2099-01-01T00:00:05.000000000Z stdout F step %d: %0700d\n' "$i" 0
  done >"$d/kwok-logs/chatty-cut-short.log"
  cat "$src/cut-short.log" >>"$d/kwok-logs/chatty-cut-short.log"
  cat >"$d/kwok-logs.yaml" <<KL
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: simulated-launchers
spec:
  logs:
  - containers: [sim-cut-short]
    logsFile: $d/kwok-logs/cut-short.log
  - containers: [sim-chatty-cut-short]
    logsFile: $d/kwok-logs/chatty-cut-short.log
  - logsFile: $d/kwok-logs/finished.log
KL
}

kwok_serving_cert() {  # kwok_serving_cert <pki dir>: kwok's kubelet API over HTTPS, as the API server asks
  [ -s "$1/kwok-serving.crt" ] && return 0
  (cd "$1" && cert kwok-serving "/CN=kwok-kubelet" "subjectAltName=IP:127.0.0.1,DNS:localhost" serverAuth)
}

cert() {  # cert <name> <subject> [subjectAltName=...] [serverAuth]: signed by ./ca
  local name=$1 subj=$2 san=${3:-} usage=${4:-clientAuth} ext
  ext=$(mktemp)
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"; [ -n "$san" ] && echo "$san"; } >"$ext"
  openssl ecparam -name prime256v1 -genkey -noout -out "$name.key" 2>/dev/null
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$ext"
}

write_kubeconfig() {  # write_kubeconfig <file> <server> <cert> <key>
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $2
    certificate-authority: $CLUSTER_DIR/pki/ca.crt
users:
- name: user
  user:
    client-certificate: $3
    client-key: $4
contexts:
- name: local
  context: {cluster: local, user: user}
current-context: local
KC
}

real_node_up() {
  local up=$here/realnode/up.sh reason
  if [ ! -x "$up" ]; then log "real node: not part of this checkout (hack/realnode/up.sh)"; return 0; fi
  if ! reason=$("$up" --check 2>&1); then
    log "real node skipped, this machine cannot run one: $reason"; return 0
  fi
  "$up"
}
