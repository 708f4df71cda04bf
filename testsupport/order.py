"""The order in which make test's pytest-xdist workers take the scheduling units (a test module, or
a GROUPS entry: the root conftest.py sorts the tests by `key`, its scheduler takes the units in that
order). docs/development.md, "make test: two phases" and "Where the time goes"."""

from __future__ import annotations

from testsupport import builds

# Test modules that must not run beside each other, though each may run beside the rest: one
# scheduling unit (one worker, one after the other) instead of one per module. Kueue is cluster-wide:
# one at a time. The real node is one machine of 2 cores and its ranks compute: at most two of its
# MPI units at once, split so that each takes about as long (a third beside them made each test
# slower, not the phase shorter: docs/development.md, "Where the time goes"). These units are also the
# longest: they start first.
GROUPS = {"realnode": ("e2e/test_realnode.py", "e2e/test_realnode_mpijob.py", "e2e/test_realnode_retries.py"),
          "realnode-mpis": ("e2e/test_realnode_mpis.py", "e2e/test_verdict.py", "e2e/test_isolation.py",
                            "e2e/test_takeover.py"),
          "kueue": ("e2e/test_kueue.py", "e2e/test_kueue_topology.py", "e2e/test_kueue_multikueue.py")}
_GROUP_OF = {path: name for name, paths in GROUPS.items() for path in paths}
# Among units of the same build rank, the tests of a kind before the others: the e2e modules start
# first, and the short unit modules fill the workers' last minutes.
_KIND_ORDER = ("e2e/", "tests/integration/", "tests/unit/")
# The long units' busy seconds in the concurrent phase (what one worker spends on them), to start the
# longest first among units of the same build rank: the phase then does not end with one long unit
# started late. From a warm run of `make test PYTEST_ARGS=--durations=60` with 5 workers (the lead's
# run 4 of 2026-12-06): its "where the time went" tables for the GROUPS (per kind) and for the units
# they list; for the modules they do not list, the sum of the module's entries in the 60 slowest
# durations (each over 24 s: a lower bound). A unit not here (under about 60 s, or not yet measured)
# sorts by kind, then in collection order. Only the order depends on these figures, never what runs.
# test_lifecycle and integration/test_manifests: from run I (docs/development.md), which ended with
# them, started last for want of a figure.
BUSY_S = {"realnode-mpis": 1185, "realnode": 951, "kueue": 872,
          "e2e/test_workload_gang.py": 283, "e2e/test_resilience.py": 250, "e2e/test_lifecycle.py": 229,
          "e2e/test_gang_scheduling.py": 221,
          "e2e/test_failure_paths.py": 194, "e2e/test_retries_kwok.py": 128, "e2e/test_deployed.py": 114,
          "tests/integration/test_manifests.py": 105,
          "tests/integration/test_crd_fuzz.py": 94, "e2e/test_fuzz_api.py": 83, "e2e/test_review_faults.py": 70,
          "tests/unit/test_crd_fuzz.py": 60}


def group(nodeid: str) -> str:
    """The unit make test's workers take: a test module, or the GROUPS entry it belongs to."""
    path = nodeid.split("::")[0]
    return _GROUP_OF.get(path, path)


def kind(nodeid: str) -> int:
    path = nodeid.split("::")[0]
    return next((i for i, prefix in enumerate(_KIND_ORDER) if path.startswith(prefix)), len(_KIND_ORDER))


def key(nodeid: str, needs: tuple[str, ...], cached: frozenset[str] | set[str]) -> tuple[bool, int, int, int]:
    """A test's place under pytest-xdist (a stable sort): the GROUPS first (the longest: the phase
    lasts at least as long as each, so each starts at once; their builds come first in BUILDS), then
    by build rank (after the last build it needs that is not `cached`: builds.rank), then the longest
    units (BUSY_S), then by kind."""
    unit = group(nodeid)
    return unit not in GROUPS, builds.rank(needs, cached), -BUSY_S.get(unit, 0), kind(nodeid)
