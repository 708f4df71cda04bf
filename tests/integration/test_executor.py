"""controller.executor against the real API server: creates, AlreadyExists of our own object vs a
foreign one, merge patches, deletes with uid preconditions, status through the subresource,
Events, the leader guard and the MPIJob's own deletion."""

from __future__ import annotations

import json

import pytest

from controller.executor import Executor, ForeignObject, NotLeader
from informers.resources import CONFIGMAPS, MPIJOBS
from informers.rest import ApiError, RestClient
from reconcilers.types import Create, Delete, Event, Patch, Plan, Ref
from tests.cluster_fixtures import ROOT

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def client(kubeconfig, kubectl) -> RestClient:
    kubectl("apply", "--server-side", "--force-conflicts", "-f",
            str(ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"))
    kubectl("wait", "--for=condition=Established", "crd/mpijobs.kubeflow.org", "--timeout=60s")
    return RestClient.from_kubeconfig(kubeconfig, qps=100, burst=100)


@pytest.fixture
def mpijob(client, namespace) -> dict:
    body = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
            "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "l", "image": "x"}]}}}}}}
    return client.request("POST", MPIJOBS.path(namespace), body=body)


def executor(client, leader: bool = True) -> Executor:
    return Executor(client, is_leader=lambda: leader, component="mpi-operator", instance="test")


def config_map(job: dict, name: str, owned: bool = True) -> dict:
    meta = {"name": name, "namespace": job["metadata"]["namespace"]}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
                                    "uid": job["metadata"]["uid"], "controller": True}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def get_cm(client, ns: str, name: str) -> dict | None:
    try:
        return client.request("GET", CONFIGMAPS.path(ns, name))
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def test_create_and_already_exists_of_our_own_object(client, mpijob, namespace):
    ns = namespace
    res = executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    cm = get_cm(client, ns, "pi-config")
    assert cm and res.written[("configmaps", ns, "pi-config")] == cm["metadata"]["resourceVersion"]
    # A stale cache plans the same create again: done, not an error.
    again = executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    assert again.written[("configmaps", ns, "pi-config")] == cm["metadata"]["resourceVersion"]


def test_a_foreign_object_under_our_name_is_refused(client, mpijob, namespace):
    client.request("POST", CONFIGMAPS.path(namespace), body=config_map(mpijob, "pi-config", owned=False))
    with pytest.raises(ForeignObject, match="not controlled by this MPIJob"):
        executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    assert get_cm(client, namespace, "pi-config")["data"] == {"k": "v"}


def test_merge_patch_and_deletes(client, mpijob, namespace):
    ns = namespace
    executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    ref = Ref("v1", "ConfigMap", ns, "pi-config")
    executor(client).apply(mpijob, Plan(patches=[Patch(ref, {"data": {"hostfile": "h"}}, "test")]))
    assert get_cm(client, ns, "pi-config")["data"] == {"k": "v", "hostfile": "h"}
    # A uid precondition that does not hold (a namesake): tolerated, the object stays.
    executor(client).apply(mpijob, Plan(deletes=[Delete(ref, uid="00000000-0000-0000-0000-000000000000")]))
    cm = get_cm(client, ns, "pi-config")
    assert cm is not None
    res = executor(client).apply(mpijob, Plan(deletes=[Delete(ref, uid=cm["metadata"]["uid"])]))
    assert get_cm(client, ns, "pi-config") is None and ("configmaps", ns, "pi-config") in res.gone
    executor(client).apply(mpijob, Plan(deletes=[Delete(ref)]))  # already gone: done


def test_status_through_the_subresource_and_dropped_fields_cleared(client, mpijob, namespace):
    status = {"conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "m",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}],
              "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:00Z"}
    res = executor(client).apply(mpijob, Plan(status=status))
    got = client.request("GET", MPIJOBS.path(namespace, "pi"))
    assert got["status"] == status and got["spec"] == mpijob["spec"]
    assert res.mpijob["metadata"]["resourceVersion"] == got["metadata"]["resourceVersion"]
    # Resume starts afresh: a status without completionTime clears it on the server.
    fresh = {k: v for k, v in status.items() if k != "completionTime"}
    executor(client).apply(got, Plan(status=fresh))
    assert client.request("GET", MPIJOBS.path(namespace, "pi"))["status"] == fresh


def test_events_on_the_mpijob(client, mpijob, namespace, kubectl):
    executor(client).apply(mpijob, Plan(events=[Event("Warning", "InvalidSpec", "spec.x: fix it")]))
    events = json.loads(kubectl("-n", namespace, "get", "events", "-o", "json").stdout)["items"]
    (ev,) = [e for e in events if e["reason"] == "InvalidSpec"]
    assert ev["type"] == "Warning" and ev["message"] == "spec.x: fix it"
    assert (ev["involvedObject"]["kind"], ev["involvedObject"]["name"], ev["involvedObject"]["uid"]) == (
        "MPIJob", "pi", mpijob["metadata"]["uid"])
    assert ev["source"]["component"] == "mpi-operator"


def test_a_replica_that_is_not_the_leader_writes_nothing(client, mpijob, namespace):
    plan = Plan(creates=[Create(config_map(mpijob, "pi-config"))], status={"conditions": []},
                events=[Event("Normal", "X", "y")])
    with pytest.raises(NotLeader):
        executor(client, leader=False).apply(mpijob, plan)
    assert get_cm(client, namespace, "pi-config") is None
    assert client.request("GET", MPIJOBS.path(namespace, "pi")).get("status") in (None, {})


def test_delete_mpijob(client, mpijob, namespace, kubectl):
    executor(client).apply(mpijob, Plan(delete_mpijob=True))
    r = kubectl("-n", namespace, "get", "mpijob", "pi", check=False)
    assert r.returncode != 0 and "NotFound" in r.stderr

