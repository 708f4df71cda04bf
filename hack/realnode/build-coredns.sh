#!/usr/bin/env bash
# Builds CoreDNS from hack/tools/coredns (the pinned github.com/coredns/coredns module, with the
# plugins the real node needs) into ${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator/coredns-<hash>/,
# keyed by the hash of the tools module and the Go version; a second run builds nothing.
# A coredns already on PATH or in $COREDNS is used as is. Prints the binary on the last stdout line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools=$(cd "$here/../tools/coredns" && pwd)
if [ -n "${COREDNS:-}" ] && [ -x "$COREDNS" ]; then echo "$COREDNS"; exit 0; fi
command -v go >/dev/null || { echo "[realnode] ERROR: go is needed to build CoreDNS" >&2; exit 1; }
h=$( { cat "$tools/go.mod" "$tools/go.sum" "$tools/main.go"; go version; } | sha256sum | cut -c1-16)
cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
bin=$cache/coredns-$h/coredns
if [ ! -x "$bin" ]; then
  v=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$tools/go.mod")
  echo "[realnode] building CoreDNS $v (cold: a few minutes on 2 cores)" >&2
  t0=$SECONDS
  mkdir -p "$(dirname "$bin")"
  (cd "$tools" && CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=mod}" go build -trimpath \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$v" -o "$bin.tmp" .)
  mv "$bin.tmp" "$bin"
  echo "[realnode] built CoreDNS in $((SECONDS - t0))s" >&2
fi
echo "$bin"
