#!/usr/bin/env bash
# Puts MPI images into the real node's containerd: builds each (hack/images/build.sh, cached by its
# inputs: instant when built before) and imports it unless containerd has it already.
#
#   hack/realnode/images.sh openmpi5 mpich     # or: openmpi4 intel, or mpis (all four)
#
# Prints one line per image: "<flavour> <reference>..." (the references pods can name, e.g.
# localhost/mpi-pi:openmpi5). The real node must be up (hack/realnode/up.sh). A cold build takes
# minutes (hack/images/README.md): `make mpi-images` (and .ci/run) build them all beforehand.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
# shellcheck source=hack/lib/realnode.sh
source "$here/../lib/realnode.sh"
[ $# -gt 0 ] || die "usage: $0 openmpi4|openmpi5|mpich|intel|mpis..."
ctr --address "$SOCK" version >/dev/null 2>&1 || die "the real node's containerd ($SOCK) is not running: hack/realnode/up.sh"
# One import at a time into this cluster's containerd: two test workers asking for one image at once
# would both import it, and containerd refuses the second writer of the same content ("locked").
exec {IMPORT_LOCK_FD}>"$CLUSTER_DIR/realnode-images.lock"
flock "$IMPORT_LOCK_FD"
have=$(ctr_k8s images ls -q 2>/dev/null || true)
for want in "$@"; do
  while read -r name tarball refs; do
    [ -n "$name" ] || continue
    first=${refs%% *}
    if ! grep -qxF "$first" <<<"$have"; then
      log "importing $first ($(du -h "$tarball" | cut -f1))"
      ctr_k8s images import "$tarball" >/dev/null
      ctr_k8s images ls -q | grep -xF "$first" >/dev/null || die "importing $tarball did not give $first"
    fi
    echo "${name#mpi-pi-} $refs"
  done < <("$here/../images/build.sh" "$want" | grep '^mpi-pi-')
done
