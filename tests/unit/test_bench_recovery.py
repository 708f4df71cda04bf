"""The recovery benchmark's pure parts (bench/recovery.py): the ranks' rank-start lines read off a
launcher's output (testsupport/realnode_mpi.py), the runs' order, the figures' median and range, the
tables and the last line's format, and when a kwok MPIJob's workers are all back. No timing here."""

from __future__ import annotations

import re

import pytest

from bench import recovery
from bench.bench_operator import GO
from testsupport.realnode_mpi import all_started, announcing, parse_starts

LOG = """Warning: Permanently added 'rb-worker-0.rb.ns.svc' (ED25519) to the list of known hosts.
rank-start rb-worker-0 1765000000.100
rank-start rb-worker-1 1765000000.250
not a rank-start line 1765000000.3
rank-start rb-worker-0 1765000020.500
rank-start rb-worker-1 1765000021.750
"""


def test_rank_start_lines_are_parsed_and_others_ignored():
    assert parse_starts(LOG) == [("rb-worker-0", 1765000000.1), ("rb-worker-1", 1765000000.25),
                                 ("rb-worker-0", 1765000020.5), ("rb-worker-1", 1765000021.75)]
    assert parse_starts("rank-start host notatime\n") == []


def test_all_started_is_the_last_of_the_ranks_after_the_moment():
    starts = parse_starts(LOG)
    assert all_started(starts, 2, 0) == 1765000000.25
    assert all_started(starts, 2, 1765000010) == 1765000021.75  # the run after a failure
    assert all_started(starts, 3, 1765000010) is None  # one rank missing: not yet


def test_announcing_prints_a_line_the_parser_reads():
    args = announcing(4, "100")
    assert args[:3] == ["mpirun", "-n", "4"] and args[-1].endswith("exec /opt/pi 100")
    assert 'echo "rank-start $(hostname) $(date +%s.%N)"' in args[-1]


def test_schedule_is_rounds_of_every_size_and_backend():
    assert recovery.schedule([2, 4], 2, ("job", GO)) == [("job", 2), (GO, 2), ("job", 4), (GO, 4),
                                                         ("job", 2), (GO, 2), ("job", 4), (GO, 4)]


def _runs(backend: str, workers: int, backs: list[float | None]) -> list[dict]:
    return [{"backend": backend, "workers": workers, "ranks_back_s": b, "succeeded_s": 40.0, "counted": 1,
             "launcher_failed": 1} for b in backs]


def test_summary_median_range_and_ratio_to_go():
    results = (_runs("job", 4, [11.0, 12.0, 13.0]) + _runs(GO, 4, [10.0, 12.0, 13.0])
               + _runs("statefulset", 4, [3.0, 2.0, 4.0]))
    (case,) = recovery.summarize(results, recovery.FIGURES, recovery.BACKENDS)
    back = next(f for f in case["figures"] if f["key"] == "ranks_back_s")
    assert back["job"] == {"min": 11.0, "median": 12.0, "max": 13.0, "n": 3}
    assert back["statefulset"]["median"] == 3.0
    assert back["job_over_go"]["median"] == pytest.approx(1.0) and back["job_over_go"]["max"] == pytest.approx(1.1)
    table = recovery.render([case])
    assert "| 4 (3/3/3 runs) | delete -> every rank running again (s) | 12 (11-13) | 12 (10-13) |" in table


def test_a_failed_run_is_no_figure_and_is_named():
    results = [*_runs("job", 2, [5.0]), {"backend": "job", "workers": 2, "error": "AssertionError: ranks"}]
    (case,) = recovery.summarize(results, recovery.FIGURES, recovery.BACKENDS)
    assert next(f for f in case["figures"] if f["key"] == "ranks_back_s")["job"]["n"] == 1
    assert "error: AssertionError: ranks" in recovery.render([case])


def test_last_line_is_the_largest_size_medians():
    results = (_runs("job", 2, [1.0]) + _runs("job", 4, [11.04, 12.0, 13.0]) + _runs(GO, 4, [11.5])
               + _runs("statefulset", 4, [2.5, 3.25]))
    line = recovery.last_line(recovery.summarize(results, recovery.FIGURES, recovery.BACKENDS))
    assert line == "recovery median (s): job 12.0, statefulset 2.9, go 11.5"
    assert re.fullmatch(r"recovery median \(s\): job \S+, statefulset \S+, go \S+", line)


def test_last_line_without_a_side_or_without_the_real_node():
    results = _runs("job", 2, [1.0]) + _runs("statefulset", 2, [2.0])
    assert recovery.last_line(recovery.summarize(results, recovery.FIGURES, recovery.BACKENDS)) == \
        "recovery median (s): job 1.0, statefulset 2.0, go -"
    assert recovery.last_line([]) == "recovery median (s): job -, statefulset -, go -"
    assert recovery.report({"realnode_skipped": "no node realnode"}).splitlines()[-1] == recovery.last_line([])


def _pod(host: str, uid: str, ready: bool = True, deleting: bool = False) -> dict:
    meta = {"uid": uid, **({"deletionTimestamp": "2026-12-06T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "spec": {"hostname": host},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_workers_are_back_when_every_index_is_ready_and_the_victim_gone():
    pods = {u: _pod(f"rb-worker-{i}", u) for i, u in enumerate(["a", "b", "c"])}
    assert not recovery.all_back(pods, 3, "b")  # the victim still counted Ready
    pods["b"] = _pod("rb-worker-1", "b", deleting=True)
    assert not recovery.all_back(pods, 3, "b")  # index 1 missing
    pods["d"] = _pod("rb-worker-1", "d", ready=False)
    assert not recovery.all_back(pods, 3, "b")
    pods["d"] = _pod("rb-worker-1", "d")
    assert recovery.all_back(pods, 3, "b")


def test_sizes_of():
    assert recovery.sizes_of("2, 4") == [2, 4]
    for bad in ("", "two", "0", "2,-1"):
        with pytest.raises(ValueError, match="worker counts"):
            recovery.sizes_of(bad)


def test_kwok_table_says_never_where_the_old_pods_stay():
    results = [{"backend": "job", "workers": 32, "workers_back_s": 6.0, "old_gone_s": 3.0, "first_new_s": 3.2},
               {"backend": "statefulset", "workers": 32, "workers_back_s": 0.7, "old_gone_s": None,
                "first_new_s": 0.1}]
    table = recovery.render_kwok(recovery.summarize(results, recovery.KWOK_FIGURES, recovery.KWOK_BACKENDS))
    assert "| 32 (1/1 runs) | delete -> every worker Ready again (s) | 6 | 0.7 |" in table
    assert "|  | delete -> every worker pod of before gone (s) | 3 | - |" in table
