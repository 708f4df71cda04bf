#!/usr/bin/env bash
# Builds the Kubeflow MPI Operator (Go), the operator `make bench` runs beside this one and
# e2e/test_takeover.py upgrades from, from its pinned Go module into the same cache as the control
# plane, through the tools module hack/tools/mpi-operator-go. That module requires the Kubernetes
# libraries and the rest at the versions the control plane compiles (client-go v0.37.2 where its own
# go.mod names v0.35.6; docs/development.md, "The Go tools modules share their dependencies'
# versions"), so a cold machine compiles its own packages only: 19 CPU s after the control plane's
# build, 252 before. (The module proxy refuses `go install ...@v0.8.2`: its go.mod has replace
# directives.) Nothing of its source is copied: its CRD is read from the module at run time.
# The cache is keyed by version and the tools module's hash (tools_key), so a changed go.mod rebuilds.
# Prints two lines on stdout: the mpi-operator binary, then the module's directory in the module cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=build-mpi-operator-go
source "$here/lib/common.sh"
build_lock mpi-operator-go
tools=$here/tools/mpi-operator-go

cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
bin="$cache/mpi-operator-go-v${MPI_OPERATOR_GO_VERSION}-$(tools_key "$tools")/bin"
mkdir -p "$bin"
mod=$(cd "$tools" && go mod download -json "github.com/kubeflow/mpi-operator@v${MPI_OPERATOR_GO_VERSION}" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$mod/cmd/mpi-operator" ] || die "no cmd/mpi-operator in the module at '$mod'"

if [ ! -x "$bin/mpi-operator" ]; then
  log "building mpi-operator v$MPI_OPERATOR_GO_VERSION (cold: a minute once the control plane is built)"
  after_k8s_build
  t0=$SECONDS
  # into a scratch name renamed at the end: an interrupted build never leaves a binary that looks complete
  (cd "$tools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/mpi-operator.tmp" \
    github.com/kubeflow/mpi-operator/cmd/mpi-operator)
  mv "$bin/mpi-operator.tmp" "$bin/mpi-operator"
  log "built mpi-operator in $((SECONDS - t0))s"
fi
echo "$bin/mpi-operator"
echo "$mod"
