"""testsupport.group_times: make test's per-unit table (docs/development.md, "Where the time goes")."""

from __future__ import annotations

import os

import pytest

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


def test_process_cpu_reads_each_pid_file_and_counts_nothing_for_a_dead_or_garbled_one(tmp_path):
    (tmp_path / "me.pid").write_text(str(os.getpid()))
    (tmp_path / "gone.pid").write_text("999999999")  # beyond pid_max: no such process
    (tmp_path / "garbled.pid").write_text("not a pid")
    sum(i * i for i in range(300_000))  # some CPU of this process's own
    spent = group_times.process_cpu(tmp_path)
    assert list(spent) == ["me"]
    assert spent["me"] > 0


@pytest.mark.parametrize("before,after,expected", [
    ({"a": 1.0, "b": 2.0}, {"a": 5.0, "b": 3.0}, [("a", 4.0), ("b", 1.0)]),
    ({"a": 1.0}, {"a": 1.5, "new": 2.0}, [("new", 2.0), ("a", 0.5)]),  # started between: from zero
    ({"a": 1.0, "ended": 9.0}, {"a": 2.0}, [("a", 1.0)]),  # ended between: left out
    ({}, {}, []),
])
def test_cpu_spent_is_each_process_difference_most_first(before, after, expected):
    assert group_times.cpu_spent(before, after) == expected
