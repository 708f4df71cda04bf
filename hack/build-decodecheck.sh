#!/usr/bin/env bash
# Builds hack/tools/decodecheck (strict Go decoding of MPIJobs, used by the CRD fuzz test) into a
# cache outside the work tree, keyed by a hash of its sources, so a second run builds nothing.
# Prints the binary's path on the last line of stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
LOG_TAG=build-decodecheck
source "$here/lib/common.sh"
build_lock decodecheck
src=$here/tools/decodecheck
cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
bin="$cache/decodecheck-$(tools_key "$src")/decodecheck"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  log "building $bin"
  t0=$SECONDS
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  log "built in $((SECONDS - t0))s"
fi
echo "$bin"
