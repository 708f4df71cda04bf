"""testsupport.group_times: make test's per-unit table (docs/development.md, "Where the time goes")."""

from __future__ import annotations

from testsupport import group_times


def _units() -> dict[str, group_times.Unit]:
    units: dict[str, group_times.Unit] = {}
    # (unit, when, duration, start, stop, worker): two tests of a group, one of a module
    for row in [("realnode", "setup", 2.0, 100.0, 102.0, "gw0"), ("realnode", "call", 30.0, 102.0, 132.0, "gw0"),
                ("realnode", "teardown", 1.0, 132.0, 133.0, "gw0"), ("realnode", "call", 10.0, 133.0, 143.0, "gw0"),
                ("tests/unit/test_a.py", "call", 0.5, 101.0, 101.5, "gw1")]:
        group_times.add(units, *row)
    return units


def test_a_unit_counts_its_calls_sums_every_phase_and_spans_first_start_to_last_stop():
    u = _units()["realnode"]
    assert (u.tests, u.busy, u.start, u.stop, u.worker) == (2, 43.0, 100.0, 143.0, "gw0")


def test_the_table_puts_the_unit_that_ended_last_first_and_counts_from_the_first_start():
    lines = group_times.table(_units())
    assert lines[1].split() == ["realnode", "gw0", "2", "43", "0", "43"]
    assert lines[2].split() == ["tests/unit/test_a.py", "gw1", "1", "0", "1", "2"]


def test_units_past_the_top_are_summed_in_one_line():
    lines = group_times.table(_units(), top=1)
    assert lines[-1].split() == ["(1", "more", "units)", "1", "0"]


def test_by_kind_sums_the_units_of_each_kind():
    lines = group_times.by_kind(_units(), lambda name: "unit" if name.startswith("tests/unit") else "group")
    assert lines[1].split() == ["group", "1", "2", "43", "0", "43"]
    assert lines[2].split() == ["unit", "1", "1", "0", "1", "2"]


def test_nothing_run_prints_nothing():
    assert group_times.table({}) == [] and group_times.by_kind({}, str) == []
