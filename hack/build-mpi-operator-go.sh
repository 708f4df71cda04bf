#!/usr/bin/env bash
# Builds the Kubeflow MPI Operator (Go), the operator `make bench` runs beside this one, from its
# pinned Go module into the same cache as the control plane, keyed by version, so a second run builds
# nothing. The module proxy refuses `go install github.com/kubeflow/mpi-operator/cmd/mpi-operator@v0.8.2`
# (its go.mod has replace directives), so the module is downloaded, copied out of the read-only module
# cache and built in place. Nothing of its source is kept: its CRD is read from the module at run time.
# Prints two lines on stdout: the mpi-operator binary, then the module's directory in the module cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=build-mpi-operator-go
source "$here/lib/common.sh"
build_lock mpi-operator-go

cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
bin="$cache/mpi-operator-go-v${MPI_OPERATOR_GO_VERSION}/bin"
mkdir -p "$bin"
mod=$(cd "$here" && GOFLAGS=-mod=mod go mod download -json \
  "github.com/kubeflow/mpi-operator@v${MPI_OPERATOR_GO_VERSION}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$mod/cmd/mpi-operator" ] || die "no cmd/mpi-operator in the module at '$mod'"

if [ ! -x "$bin/mpi-operator" ]; then
  log "building mpi-operator v$MPI_OPERATOR_GO_VERSION (cold: several minutes on 2 cores)"
  t0=$SECONDS
  # Build in a writable copy (the module cache is read-only), into a scratch file renamed at the
  # end: an interrupted build never leaves a binary that looks complete.
  tmp=$(mktemp -d "$bin/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp -r "$mod" "$tmp/src"
  chmod -R u+w "$tmp/src"
  (cd "$tmp/src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$tmp/mpi-operator" ./cmd/mpi-operator)
  mv "$tmp/mpi-operator" "$bin/mpi-operator"
  log "built mpi-operator in $((SECONDS - t0))s"
fi
echo "$bin/mpi-operator"
echo "$mod"
