"""Issue 36 item 1: the status write carries a precondition, against the real API server.

What the API server enforces on a merge patch of mpijobs/<name>/status (measured on the local
cluster, and kept true by the first test): metadata.resourceVersion in the body, 409 Conflict when it
is not the stored one; metadata.uid in the body it ignores, writing the status of whatever object has
the name. So the executor sends the resourceVersion the plan was made from, and a namesake (always a
newer resourceVersion) is guarded by it too.

The race of the issue, made deterministic: a plan made for MPIJob `pi` (uid A), then `pi` deleted and
re-created (uid B), then the executor applies A's plan. B's status must stay untouched and the apply
must say that its plan is stale, so that the controller plans again.
"""

from __future__ import annotations

import pytest

from client.errors import ApiError
from client.resources import MPIJOBS
from client.rest import RestClient
from controller.executor import Executor, StaleStatus
from reconcilers.types import Event, Plan
from testsupport import builders
from testsupport.kubectl import wait_established
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

MERGE_PATCH = "application/merge-patch+json"
SUCCEEDED = {
    "conditions": [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "message": "done",
                    "lastTransitionTime": "2024-01-01T00:00:00Z", "lastUpdateTime": "2024-01-01T00:00:00Z"}],
    "startTime": "2024-01-01T00:00:00Z",
    "completionTime": "2024-01-01T00:01:00Z",
}


@pytest.fixture(scope="module")
def client(kubeconfig, kubectl) -> RestClient:
    kubectl("apply", "--server-side", "--force-conflicts", "-f",
            str(ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"))
    wait_established(kubectl, "mpijobs.kubeflow.org")
    return RestClient.from_kubeconfig(kubeconfig, qps=100, burst=100)


def create(client: RestClient, ns: str) -> dict:
    body = builders.mpijob("pi", workers=None, launcher=builders.container("l", image="x"))
    return client.request("POST", MPIJOBS.path(ns), body=body)


def get(client: RestClient, ns: str) -> dict | None:
    try:
        return client.request("GET", MPIJOBS.path(ns, "pi"))
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def recreate(client: RestClient, ns: str) -> dict:
    """`pi` deleted (gone for good: no finalizer holds it) and created again: a namesake, another uid."""
    client.request("DELETE", MPIJOBS.path(ns, "pi"))
    wait_until(lambda: get(client, ns) is None, 30, interval=0.05, what="the MPIJob deleted")
    return create(client, ns)


def executor(client: RestClient) -> Executor:
    return Executor(client, is_leader=lambda: True, component="mpi-operator", instance="test")


def events_of(client: RestClient, ns: str) -> list[dict]:
    return client.request("GET", f"/api/v1/namespaces/{ns}/events").get("items") or []


def test_status_precondition_what_the_api_server_enforces(client, namespace):
    """The facts the fix stands on: a stale resourceVersion in the body is refused, a foreign uid is not."""
    a = create(client, namespace)
    b = recreate(client, namespace)
    path = MPIJOBS.path(namespace, "pi", "status")
    with pytest.raises(ApiError) as refused:
        client.request("PATCH", path, content_type=MERGE_PATCH,
                       body={"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]},
                             "status": {"startTime": "2024-01-01T00:00:00Z"}})
    assert refused.value.status == 409
    assert (get(client, namespace).get("status") or {}) == (b.get("status") or {})
    foreign_uid = {"metadata": {"uid": a["metadata"]["uid"]}, "status": {"startTime": "2024-01-01T00:00:00Z"}}
    out = client.request("PATCH", path, content_type=MERGE_PATCH, body=foreign_uid)
    assert out["metadata"]["uid"] == b["metadata"]["uid"]  # written: a uid in the body is no precondition
    assert out["status"]["startTime"] == "2024-01-01T00:00:00Z"


def test_status_precondition_a_namesake_keeps_its_status(client, namespace):
    a = create(client, namespace)
    plan = Plan(status=SUCCEEDED, events=[Event("Normal", "MPIJobSucceeded", "MPIJob pi succeeded")])
    b = recreate(client, namespace)
    assert b["metadata"]["uid"] != a["metadata"]["uid"]
    res = executor(client).apply(a, plan)  # A's plan, applied after the namesake B was created
    now = get(client, namespace)
    assert now["metadata"]["uid"] == b["metadata"]["uid"]
    assert not (now.get("status") or {}), "A's status landed on B"
    assert now["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]
    assert not [e for e in events_of(client, namespace) if e.get("reason") == "MPIJobSucceeded"]
    assert isinstance(res.stale, StaleStatus) and res.stopped  # so the controller plans again
    # B's own plan, made from B, goes through.
    res = executor(client).apply(b, Plan(status=SUCCEEDED))
    assert res.stale is None
    assert get(client, namespace)["status"]["completionTime"] == "2024-01-01T00:01:00Z"


def test_status_precondition_a_change_since_the_plan_means_plan_again(client, namespace):
    """Not only a namesake: a status planned from an MPIJob that changed since (Kueue suspending it, a
    user's edit) is not written over the change."""
    a = create(client, namespace)
    client.request("PATCH", MPIJOBS.path(namespace, "pi"), content_type=MERGE_PATCH,
                   body={"spec": {"runPolicy": {"suspend": True}}})
    res = executor(client).apply(a, Plan(status={"startTime": "2024-01-01T00:00:00Z"}))
    assert not (get(client, namespace).get("status") or {}), "a status planned before the change was written"
    assert isinstance(res.stale, StaleStatus)


def test_status_precondition_no_conflict_at_steady_state(client, namespace):
    """Status writes planned from what the previous one left (as the controller's expectations make
    sure) never conflict: one write, one answer each, no retry."""
    job = create(client, namespace)
    calls: list[str] = []
    real = client.request

    class Counting:
        def request(self, method, path, **kw):
            calls.append(method)
            return real(method, path, **kw)

    ex = executor(Counting())  # type: ignore[arg-type]
    for i in range(3):
        status = {"startTime": "2024-01-01T00:00:00Z", "replicaStatuses": {"Launcher": {"active": i}}}
        res = ex.apply(job, Plan(status=status))
        assert res.stale is None
        job = {**job, "status": status,
               "metadata": {**job["metadata"], "resourceVersion": res.mpijob["metadata"]["resourceVersion"]}}
    assert calls == ["PATCH"] * 3
    assert get(client, namespace)["status"]["replicaStatuses"]["Launcher"]["active"] == 2
