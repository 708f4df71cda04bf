#!/usr/bin/env bash
# The monitoring stack the tests scrape the deployed operator with, cached like the control plane:
#   prometheus-operator  built from its Go module (PROMETHEUS_OPERATOR_VERSION, hack/tools/prometheus-operator);
#   prometheus           built from its Go module (PROMETHEUS_VERSION, hack/tools/prometheus) with the
#                        Kubernetes service discovery only (Debian's package has none).
# Prints the cache's bin directory on its last line. A second run is a cache hit; the cache is keyed by
# the versions and the tools modules' hash (tools_key, lib/common.sh), so a changed go.mod rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=prometheus
source "$here/lib/common.sh"
build_lock prometheus
cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
dir=$cache/prometheus-operator-v$PROMETHEUS_OPERATOR_VERSION-prometheus-v$PROMETHEUS_VERSION-$(tools_key \
  "$here/tools/prometheus-operator" "$here/tools/prometheus")
bin=$dir/bin
mkdir -p "$bin"
export PATH="/usr/local/go/bin:$PATH"
[ -x "$bin/prometheus-operator" ] && [ -x "$bin/prometheus" ] || after_k8s_build
if [ ! -x "$bin/prometheus-operator" ]; then
  t0=$SECONDS
  log "building prometheus-operator v$PROMETHEUS_OPERATOR_VERSION from its Go module (cold: minutes)"
  (cd "$here/tools/prometheus-operator" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "$bin/prometheus-operator.tmp" github.com/prometheus-operator/prometheus-operator/cmd/operator)
  mv "$bin/prometheus-operator.tmp" "$bin/prometheus-operator"
  log "prometheus-operator built in $((SECONDS - t0))s"
fi
if [ ! -x "$bin/prometheus" ]; then
  t0=$SECONDS
  log "building prometheus $PROMETHEUS_VERSION from its Go module, Kubernetes SD only (cold: minutes)"
  (cd "$here/tools/prometheus" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -tags remove_all_sd,enable_kubernetes_sd -o "$bin/prometheus.tmp" github.com/prometheus/prometheus/cmd/prometheus)
  mv "$bin/prometheus.tmp" "$bin/prometheus"
  log "prometheus built in $((SECONDS - t0))s"
fi
# The CRDs the Prometheus Operator serves, from its module (applied by the tests, never copied here).
crds=$(cd "$here/tools/prometheus-operator" && go mod download -json "github.com/prometheus-operator/prometheus-operator@v$PROMETHEUS_OPERATOR_VERSION" |
  sed -n 's/.*"Dir": "\(.*\)",/\1/p')/example/prometheus-operator-crd
[ -d "$crds" ] || { log "ERROR: no CRDs at $crds"; exit 1; }
echo "crds $crds"
echo "$bin"
