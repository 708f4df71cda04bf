#!/usr/bin/env bash
# Stops the real node started by hack/realnode/up.sh and removes its state: kube-network-policies and
# its rules (hack/realnode/network-policies.sh), the kubelet, every
# container it ran (by cgroup, so none survive even if containerd is gone), containerd and its
# shims, CoreDNS, all mounts under $CLUSTER_DIR/realnode (unmounted before anything is removed),
# the bridge, what the kubelet and libcni leave in compiled-in paths (/var/log/containers,
# /var/lib/kubelet/device-plugins, /var/lib/cni/results) and the Node object (if the API
# server is still up). Safe to run when nothing is up. KEEP_STATE=1 keeps the files.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
export CLUSTER_DIR
# shellcheck source=hack/lib/realnode.sh
source "$here/../lib/realnode.sh"

# Another cluster's real node is not ours to stop (its pods share the kubepods cgroups below).
if owner=$(other_owner); then
  log "the real node belongs to $owner: leaving it up"
  exit 0
fi

# 1. The NetworkPolicy agent and its netfilter rules, then the kubelet, so that it restarts nothing.
"$here/network-policies.sh" down
stop_pid kubelet

# 2. The containers. The kubelet (cgroupfs driver) puts every pod under the "kubepods" cgroup:
#    kill what is in it, through containerd when it is up (clean), then by cgroup (certain).
if ctr --address "$SOCK" version >/dev/null 2>&1; then
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks kill -s KILL "$t" >/dev/null 2>&1; done
  sleep 0.5
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks delete -f "$t" >/dev/null 2>&1; done
fi
kill_cgroup_tree() {  # kills every process in every cgroup under <controller dir>/kubepods, removes the cgroups
  local top=$1 d p
  [ -d "$top" ] || return 0
  for d in $(find "$top" -depth -type d); do
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  done
  sleep 0.2
  for d in $(find "$top" -depth -type d); do rmdir "$d" 2>/dev/null; done
}
if [ -d /sys/fs/cgroup/memory ]; then
  kill_cgroup_tree /sys/fs/cgroup/pids/kubepods
  for c in /sys/fs/cgroup/*/kubepods; do kill_cgroup_tree "$c"; done
else
  kill_cgroup_tree /sys/fs/cgroup/kubepods.slice
  kill_cgroup_tree /sys/fs/cgroup/kubepods
fi

# 3. containerd, then its shims (they outlive it): exactly those serving our socket.
stop_pid containerd
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $SOCK( |$)" 2>/dev/null); do
  log "stopping containerd shim $p"
  kill -KILL "$p" 2>/dev/null
done

# 4. CoreDNS
stop_pid coredns

# 5. Mounts (secret tmpfs, overlay rootfs, netns, shm), deepest first, then the files.
if [ -d "$RN" ] || [ -n "$(mounts_under "$RN")" ]; then
  if ! umount_under "$RN"; then
    log "ERROR: these mounts under $RN could not be unmounted; not removing it:"
    mounts_under "$RN" >&2
    exit 1
  fi
  if [ "${KEEP_STATE:-0}" != 1 ]; then
    rm -rf "$RN"
    log "removed $RN"
  fi
fi
[ "$SOCK" = "$RN/containerd.sock" ] || rm -rf "$(dirname "$SOCK")"

# 6. The bridge and the kubelet's log symlinks that point into our state.
# shellcheck disable=SC2046
while iptables -t nat -D PREROUTING $(kubernetes_service_rule) 2>/dev/null; do :; done
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
fi
if [ -d "$CONTAINER_LOGS" ]; then
  find "$CONTAINER_LOGS" -maxdepth 1 -type l -lname "$RN/*" -delete 2>/dev/null
fi

# 7. What the kubelet and libcni write to compiled-in paths: the device-plugin socket, and CNI
#    result caches of our pods (they name our network namespaces, which live under $RN).
rm -f /var/lib/kubelet/device-plugins/kubelet.sock
rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
if [ -d /var/lib/cni/results ]; then
  grep -lF "$RN/" /var/lib/cni/results/* 2>/dev/null | while IFS= read -r f; do rm -f "$f"; done
fi

[ "$(cat "$OWNER_FILE" 2>/dev/null)" != "$CLUSTER_DIR" ] || rm -f "$OWNER_FILE"

# 8. The Node object, if the control plane is still there.
if [ -x "$CLUSTER_DIR/bin/kubectl" ] && [ -s "$CLUSTER_DIR/kubeconfig" ]; then
  kubectl_admin delete node "$NODE_NAME" --ignore-not-found --wait=false --request-timeout=5s >/dev/null 2>&1 || true
fi
exit 0
