#!/usr/bin/env bash
# Builds the local cluster's binaries from the pinned upstream Go modules into a cache
# outside the work tree, keyed by version and by the tools modules' hash (tools_key, lib/common.sh),
# so a second run builds nothing and a changed go.mod rebuilds.
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, kwok
# Prints the bin directory on the last line of stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=build-k8s
source "$here/lib/common.sh"

bin=$(k8s_bin_dir)
mkdir -p "$bin"
# Held while it builds: two runs never build at once, and the builds that reuse the control plane's
# compiled packages wait for them (after_k8s_build, lib/common.sh).
build_lock k8s

ldflags_k8s() {
  local v=$K8S_VERSION major=${K8S_VERSION%%.*} rest=${K8S_VERSION#*.}
  local minor=${rest%%.*} pkg=k8s.io/component-base/version
  echo "-s -w -X $pkg.gitVersion=v$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
}

build() {  # build <tools dir> <ldflags> <out name=package>...
  local dir=$1 ldflags=$2; shift 2
  local missing=() spec
  for spec in "$@"; do [ -x "$bin/${spec%%=*}" ] || missing+=("$spec"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  for spec in "${missing[@]}"; do
    local name=${spec%%=*} pkg=${spec#*=}
    log "building $name from $pkg (cold builds take minutes on 2 cores)"
    local t0=$SECONDS
    (cd "$here/tools/$dir" && CGO_ENABLED=${CGO:-0} go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
    mv "$bin/$name.tmp" "$bin/$name"
    log "built $name in $((SECONDS - t0))s"
  done
}

build etcd "-s -w" etcd=go.etcd.io/etcd/server/v3
build k8s "$(ldflags_k8s)" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kubectl=k8s.io/kubernetes/cmd/kubectl
build kwok "-s -w" kwok=sigs.k8s.io/kwok/cmd/kwok
if [ "${WITH_KUBELET:-1}" = 1 ]; then
  build k8s "$(ldflags_k8s)" kubelet=k8s.io/kubernetes/cmd/kubelet
fi
echo "$bin"
