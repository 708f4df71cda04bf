#!/usr/bin/env bash
# Stops the second local control plane (hack/worker-cluster-up.sh) by its PID files and removes
# .cluster-worker/ (KEEP_STATE=1 keeps it). The first cluster is untouched.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/worker-cluster-env.sh"
exec "$here/cluster-down.sh"
