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


def bringing_up(workers=2, **st) -> dict:
    """Active, not Running: its pods are coming up (reconcilers/pace.py)."""
    return mpijob(st={"conditions": [{"type": "Created", "status": "True"}], **st},
                  mpiReplicaSpecs={"Launcher": {"replicas": 1}, "Worker": {"replicas": workers}})


def launcher(rv: str, **st) -> dict:
    return _with(job(rv, **st), ("metadata", "name"), "pi-launcher")


@pytest.mark.parametrize("old,new,owner,quiet", [
    # a bring-up: the worker object's Ready count below the workers wanted cannot make it Running
    (job("1"), job("2", active=2, ready=0), bringing_up(), True),
    # the Job controller's first write: its empty uncountedTerminatedPods is no pod to count
    (job("1"), job("2", active=2, ready=0, startTime="t", terminating=0, uncountedTerminatedPods={}),
     bringing_up(), True),
    (launcher("1"), launcher("2", active=1, ready=0, startTime="t", terminating=0,
                              uncountedTerminatedPods={"succeeded": [], "failed": []}), bringing_up(), True),
    (job("1", active=2, uncountedTerminatedPods={}), job("2", active=2, uncountedTerminatedPods={"failed": ["u"]}),
     bringing_up(), False),
    (job("1", active=2), job("2", active=2, ready=1), bringing_up(), True),
    (sts("1", replicas=2), sts("2", replicas=2, readyReplicas=1, currentReplicas=2), bringing_up(), True),
    # ... reaching them can (the pods may not be in the cache yet): news
    (job("1", active=2, ready=1), job("2", active=2, ready=2), bringing_up(), False),
    (sts("1", readyReplicas=1), sts("2", readyReplicas=2), bringing_up(), False),
    (job("1", active=2, ready=1), job("2", active=2, ready=2), bringing_up(workers=3), True),
    # ... falling, or more than counts moving: news as ever
    (job("1", active=2, ready=1), job("2", active=2, ready=0), bringing_up(), False),
    (job("1", active=2), job("2", active=1, failed=1), bringing_up(), False),
    # ... a count that is not one, or no Worker spec: the workers wanted are unknown
    (job("1"), job("2", active=2), bringing_up(workers="2"), False),
    (job("1"), job("2", active=2), bringing_up(workers=True), False),
    (job("1"), job("2", active=2), mpijob(st={}, mpiReplicaSpecs={"Launcher": {"replicas": 1}}), False),
    (job("1"), job("2", active=2), mpijob(st={}, mpiReplicaSpecs="x"), False),
    # the launcher: its pod created (active) is no news, its Ready count moving is
    (launcher("1"), launcher("2", active=1, startTime="t"), bringing_up(), True),
    (launcher("1", active=1), launcher("2", active=1, ready=1), bringing_up(), False),
    # a child of neither name (another MPIJob's, or renamed)
    (_with(job("1"), ("metadata", "name"), "x-worker"), _with(job("2", active=2), ("metadata", "name"), "x-worker"),
     bringing_up(), False),
    # not a bring-up: suspended, or ended
    (job("1"), job("2", active=2), _with(bringing_up(), ("spec", "runPolicy"), {"suspend": True}), False),
    (job("1", active=2), job("2", active=0),
     mpijob(st={"conditions": [{"type": "Succeeded", "status": "True"}]},
            mpiReplicaSpecs={"Worker": {"replicas": 2}}), False),
])
def test_counts_only_in_a_bring_up(old, new, owner, quiet):
    assert news.counts_only(old, new, owner) is quiet


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
    (job("1"), job("2", active=2, uncountedTerminatedPods={}), running(), True),
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


def cm(rv: str, gen: int = 1, **data) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "pi-config", "namespace": "ns", "uid": "c1", "resourceVersion": rv,
                         "generation": gen, "labels": {"a": "b"}},
            "data": {"hostfile": "h", **data}}


HOSTS = {"data": {"discover_hosts.sh": "echo w0"}}


@pytest.mark.parametrize("old,new,patch,echo", [
    (cm("1"), cm("2", **{"discover_hosts.sh": "echo w0"}), HOSTS, True),
    (cm("1"), cm("2", gen=2, **{"discover_hosts.sh": "echo w0"}), HOSTS, True),  # the server's own fields
    (cm("1", x="y"), cm("2"), {"data": {"x": None}}, True),                      # null removes a key
    (cm("1"), _with(cm("2"), ("metadata", "labels"), {"a": "b", "c": "d"}),
     {"metadata": {"labels": {"c": "d"}, "resourceVersion": "1"}}, True),        # an adoption's precondition
    # something else moved with it, or not what was sent, or nothing sent
    (cm("1"), cm("2", **{"discover_hosts.sh": "echo w0"}, extra="1"), HOSTS, False),
    (cm("1"), cm("2", **{"discover_hosts.sh": "echo w1"}), HOSTS, False),
    (cm("1"), _with(cm("2", **{"discover_hosts.sh": "echo w0"}), ("metadata", "labels"), {}), HOSTS, False),
    (cm("1"), _with(cm("2", **{"discover_hosts.sh": "echo w0"}), ("metadata", "deletionTimestamp"), "t"), HOSTS,
     False),
    (cm("1"), cm("2", **{"discover_hosts.sh": "echo w0"}), None, False),
    (cm("1"), cm("2"), {}, False),
])
def test_patch_echo(old, new, patch, echo):
    assert news.patch_echo(old, new, patch) is echo
