#!/usr/bin/env bash
# Builds the real node's NetworkPolicy implementation, sigs.k8s.io/kube-network-policies at
# KUBE_NETWORK_POLICIES_VERSION (hack/versions.sh), from its Go module into the cache:
#   go install sigs.k8s.io/kube-network-policies/cmd@v<version>
# (in v0.8.0 its one command, package main, is the module's cmd/; later releases moved it to
# cmd/kube-network-policies/standard). Nothing of its code is copied here. Prints the binary's path
# on the last line of stdout; a second run is a cache hit. Run by hack/realnode/network-policies.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=kube-network-policies
source "$here/lib/common.sh"
build_lock kube-network-policies
cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
dir=$cache/kube-network-policies-v$KUBE_NETWORK_POLICIES_VERSION
bin=$dir/bin/kube-network-policies
if [ ! -x "$bin" ]; then
  export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null || die "go is missing (kube-network-policies is built from its Go module)"
  t0=$SECONDS
  log "building sigs.k8s.io/kube-network-policies v$KUBE_NETWORK_POLICIES_VERSION from its Go module (cold: minutes)"
  tmp=$(mktemp -d "$cache/tmp.kube-network-policies.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # `go install pkg@version` builds the module as published (its go.mod, its go.sum checked against
  # the checksum database), outside any module of ours; GOFLAGS' -mod has no say there.
  GOFLAGS=$(echo "${GOFLAGS:-}" | sed 's/-mod=[a-z]*//') GOBIN=$tmp CGO_ENABLED=0 \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kube-network-policies/cmd@v$KUBE_NETWORK_POLICIES_VERSION"
  mkdir -p "$dir/bin"
  mv "$tmp/cmd" "$bin"
  log "kube-network-policies built in $((SECONDS - t0))s"
fi
echo "$bin"
