#!/usr/bin/env bash
# Builds the real node's NetworkPolicy implementation, sigs.k8s.io/kube-network-policies at
# KUBE_NETWORK_POLICIES_VERSION (hack/versions.sh), from its Go module into the cache, through the
# tools module hack/tools/kube-network-policies (in v0.8.0 its one command, package main, is the
# module's cmd/; later releases moved it to cmd/kube-network-policies/standard). The tools module
# requires the Kubernetes libraries and the rest at the versions the control plane's build compiles
# (docs/development.md, "The Go tools modules share their dependencies' versions"), so a cold machine
# compiles little more than its own packages: 8 CPU s instead of 190 with its own go.mod's (client-go
# v0.32). One module stays at its own version: github.com/opencontainers/runtime-spec (containerd/nri
# v0.9.0 does not compile against v1.3.0's Pids.Limit). Nothing of its code is copied here. Prints the
# binary's path on the last line of stdout; a second run is a cache hit (keyed by the tools module's
# hash: knp_bin, lib/common.sh). Run by hack/realnode/network-policies.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=kube-network-policies
source "$here/lib/common.sh"
build_lock kube-network-policies
bin=$(knp_bin)
if [ ! -x "$bin" ]; then
  export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null || die "go is missing (kube-network-policies is built from its Go module)"
  t0=$SECONDS
  log "building sigs.k8s.io/kube-network-policies v$KUBE_NETWORK_POLICIES_VERSION from its Go module (cold: seconds, the control plane's packages reused)"
  mkdir -p "$(dirname "$bin")"
  (cd "$here/tools/kube-network-policies" && CGO_ENABLED=0 \
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" "sigs.k8s.io/kube-network-policies/cmd")
  mv "$bin.tmp" "$bin"
  log "kube-network-policies built in $((SECONDS - t0))s"
fi
echo "$bin"
