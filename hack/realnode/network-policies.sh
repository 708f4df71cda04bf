#!/usr/bin/env bash
# Enforces NetworkPolicies on the real node (hack/realnode/up.sh) with sigs.k8s.io/kube-network-policies,
# run as a host process beside the kubelet, as its DaemonSet would run it (host network, privileged):
#
#   hack/realnode/network-policies.sh up       start it (idempotent; hack/realnode/up.sh runs this)
#   hack/realnode/network-policies.sh down     stop it and remove its netfilter rules (hack/realnode/down.sh)
#   hack/realnode/network-policies.sh status   exit 0 if it runs and holds its queue
#   hack/realnode/network-policies.sh --check  exit 0 if this machine can run it, else print why
#
# How it works: netfilter hands the first packet of every new connection to or from a pod to a
# queue (NFQUEUE); kube-network-policies reads the queue, evaluates the NetworkPolicies of the
# source and destination pods (from its informers), and accepts or drops the packet; conntrack lets
# the rest of an accepted connection through. Pods of the real node share one bridge, so the
# bridged packets must pass netfilter (br_netfilter, /proc/sys/net/bridge/bridge-nf-call-iptables = 1).
# Traffic of the node's root processes (the kubelet's probes, a Prometheus on the host) is always
# admitted, as kube-network-policies does (`meta skuid 0 accept`).
#
# The queueing rule is kube-network-policies' own nftables table where the kernel has nftables'
# `queue` expression (CONFIG_NFT_QUEUE). Where it has not (these machines' kernels), the agent's
# table cannot be written, and this script adds the same rules through the kernel's xtables NFQUEUE
# target (iptables, nft_compat) in the mangle table's POSTROUTING, chain $CHAIN: ESTABLISHED/RELATED
# and root's own traffic return, every other packet from or to the pod subnet goes to the queue.
# Either way the verdicts are kube-network-policies'. `--queue-bypass`/`--fail-open`: with the agent
# stopped, packets pass (the node runs unprotected rather than cut off), as `status` then says.
#
# kube-network-policies v0.8.0 reads only in-cluster credentials (a ServiceAccount token at
# /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT): it runs in a private
# mount namespace whose /run is a tmpfs holding its own token (ServiceAccount kube-system/
# kube-network-policies, hack/realnode/kube-network-policies.yaml), so nothing is written to the
# host's /run. PID file $CLUSTER_DIR/pids/kube-network-policies.pid, log $CLUSTER_DIR/logs/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
export CLUSTER_DIR
# shellcheck source=hack/lib/realnode.sh
source "$here/../lib/realnode.sh"
LOG_TAG=network-policies

NAME=kube-network-policies
QUEUE=${REALNODE_NFQUEUE:-100}
METRICS=127.0.0.1:${REALNODE_NETPOL_METRICS_PORT:-19080}
CHAIN=MPIJOB-NETPOL        # our xtables chain (mangle), only where nftables cannot queue
NFT_TABLE=kube-network-policies  # the agent's own table (inet)
STATE=$RN/network-policies
BRIDGE_NF=/proc/sys/net/bridge/bridge-nf-call-iptables

node_up() { alive kubelet && alive containerd; }

# How this kernel can hand packets to userspace: "nft" (nftables' queue expression), "xt" (xtables'
# NFQUEUE target), or nothing. Probed in a throw-away network namespace: the host's rules are untouched.
queue_mode() {
  if unshare --net sh -c "nft add table inet probe && nft add chain inet probe c '{ type filter hook postrouting priority 0; }' &&
      nft add rule inet probe c queue num $QUEUE bypass" >/dev/null 2>&1; then
    echo nft
  elif unshare --net iptables -w -t mangle -A POSTROUTING -j NFQUEUE --queue-num "$QUEUE" --queue-bypass >/dev/null 2>&1; then
    echo xt
  else
    return 1
  fi
}

# Prints every reason this machine cannot enforce NetworkPolicies on the real node; returns 1 if any.
check() {
  local why=()
  [ "$(id -u)" = 0 ] || why+=("needs root (netfilter rules, a queue, a mount namespace)")
  if [ ! -e "$BRIDGE_NF" ]; then
    why+=("no $BRIDGE_NF: br_netfilter is not loaded, so packets between the real node's pods (one bridge) never reach netfilter")
  elif [ "$(cat "$BRIDGE_NF")" != 1 ]; then
    why+=("$BRIDGE_NF is $(cat "$BRIDGE_NF"), not 1: packets between the real node's pods (one bridge) bypass netfilter")
  fi
  command -v iptables >/dev/null || why+=("iptables is missing (hack/realnode/up.sh installs it)")
  if ! command -v nft >/dev/null && ! { command -v apt-get >/dev/null && apt-cache show nftables >/dev/null 2>&1; }; then
    why+=("nftables is missing and apt cannot install it")
  fi
  if [ "$(id -u)" = 0 ] && command -v iptables >/dev/null && ! queue_mode >/dev/null; then
    why+=("the kernel can queue packets to userspace neither with nftables (CONFIG_NFT_QUEUE) nor with xtables (CONFIG_NETFILTER_XT_TARGET_NFQUEUE)")
  fi
  [ -x "$(cache_bin)" ] || command -v go >/dev/null || [ -x /usr/local/go/bin/go ] ||
    why+=("go is missing (kube-network-policies is built from its Go module)")
  if [ ${#why[@]} -gt 0 ]; then printf '%s\n' "${why[@]}"; return 1; fi
}

cache_bin() {
  # shellcheck source=hack/versions.sh
  source "$here/../versions.sh"
  knp_bin
}

queue_bound() {  # the agent listens on its queue (nfnetlink_queue lists the queues with a listener)
  awk -v q="$QUEUE" '$1 == q {found = 1} END {exit !found}' /proc/net/netfilter/nfnetlink_queue 2>/dev/null
}

xt_rules() {  # the xtables rules, as iptables arguments after "-A $CHAIN"
  echo "-m conntrack --ctstate ESTABLISHED,RELATED -j RETURN"
  echo "-m owner --uid-owner 0 -j RETURN"
  # DNS to the node's own CoreDNS ($GATEWAY) never waits in the agent's queue: every pod's every name
  # lookup would go through a userspace process on two busy cores, and the ingress policies the
  # operator makes never concern it (seen without this: ssh's lookups in a launcher timing out,
  # "Temporary failure in name resolution", while other tests loaded the machine).
  echo "-d $GATEWAY -p udp --dport 53 -j RETURN"
  echo "-d $GATEWAY -p tcp --dport 53 -j RETURN"
  echo "-s $POD_SUBNET -j NFQUEUE --queue-num $QUEUE --queue-bypass"
  echo "-d $POD_SUBNET -j NFQUEUE --queue-num $QUEUE --queue-bypass"
}

xt_up() {
  local rule
  iptables -w -t mangle -N "$CHAIN" 2>/dev/null || iptables -w -t mangle -F "$CHAIN"
  while read -r rule; do
    # shellcheck disable=SC2086
    iptables -w -t mangle -A "$CHAIN" $rule
  done < <(xt_rules)
  iptables -w -t mangle -C POSTROUTING -j "$CHAIN" 2>/dev/null || iptables -w -t mangle -A POSTROUTING -j "$CHAIN"
}

xt_down() {
  command -v iptables >/dev/null || return 0
  while iptables -w -t mangle -D POSTROUTING -j "$CHAIN" 2>/dev/null; do :; done
  iptables -w -t mangle -F "$CHAIN" 2>/dev/null || true
  iptables -w -t mangle -X "$CHAIN" 2>/dev/null || true
}

xt_present() { iptables -w -t mangle -C POSTROUTING -j "$CHAIN" 2>/dev/null; }

status() {
  alive "$NAME" || { echo "kube-network-policies is not running"; return 1; }
  queue_bound || { echo "kube-network-policies runs but does not hold queue $QUEUE"; return 1; }
  if [ "$(cat "$STATE/mode" 2>/dev/null)" = xt ] && ! xt_present; then
    echo "kube-network-policies runs but the xtables rules that feed its queue are gone"; return 1
  fi
  echo "kube-network-policies enforces NetworkPolicies on $NODE_NAME (queue $QUEUE, $(cat "$STATE/mode" 2>/dev/null) rules)"
}

down() {
  local pid i
  xt_down
  if pid=$(pid_of "$NAME") && running "$pid"; then
    # It cleans up on SIGINT (not on SIGTERM), then waits 5 s before it exits.
    log "stopping $NAME ($pid)"
    kill -INT "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
  fi
  stop_pid "$NAME"
  command -v nft >/dev/null && nft delete table inet "$NFT_TABLE" 2>/dev/null || true
  rm -rf "$STATE"
}

up() {
  local t0=$SECONDS reasons mode bin server host port token
  node_up || die "the real node is not up (hack/realnode/up.sh first)"
  if status >/dev/null 2>&1; then
    log "$(status)"
    return 0
  fi
  if ! reasons=$(check); then
    log "NetworkPolicies are not enforced on the real node, this machine cannot: $(echo "$reasons" | paste -sd';' | sed 's/;/; /g')"
    return 0
  fi
  down >/dev/null 2>&1 || true  # what a dead agent left
  if ! command -v nft >/dev/null; then
    log "installing Debian's nftables"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nftables >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nftables >/dev/null; } ||
      die "apt-get install nftables failed"
  fi
  mode=$(queue_mode)
  bin=$("$here/../build-kube-network-policies.sh" | tail -n 1)
  mkdir -p "$STATE" "$CLUSTER_DIR"/{logs,pids}
  echo "$mode" >"$STATE/mode"
  kubectl_admin apply -f "$here/kube-network-policies.yaml" >/dev/null
  # A token for a year: the agent lives as long as this cluster (a new cluster has new keys anyway).
  token=$(kubectl_admin -n kube-system create token "$NAME" --duration=8760h)
  (umask 077 && echo -n "$token" >"$STATE/token")
  cp "$CLUSTER_DIR/pki/ca.crt" "$STATE/ca.crt"
  server=$(awk '$1 == "server:" {print $2; exit}' "$CLUSTER_DIR/kubeconfig")
  host=${server#https://}; port=${host##*:}; host=${host%:*}
  log "starting $NAME ($bin) for node $NODE_NAME, queue $QUEUE ($mode rules)"
  # In a mount namespace of its own: /run there is a tmpfs with the in-cluster credentials it reads.
  KUBERNETES_SERVICE_HOST=$host KUBERNETES_SERVICE_PORT=$port setsid unshare --mount --propagation private \
    sh -c 'mount -t tmpfs -o size=1m,mode=0755 tmpfs /run &&
           mkdir -p /run/secrets/kubernetes.io/serviceaccount &&
           cp "$1/token" "$1/ca.crt" /run/secrets/kubernetes.io/serviceaccount/ &&
           shift && exec "$@"' sh "$STATE" "$bin" \
    --hostname-override="$NODE_NAME" --nfqueue-id="$QUEUE" --fail-open --disable-nri \
    --netfilter-bug-1766-fix=false --metrics-bind-address="$METRICS" --v=2 \
    >"$CLUSTER_DIR/logs/$NAME.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/pids/$NAME.pid"
  for _ in $(seq 1 240); do queue_bound && break; alive "$NAME" || break; sleep 0.25; done
  if ! queue_bound; then
    tail -n 20 "$CLUSTER_DIR/logs/$NAME.log" >&2
    down
    die "$NAME did not take queue $QUEUE (log: $CLUSTER_DIR/logs/$NAME.log)"
  fi
  [ "$mode" = nft ] || xt_up
  log "$(status) in $((SECONDS - t0))s"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  --check)
    if out=$(check); then echo "ok: this machine can enforce NetworkPolicies on the real node"; exit 0; fi
    echo "$out" | paste -sd';' | sed 's/;/; /g'
    exit 1 ;;
  *) die "usage: $0 up|down|status|--check" ;;
esac
