"""reconcilers.news: which watch events repeat what an MPIJob's last pass knew (table-driven)."""

from __future__ import annotations

import copy

import pytest

from reconcilers import news

SENT = {"conditions": [{"type": "Created", "status": "True"}], "startTime": "2026-12-05T07:00:00Z"}


def mpijob(rv: str = "10", st: dict | None = None, **spec) -> dict:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u1", "generation": 1, "resourceVersion": rv},
            "spec": {"slotsPerWorker": 1, **spec}, "status": st if st is not None else {}}


def _with(obj: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(obj)
    d = out
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = value
    return out


@pytest.mark.parametrize("new,sent,echo", [
    (mpijob("11", SENT), SENT, True),                     # our status, nothing else
    (mpijob("11", SENT), None, False),                    # nothing sent (a restart forgot it)
    (mpijob("11", {**SENT, "startTime": "x"}), SENT, False),   # not what we sent
    (mpijob("11", {}), SENT, False),
    (mpijob("11", SENT, slotsPerWorker=2), SENT, False),  # the spec changed with it
    (_with(mpijob("11", SENT), ("metadata", "labels"), {"a": "b"}), SENT, False),
    (_with(mpijob("11", SENT), ("metadata", "deletionTimestamp"), "2026-12-05T07:01:00Z"), SENT, False),
    (_with(mpijob("11", SENT), ("metadata", "uid"), "u2"), SENT, False),  # a namesake
    (_with(mpijob("11", SENT), ("metadata", "generation"), 2), SENT, False),
])
def test_status_echo(new, sent, echo):
    assert news.status_echo(mpijob("10"), new, sent) is echo


def running(flag: str = "True") -> dict:
    return mpijob(st={"conditions": [{"type": "Running", "status": flag}]})


def job(rv: str, **st) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi-worker", "namespace": "ns", "uid": "j1", "resourceVersion": rv},
            "spec": {"parallelism": 2, "completions": 2, "suspend": False}, "status": st}


def sts(rv: str, **st) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "pi-worker", "namespace": "ns", "uid": "s1", "resourceVersion": rv},
            "spec": {"replicas": 2}, "status": st}


@pytest.mark.parametrize("old,new,owner,quiet", [
    # a Running MPIJob's Job or StatefulSet counting up: no news
    (job("1", active=2), job("2", active=2, ready=2), running(), True),
    (job("1"), job("2", active=2, startTime="t", terminating=0), running(), True),
    (job("1", active=2, ready=2), job("2", active=1, ready=2, terminating=1), running(), True),
    (sts("1", replicas=2), sts("2", replicas=2, readyReplicas=2, availableReplicas=2, currentReplicas=2,
                               updatedReplicas=2, observedGeneration=1, currentRevision="r1",
                               updateRevision="r1"), running(), True),
    # a Ready count falling: a worker lost
    (job("1", active=2, ready=2), job("2", active=2, ready=1), running(), False),
    (sts("1", readyReplicas=2), sts("2", readyReplicas=1), running(), False),
    (job("1", ready=2), job("2", ready="2"), running(), False),  # not a count: read as 0, fell
    # what the plan reads: ends, failures, conditions, indexes
    (job("1", active=2), job("2", active=1, succeeded=1), running(), False),
    (job("1", active=1), job("2", active=0, failed=1), running(), False),
    (job("1", active=2), job("2", active=2, completedIndexes="0"), running(), False),
    (job("1"), job("2", conditions=[{"type": "Complete", "status": "True"}]), running(), False),
    (job("1"), job("2", uncountedTerminatedPods={"succeeded": ["x"]}), running(), False),
    (sts("1", readyReplicas=2), sts("2", readyReplicas=2, collisionCount=1), running(), False),
    # the spec or metadata moved with it (our patch, a user's edit, a delete)
    (job("1", active=2), _with(job("2", active=2, ready=2), ("spec", "suspend"), True), running(), False),
    (job("1", active=2), _with(job("2", active=2, ready=2), ("metadata", "labels"), {"a": "b"}), running(),
     False),
    (job("1"), _with(job("2", active=1), ("metadata", "deletionTimestamp"), "t"), running(), False),
    # the MPIJob not Running (a bring-up, a restart, suspended, ended) or unknown
    (job("1", active=2), job("2", active=2, ready=2), running("False"), False),
    (job("1", active=2), job("2", active=2, ready=2), mpijob(), False),
    (job("1", active=2), job("2", active=2, ready=2), None, False),
    # neither a Job nor a StatefulSet, or its kind changed
    ({**job("1"), "kind": "ConfigMap"}, {**job("2", active=1), "kind": "ConfigMap"}, running(), False),
    (sts("1"), {**sts("2", replicas=1), "kind": "Job"}, running(), False),
])
def test_counts_only(old, new, owner, quiet):
    assert news.counts_only(old, new, owner) is quiet
