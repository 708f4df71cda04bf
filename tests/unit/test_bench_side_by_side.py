"""The side-by-side benchmark's pure parts (bench/side_by_side.py, bench/go_operator.py): the order of
the runs, the ratios this / Go, the table, and the Go operator's RBAC and flags."""

from __future__ import annotations

import json

import pytest

from bench import go_operator, side_by_side
from bench.bench_operator import GO, OPERATOR_FLAGS, Case


@pytest.mark.parametrize(("spec", "want"), [
    ("2:100", [(2, 100)]),
    ("2:100,8:100,2:1000", [(2, 100), (8, 100), (2, 1000)]),
    ("", []),
])
def test_pairs_of(spec, want):
    assert side_by_side.pairs_of(spec) == want


@pytest.mark.parametrize("spec", ["2", "x:100", "2:", "2:1e3"])
def test_pairs_of_refuses(spec):
    with pytest.raises(ValueError, match="workers:MPIJobs"):
        side_by_side.pairs_of(spec)


def test_schedule_interleaves_this_and_go():
    got = side_by_side.schedule([(2, 100)], 3)
    assert [c.backend for c in got] == ["job", GO, "statefulset"] * 3
    assert {(c.workers, c.mpijobs) for c in got} == {(2, 100)}


@pytest.mark.parametrize(("go", "sts", "want"), [
    (False, True, ["job", "statefulset"] * 2),
    (True, False, ["job", GO] * 2),
    (False, False, ["job"] * 2),
])
def test_schedule_without_go_or_statefulset(go, sts, want):
    assert [c.backend for c in side_by_side.schedule([(8, 10)], 2, go, sts)] == want


def test_schedule_big_cases_run_the_statefulset_backend_fewer_times():
    got = side_by_side.schedule([(2, 100), (2, side_by_side.BIG)], 3, big_statefulset_runs=1)
    big = [c.backend for c in got if c.mpijobs == side_by_side.BIG]
    assert big == ["job", GO, "statefulset", "job", GO, "job", GO]
    assert sum(c.backend == "statefulset" for c in got if c.mpijobs == 100) == 3


@pytest.mark.parametrize(("values", "want"), [
    ([3.0, 1.0, 2.0], {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}),
    ([1.0, None, 4.0], {"min": 1.0, "median": 2.5, "max": 4.0, "n": 2}),
    ([None], None),
    ([], None),
])
def test_spread(values, want):
    assert side_by_side.spread(values) == want


def test_ratios_pair_run_i_with_run_i():
    # pairs: 10/5 = 2, 6/3 = 2, 4/8 = 0.5: a ratio of medians (6/5) would hide the spread
    got = side_by_side.ratios([10.0, 6.0, 4.0], [5.0, 3.0, 8.0])
    assert got == {"min": 0.5, "median": 2.0, "max": 2.0, "n": 3}


def test_ratios_skip_missing_and_zero():
    assert side_by_side.ratios([1.0, None, 3.0], [2.0, 1.0, 0.0]) == {"min": 0.5, "median": 0.5, "max": 0.5, "n": 1}
    assert side_by_side.ratios([1.0], []) is None


def run(backend, workers, n, rate, p95, writes):
    return {"backend": backend, "workers": workers, "mpijobs": n, "running_per_s": rate,
            "running_latency_watch_s": {"p50": p95 / 2, "p95": p95}, "operator_cpu_ms_per_mpijob": 20.0,
            "operator_peak_rss_mib": 70.0, "apiserver": {"writes_per_mpijob": writes}}


def test_summarize_and_render():
    results = [run("job", 2, 100, 12.0, 6.0, 10.0), run(GO, 2, 100, 10.0, 5.0, 12.0),
               run("statefulset", 2, 100, 11.0, 6.5, 10.0),
               run("job", 2, 100, 14.0, 7.0, 10.0), run(GO, 2, 100, 14.0, 7.0, 12.0)]
    (case,) = side_by_side.summarize(results)
    assert case["runs"] == {"job": 2, GO: 2, "statefulset": 1}
    figures = {f["path"]: f for f in case["figures"]}
    assert figures["running_per_s"]["job_over_go"] == {"min": 1.0, "median": 1.1, "max": 1.2, "n": 2}
    assert figures["running_per_s"]["statefulset_over_go"]["n"] == 1
    assert figures["apiserver.writes_per_mpijob"][GO]["median"] == 12.0
    table = side_by_side.render([case], "note")
    assert "| 100 x 2 (2/2/1 runs) | MPIJobs Running/s | 13 (12-14) | 12 (10-14) | 1.10x (1.00-1.20) | 11 | 1.10x |" \
        in table
    assert table.splitlines()[-1] == "note"
    assert len([line for line in table.splitlines() if line.startswith("|  |")]) == len(side_by_side.FIGURES) - 1


@pytest.mark.parametrize(("s", "ratio", "want"), [
    (None, False, "-"),
    ({"min": 1.0, "median": 1.0, "max": 1.0, "n": 1}, True, "1.00x"),
    ({"min": 150.0, "median": 152.4, "max": 212.0, "n": 3}, False, "152 (150-212)"),
    ({"min": 0.812, "median": 0.9, "max": 1.05, "n": 3}, True, "0.90x (0.81-1.05)"),
])
def test_fmt_spread(s, ratio, want):
    assert side_by_side.fmt_spread(s, ratio) == want


UPSTREAM_ROLE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: mpi-operator
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kubeflow-mpijobs-view
rules:
- apiGroups: [kubeflow.org]
  resources: [mpijobs]
  verbs: [get]
"""


def test_cluster_role_is_upstreams_operator_role_renamed():
    role = go_operator.cluster_role(UPSTREAM_ROLE)
    assert role["metadata"]["name"] == go_operator.ROLE_NAME != "mpi-operator"  # this operator's own is mpi-operator
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}]
    b = go_operator.binding()
    assert b["roleRef"]["name"] == b["metadata"]["name"] == go_operator.ROLE_NAME
    assert b["subjects"] == [{"kind": "ServiceAccount", "namespace": "mpi-operator", "name": "mpi-operator"}]


def test_cluster_role_missing():
    with pytest.raises(ValueError, match="no ClusterRole mpi-operator"):
        go_operator.cluster_role(UPSTREAM_ROLE.split("---")[1])


def test_go_flags_share_threadiness_qps_burst_and_raise_the_queue_limit():
    got = go_operator.flags("/k", "ns", "ns-lock", OPERATOR_FLAGS)
    assert got[:3] == ["--kubeConfig=/k", "--namespace=ns", "--lock-namespace=ns-lock"]
    assert set(got[3:6]) == {"--threadiness=8", "--kube-api-qps=500", "--kube-api-burst=1000"}
    assert not any(f.startswith("--log-") for f in got)  # this operator's own flags are not the Go one's
    limits = dict(f.split("=") for f in got if f.startswith("--controller-queue"))
    assert int(limits["--controller-queue-rate-limit"]) >= 10_000  # default 10/s: raised past the cluster
    assert int(limits["--controller-queue-burst"]) >= 10_000


def test_go_case_label():
    assert Case(GO, 2, 100).is_go and not Case("job", 2, 100).is_go


def test_merged_takes_each_files_runs_of_the_backends_named(tmp_path):
    a, b = tmp_path / "after.json", tmp_path / "before.json"
    a.write_text(json.dumps({"results": [run("job", 2, 100, 1, 1, 10), run(GO, 2, 100, 2, 1, 12)]}))
    b.write_text(json.dumps({"results": [run("job", 2, 100, 3, 1, 10), run(GO, 2, 100, 4, 1, 12)]}))
    got = side_by_side.merged(f"{a}:job+statefulset,{b}:go")
    assert [(r["backend"], r["running_per_s"]) for r in got] == [("job", 1), (GO, 4)]
    assert len(side_by_side.merged(str(a))) == 2


def test_merged_reads_the_side_by_side_of_a_make_bench_file(tmp_path):
    f = tmp_path / "latest.json"
    f.write_text(json.dumps({"plan": {}, "side_by_side": {"results": [run("job", 2, 100, 1, 1, 10),
                                                                      run(GO, 2, 100, 2, 1, 12)]}}))
    assert [r["backend"] for r in side_by_side.merged(f"{f}:go")] == [GO]
