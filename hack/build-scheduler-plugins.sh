#!/usr/bin/env bash
# Builds the scheduler-plugins scheduler (kube-scheduler with Coscheduling) and its controller
# (which keeps PodGroup status.phase) from the pinned Go module (hack/tools/scheduler-plugins),
# into a cache outside the work tree keyed by version and the tools module's hash (tools_key,
# lib/common.sh), as build-k8s.sh does for the control plane.
# Prints the bin directory on the last line of stdout. The PodGroup CRD: hack/podgroup-crds.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
LOG_TAG=build-scheduler-plugins
source "$here/lib/common.sh"
build_lock scheduler-plugins
tools="$here/tools/scheduler-plugins"

cache=${MPIJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mpijob-operator}
bin="$cache/scheduler-plugins-v${SCHEDULER_PLUGINS_VERSION}-$(tools_key "$tools")/bin"
mkdir -p "$bin"
for name in scheduler controller; do
  [ -x "$bin/$name" ] && continue
  log "building $name of scheduler-plugins v$SCHEDULER_PLUGINS_VERSION (cold builds take minutes on 2 cores)"
  t0=$SECONDS
  (cd "$tools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/$name.tmp" \
    "sigs.k8s.io/scheduler-plugins/cmd/$name")
  mv "$bin/$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - t0))s"
done
echo "$bin"
