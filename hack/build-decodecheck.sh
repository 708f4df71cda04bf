#!/usr/bin/env bash
# Builds hack/tools/decodecheck (strict Go decoding of MPIJobs, used by the CRD fuzz test) into a
# cache outside the work tree, keyed by a hash of its sources, so a second run builds nothing.
# Prints the binary's path on the last line of stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$here/tools/decodecheck
cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
key=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
bin="$cache/decodecheck-$key/decodecheck"
if [ ! -x "$bin" ]; then
  mkdir -p "$(dirname "$bin")"
  echo "[build-decodecheck] building $bin" >&2
  t0=$SECONDS
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=${GOFLAGS:--mod=mod} go build -trimpath -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  echo "[build-decodecheck] built in $((SECONDS - t0))s" >&2
fi
echo "$bin"
