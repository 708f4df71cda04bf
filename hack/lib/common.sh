# The shell library every hack/ script sources first (as Kubernetes' hack/lib/): logging, the
# local cluster's kubectl, and the processes started under $CLUSTER_DIR/pids.
#   LOG_TAG=build-k8s; source "$here/lib/common.sh"
# log lines go to stderr as "[<LOG_TAG>] ...", LOG_TAG defaulting to the script's name.

# Every Go build here: -mod=mod unless GOFLAGS says otherwise (the tools modules carry no vendor/),
# and no DWARF from the compiler. Each binary is linked stripped (-ldflags "-s -w"), which drops the
# DWARF every compiled package carries; -dwarf=false spares writing it: 4-13% of a cold build's CPU
# (docs/figures.md), the compiled packages shared by all the builds as before (one flag for all).
case " ${GOFLAGS:-} " in
  *" -gcflags="*) ;;
  *) GOFLAGS="${GOFLAGS:--mod=mod} -gcflags=all=-dwarf=false" ;;
esac
export GOFLAGS

log() { echo "[${LOG_TAG:-$(basename "$0" .sh)}] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The local cluster's admin kubectl (CLUSTER_DIR is read when called, not when sourced).
kubectl_admin() { "$CLUSTER_DIR/bin/kubectl" --kubeconfig="$CLUSTER_DIR/kubeconfig" "$@"; }

# crd_established <crd> [seconds]: waits until the CRD (e.g. mpijobs.kubeflow.org) is Established.
# Polled rather than `kubectl wait`: a CRD created a moment ago has no status.conditions yet, and
# `kubectl wait` then fails at once ("accessor error: <nil>") instead of waiting.
crd_established() {
  local crd=$1 secs=${2:-60} i
  for ((i = 0; i < secs * 5; i++)); do
    [ "$(kubectl_admin get "crd/$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' \
          2>/dev/null)" = True ] && return 0
    sleep 0.2
  done
  die "crd/$crd not Established after ${secs}s"
}

pid_of() { [ -s "$CLUSTER_DIR/pids/$1.pid" ] && cat "$CLUSTER_DIR/pids/$1.pid"; }
# running <pid>: exists and is not a zombie (PID 1 here may not reap what a script left behind)
running() { kill -0 "$1" 2>/dev/null && ! awk '{exit $3 != "Z"}' "/proc/$1/stat" 2>/dev/null; }
alive() { local p; p=$(pid_of "$1") && running "$p"; }  # alive <name>: per its PID file

stop_pid() {  # stop_pid <name>: TERM, wait up to 10 s, KILL; removes the PID file
  local name=$1 pid i
  pid=$(pid_of "$name") || return 0
  if running "$pid"; then
    log "stopping $name ($pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$CLUSTER_DIR/pids/$name.pid"
}

# tools_key <dir>...: a short hash of Go tools modules (hack/tools/<name>: go.mod, go.sum, Go files),
# part of the cache directory of what is built from them. A key of the release versions alone would
# keep serving binaries built from an older go.mod (e.g. from before the shared dependencies were raised
# to one version: docs/development.md, "The Go tools modules share their dependencies' versions");
# with it, a changed go.mod rebuilds.
tools_key() {
  local d
  for d in "$@"; do cat "$d/go.mod" "$d/go.sum" "$d"/*.go; done | sha256sum | cut -c1-12
}

# k8s_bin_dir: where hack/build-k8s.sh caches the control plane (versions.sh must be sourced).
k8s_bin_dir() {
  local tools cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
  tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)
  echo "$cache/k8s-v${K8S_VERSION}-etcd-v${ETCD_VERSION}-kwok-v${KWOK_VERSION}-$(tools_key "$tools/k8s" "$tools/etcd" "$tools/kwok")/bin"
}

# knp_bin: where hack/build-kube-network-policies.sh caches its binary (versions.sh must be sourced).
knp_bin() {
  local tools cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
  tools=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools" && pwd)
  echo "$cache/kube-network-policies-v${KUBE_NETWORK_POLICIES_VERSION}-$(tools_key "$tools/kube-network-policies")/bin/kube-network-policies"
}

# after_k8s_build: waits while hack/build-k8s.sh builds the control plane (its build_lock, taken
# shared here). A build whose tools module shares its dependency versions (the Go operator,
# Prometheus) started beside it, as make test starts them on a cold machine (testsupport/builds.py),
# would compile the same packages a second time instead of finding them in Go's build cache.
after_k8s_build() {
  local fd
  _cache_lock k8s -s "waiting for the control plane's build, whose compiled packages this one reuses" fd
  exec {fd}>&-
}

# build_lock <name> [<variable>]: an exclusive lock on one cached build, held until the script exits
# or, when its descriptor is kept in <variable>, until `build_unlock "$<variable>"`. Two runs of one
# build (the tests' background builds, testsupport/builds.py, and a test fixture asking for the same
# thing) then never build twice: the second waits, then finds the cache.
build_lock() {
  _cache_lock "$1" -x "waiting for another run of this build" "${2:-BUILD_LOCK_FD}"
}

# _cache_lock <name> <-x|-s> <message> <variable>: takes the cache's lock <name> (locks/<name>.lock),
# exclusive or shared, logging <message> and the lock's file if it must wait; its descriptor goes into <variable>.
# (Its own names start with _cache_lock: a caller's `local fd` passed as <variable> stays visible.)
_cache_lock() {
  local _cache_lock_dir=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}/locks _cache_lock_fd
  mkdir -p "$_cache_lock_dir"
  exec {_cache_lock_fd}>"$_cache_lock_dir/$1.lock"
  if ! flock "$2" -n "$_cache_lock_fd"; then
    log "$3 ($_cache_lock_dir/$1.lock)"
    flock "$2" "$_cache_lock_fd"
  fi
  printf -v "$4" %s "$_cache_lock_fd"
}
build_unlock() {  # build_unlock <descriptor>: the lock build_lock took, released
  [[ $1 =~ ^[0-9]+$ ]] || { log "build_unlock: not a descriptor: $1"; return 1; }
  eval "exec $1>&-"
}
