#!/usr/bin/env bash
# make test: everything the tests need, then the tests in two phases (docs/development.md, "make test:
# two phases"). Arguments go to both pytest runs (make test passes $(MATRIX) $(PYTEST_ARGS)).
#   1. ruff; libfaketime into the cache (hack/faketime.sh); the local cluster, started unless it is up
#      (and stopped at the end if started here, unless KEEP_CLUSTER=1), before any pytest worker; while
#      it starts, the builds the selected tests need that are not cached yet (testsupport/builds.py).
#   2. The concurrent phase: every test but the `exclusive` ones, in TEST_WORKERS pytest-xdist workers
#      (default 5, measured: docs/development.md "Where the time goes"), each test module whole on one worker
#      (--dist loadscope with conftest.py's scheduler: a module, or a group of modules, per unit).
#   3. The exclusive phase: the tests that disturb what the others share (the real node's kubelet
#      stopped) or need the machine to themselves for their timing, one after another.
# PYTEST_ARGS=-n0 runs phase 2 serially too (it comes after -n and wins).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
LOG_TAG=test
# shellcheck source=hack/lib/common.sh
source "$here/lib/common.sh"
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
export CLUSTER_DIR
PY=${PY:-$root/.venv/bin/python}
TEST_WORKERS=${TEST_WORKERS:-5}
cd "$root"

log "lint"
"$(dirname "$PY")/ruff" check .
log "libfaketime: $(hack/faketime.sh)"

healthy() { [ -x "$CLUSTER_DIR/bin/kubectl" ] && kubectl_admin get --raw /readyz >/dev/null 2>&1; }
started=0 early=0
stop_cluster() {
  [ "$early" = 0 ] || "$PY" -c "from testsupport import builds; builds.stop_pid($early)" || true
  if [ "$started" = 1 ] && [ "${KEEP_CLUSTER:-}" != 1 ]; then
    log "stopping the local cluster this run started (KEEP_CLUSTER=1 keeps it)"
    hack/cluster-down.sh >/dev/null 2>&1 || true
  fi
}
trap stop_cluster EXIT
if ! healthy; then
  # The builds the selected tests need and the cache lacks (Kueue, the MPI images...: testsupport/
  # builds.py) start now, at the lowest priority, beside the cluster's own builds, so that the tests
  # that wait for them find them done sooner. The pytest sessions use this process (conftest.py); it
  # is stopped at the end if it still runs.
  early=$("$PY" -m testsupport.builds --early "$@" | tail -n 1) || true
  [[ "$early" =~ ^[0-9]+$ ]] || early=0
  export MPIJOB_EARLY_BUILDS_PID=$early
  log "the local cluster (hack/cluster-up.sh)"
  started=1
  hack/cluster-up.sh
fi

# pytest's exit status 5 is "no test selected": a -k that selects none of one phase's tests.
phase() {
  local name=$1 rc=0 t0=$SECONDS
  shift
  log "phase $name: pytest $*"
  "$PY" -m pytest tests e2e -q -p no:cacheprovider "$@" || rc=$?
  log "phase $name: exit $rc after $((SECONDS - t0))s"
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}
first=0 second=0
phase concurrent --phase=concurrent -n "$TEST_WORKERS" --dist loadscope --no-loadscope-reorder "$@" || first=$?
phase exclusive --phase=exclusive "$@" || second=$?
[ -f build/test-builds.log ] && log "background builds (build/test-builds.log): $(tail -n 6 build/test-builds.log | tr '\n' ' ')"
[ "$first" != 0 ] && exit "$first"
exit "$second"
