#!/usr/bin/env bash
# Prints the paths of the PodGroup CRDs of scheduler-plugins and of Volcano, in that order, from
# their pinned Go modules in the module cache (downloaded if missing). No copy is kept in the tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.sh"
dir_of() { (cd / && GOFLAGS= go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'); }
sp=$(dir_of "sigs.k8s.io/scheduler-plugins@v$SCHEDULER_PLUGINS_VERSION")
vc=$(dir_of "volcano.sh/volcano@v$VOLCANO_VERSION")
for f in "$sp/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" \
         "$vc/config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml"; do
  [ -f "$f" ] || { echo "missing $f" >&2; exit 1; }
  echo "$f"
done
