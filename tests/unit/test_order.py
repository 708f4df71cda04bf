"""testsupport/order.py: the order in which make test's pytest-xdist workers take the units."""

from __future__ import annotations

import pytest

from testsupport import builds, order

# Collection order; the builds each module waits for.
COLLECTED = {"tests/unit/test_small.py": (), "e2e/test_short.py": (), "tests/unit/test_crd_fuzz.py": (),
             "e2e/test_gang_scheduling.py": ("scheduler-plugins",), "e2e/test_workload_gang.py": (),
             "e2e/test_kueue_topology.py": ("kueue",), "e2e/test_realnode.py": ()}


def _units(cached: set[str]) -> list[str]:
    nodeids = [f"{path}::test_{i}" for path in COLLECTED for i in range(2)]
    nodeids.sort(key=lambda nodeid: order.key(nodeid, COLLECTED[nodeid.split("::")[0]], cached))
    return list(dict.fromkeys(order.group(nodeid) for nodeid in nodeids))


@pytest.mark.parametrize("cached,want", [
    # warm: the GROUPS, then the longest first (a unit module of 60 s before a short e2e one), then by kind
    (set(builds.NAMES), ["realnode", "kueue", "e2e/test_workload_gang.py", "e2e/test_gang_scheduling.py",
                         "tests/unit/test_crd_fuzz.py", "e2e/test_short.py", "tests/unit/test_small.py"]),
    # cold: the GROUPS still first, each in its build's rank; a test that waits for a build after the rest
    (set(), ["realnode", "kueue", "e2e/test_workload_gang.py", "tests/unit/test_crd_fuzz.py", "e2e/test_short.py",
             "tests/unit/test_small.py", "e2e/test_gang_scheduling.py"]),
    # the gang scheduler's build cached, Kueue's not: test_gang_scheduling takes its place by length
    ({"scheduler-plugins"}, ["realnode", "kueue", "e2e/test_workload_gang.py", "e2e/test_gang_scheduling.py",
                             "tests/unit/test_crd_fuzz.py", "e2e/test_short.py", "tests/unit/test_small.py"]),
], ids=["warm", "cold", "scheduler-plugins cached"])
def test_groups_first_then_the_builds_not_cached_then_the_longest_units(cached, want):
    assert _units(cached) == want


def test_the_long_units_are_real_units():
    """A name in BUSY_S that is no GROUPS entry and no test module would never match: a typo, or a
    module renamed since."""
    from testsupport.paths import ROOT

    for unit in order.BUSY_S:
        assert unit in order.GROUPS or (ROOT / unit).is_file(), unit
