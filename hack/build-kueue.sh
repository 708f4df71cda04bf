#!/usr/bin/env bash
# Builds Kueue (the queueing controller that drives MPIJobs through runPolicy.suspend) from its
# pinned Go module into the same cache as the control plane, keyed by version, so a second run
# builds nothing. Its CRDs are not copied: they are read from the module in the Go module cache.
# Prints two lines on stdout: the kueue binary, then the directory of its CRDs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=build-kueue
source "$here/lib/common.sh"
build_lock kueue

cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
bin="$cache/kueue-v${KUEUE_VERSION}/bin"
mkdir -p "$bin"

if [ ! -x "$bin/kueue" ]; then
  log "building kueue v$KUEUE_VERSION (cold: 8-13 minutes on 2 cores)"
  t0=$SECONDS
  # go install into a scratch GOBIN, then rename: an interrupted build never leaves a binary
  # that looks complete.
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@v$KUEUE_VERSION"
  mv "$tmp/kueue" "$bin/kueue"
  log "built kueue in $((SECONDS - t0))s"
fi
mod=$(cd "$here" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crds="$mod/config/components/crd/bases"
[ -d "$crds" ] || { log "ERROR: no CRDs at $crds"; exit 1; }
echo "$bin/kueue"
echo "$crds"
