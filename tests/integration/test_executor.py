"""controller.executor against the real API server: creates, AlreadyExists of our own object vs a
foreign one, merge patches, deletes with uid preconditions, status through the subresource,
Events, the leader guard and the MPIJob's own deletion."""

from __future__ import annotations

import json
import re

import pytest

from client.errors import ApiError
from client.resources import CONFIGMAPS, MPIJOBS, NETWORKPOLICIES
from client.rest import RestClient
from controller.executor import Executor, ForeignObject, NotLeader, ObjectGone, PredecessorChild
from reconcilers import netpol
from reconcilers.diff import diff
from reconcilers.names import NETWORK_INGRESS_FROM_ANNOTATION, network_policy_name
from reconcilers.types import Create, Delete, Event, Patch, Plan, Ref
from testsupport import builders
from testsupport.kubectl import wait_established
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def client(kubeconfig, kubectl) -> RestClient:
    kubectl("apply", "--server-side", "--force-conflicts", "-f",
            str(ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"))
    wait_established(kubectl, "mpijobs.kubeflow.org")
    return RestClient.from_kubeconfig(kubeconfig, qps=100, burst=100)


@pytest.fixture
def mpijob(client, namespace) -> dict:
    body = builders.mpijob("pi", workers=None, launcher=builders.container("l", image="x"))
    return client.request("POST", MPIJOBS.path(namespace), body=body)


def executor(client, leader: bool = True) -> Executor:
    return Executor(client, is_leader=lambda: leader, component="mpi-operator", instance="test")


def owner(job: dict, uid: str | None = None, controller: bool = True) -> dict:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
            "uid": uid or job["metadata"]["uid"], "controller": controller}


def config_map(job: dict, name: str, owned: bool = True) -> dict:
    meta = {"name": name, "namespace": job["metadata"]["namespace"]}
    if owned:
        meta["ownerReferences"] = [owner(job)]
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


class Recording:
    """The real client, every answer it returned kept."""

    def __init__(self, client: RestClient) -> None:
        self.client, self.answers = client, []

    def request(self, method: str, path: str, **kw):
        out = self.client.request(method, path, **kw)
        self.answers.append((method, path, out))
        return out


def test_every_answer_the_executor_reads_is_metadata_only(client, mpijob, namespace):
    """The executor reads a write's resourceVersion and an existing child's owners: the API server
    sends those alone (PartialObjectMetadata), for creates, a create that finds our own object,
    patches, the status patch and Events; a client asking for nothing of the kind gets the object."""
    ns, rec = namespace, Recording(client)
    ref = Ref("v1", "ConfigMap", ns, "pi-config")
    status = {"conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "m",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    plan = Plan(creates=[Create(config_map(mpijob, "pi-config"))], status=status,
                events=[Event("Normal", "MPIJobCreated", "m")])
    res = executor(rec).apply(mpijob, plan)
    again = executor(rec).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))],
                                             patches=[Patch(ref, {"data": {"hostfile": "h"}})]))
    cm = get_cm(client, ns, "pi-config")
    assert cm["kind"] == "ConfigMap" and cm["data"] == {"k": "v", "hostfile": "h"}
    kinds = {(method, out.get("kind")) for method, _, out in rec.answers}
    assert kinds == {("POST", "PartialObjectMetadata"), ("GET", "PartialObjectMetadata"),
                     ("PATCH", "PartialObjectMetadata")}, rec.answers
    assert all("spec" not in out and "data" not in out and "status" not in out for _, _, out in rec.answers)
    assert res.written[("configmaps", ns, "pi-config")] != cm["metadata"]["resourceVersion"]
    assert again.written[("configmaps", ns, "pi-config")] == cm["metadata"]["resourceVersion"]
    job = client.request("GET", MPIJOBS.path(ns, "pi"))
    assert res.mpijob["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"]
    assert job["status"]["conditions"][0]["reason"] == "MPIJobCreated"


def test_creates_of_every_kind_appear(client, mpijob, namespace):
    ns, ref = namespace, [owner(mpijob)]
    pod = {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never"}
    objs = [
        config_map(mpijob, "pi-config"),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pi-ssh", "namespace": ns, "ownerReferences": ref},
         "type": "Opaque", "stringData": {"a": "b"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "pi", "namespace": ns, "ownerReferences": ref},
         "spec": {"clusterIP": "None", "selector": {"app": "pi"}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi-launcher", "namespace": ns,
                                                             "ownerReferences": ref},
         "spec": {"suspend": True, "template": {"spec": pod}}},
    ]
    res = executor(client).apply(mpijob, Plan(creates=[Create(o) for o in objs]))
    for plural, name in [("configmaps", "pi-config"), ("secrets", "pi-ssh"), ("services", "pi"),
                         ("jobs", "pi-launcher")]:
        api = "batch/v1" if plural == "jobs" else "v1"
        got = client.request("GET", f"/{'apis' if '/' in api else 'api'}/{api}/namespaces/{ns}/{plural}/{name}")
        written, current = int(res.written[(plural, ns, name)]), int(got["metadata"]["resourceVersion"])
        # The Job controller may write the Job's status between our create and this GET.
        assert written == current if plural != "jobs" else written <= current, (plural, written, current)
        assert got["metadata"]["ownerReferences"][0]["uid"] == mpijob["metadata"]["uid"]


@pytest.mark.parametrize("owners", [
    pytest.param(None, id="no-owner"),
    pytest.param("another-controller", id="another-controller"),
    pytest.param("not-controller", id="our-uid-but-not-controller"),
])
def test_a_foreign_object_under_our_name_is_refused(client, mpijob, namespace, owners):
    foreign = config_map(mpijob, "pi-config", owned=False)
    if owners == "another-controller":
        # A live owner of another kind, so that the garbage collector leaves the object alone.
        other = client.request("POST", CONFIGMAPS.path(namespace), body={
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other-owner"}})
        foreign["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "other-owner",
                                                   "uid": other["metadata"]["uid"], "controller": True}]
    elif owners == "not-controller":
        foreign["metadata"]["ownerReferences"] = [owner(mpijob, controller=False)]
    client.request("POST", CONFIGMAPS.path(namespace), body=foreign)
    result = executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    assert isinstance(result.foreign, ForeignObject) and result.stopped
    assert re.search(r"is not controlled by MPIJob .*/pi; delete or rename", str(result.foreign))
    assert get_cm(client, namespace, "pi-config")["data"] == {"k": "v"}


def test_a_deleted_namesakes_child_is_waited_for(client, mpijob, namespace):
    """Controlled by an MPIJob `pi` of another uid (deleted, its children being collected). A finalizer
    holds the object while it is being deleted, so the collector cannot win the race in this test."""
    old = config_map(mpijob, "pi-config", owned=False)
    old["metadata"]["ownerReferences"] = [owner(mpijob, uid="00000000-0000-0000-0000-000000000001")]
    old["metadata"]["finalizers"] = ["mpijob-operator.dev/test-hold"]
    client.request("POST", CONFIGMAPS.path(namespace), body=old)
    try:
        with pytest.raises(PredecessorChild, match="deleted MPIJob pi"):
            executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    finally:
        client.request("PATCH", CONFIGMAPS.path(namespace, "pi-config"), body={"metadata": {"finalizers": None}},
                       content_type="application/merge-patch+json")
    # once the collector removed it, the create goes through
    def created() -> bool:
        try:
            executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
        except PredecessorChild:
            return False
        return get_cm(client, namespace, "pi-config")["metadata"]["ownerReferences"][0]["uid"] == \
            mpijob["metadata"]["uid"]

    wait_until(created, 60, interval=0.5, what="the predecessor's ConfigMap collected and ours created")


def test_merge_patch_and_deletes(client, mpijob, namespace):
    ns = namespace
    executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-config"))]))
    ref = Ref("v1", "ConfigMap", ns, "pi-config")
    patched = executor(client).apply(mpijob, Plan(patches=[Patch(ref, {"data": {"hostfile": "h", "k": None}})]))
    cm = get_cm(client, ns, "pi-config")
    assert cm["data"] == {"hostfile": "h"}, "a merge patch adds a key and removes one set to null"
    assert patched.written[("configmaps", ns, "pi-config")] == cm["metadata"]["resourceVersion"]
    # A uid precondition that does not hold (a namesake): tolerated, the object stays, nothing to await.
    res = executor(client).apply(mpijob, Plan(deletes=[Delete(ref, uid="00000000-0000-0000-0000-000000000000")]))
    assert get_cm(client, ns, "pi-config") == cm and res.gone == {}
    res = executor(client).apply(mpijob, Plan(deletes=[Delete(ref, uid=cm["metadata"]["uid"])]))
    assert get_cm(client, ns, "pi-config") is None and ("configmaps", ns, "pi-config") in res.gone
    missing = executor(client).apply(mpijob, Plan(deletes=[Delete(ref)]))  # already gone: done
    assert missing.gone == {}


def test_a_patch_is_a_json_merge_patch_lists_replaced_whole(client, mpijob, namespace):
    """RFC 7386, not a strategic merge: the planned list of ports is the whole list afterwards."""
    svc = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "pi", "namespace": namespace, "ownerReferences": [owner(mpijob)]},
           "spec": {"clusterIP": "None", "ports": [{"name": "a", "port": 80}]}}
    executor(client).apply(mpijob, Plan(creates=[Create(svc)]))
    ref = Ref("v1", "Service", namespace, "pi")
    executor(client).apply(mpijob, Plan(patches=[Patch(ref, {"spec": {"ports": [{"name": "b", "port": 81}]}})]))
    got = client.request("GET", f"/api/v1/namespaces/{namespace}/services/pi")
    assert [(p["name"], p["port"]) for p in got["spec"]["ports"]] == [("b", 81)]


def test_a_patch_of_a_missing_object_is_gone_not_refused(client, mpijob, namespace):
    """Issue 24 item 7: the API server's 404 on a patch (the object deleted since the cache showed
    it) is ObjectGone, a race the controller requeues quietly, not a refusal shown as Blocked."""
    with pytest.raises(ObjectGone):
        res = executor(client).apply(mpijob, Plan(patches=[Patch(Ref("v1", "ConfigMap", namespace, "nope"),
                                                                 {"data": {}})]))
        assert res.refused is None, res.refused


def test_status_through_the_subresource_and_dropped_fields_cleared(client, mpijob, namespace):
    status = {"conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "m",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}],
              "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:00Z"}
    res = executor(client).apply(mpijob, Plan(status=status))
    got = client.request("GET", MPIJOBS.path(namespace, "pi"))
    assert got["status"] == status and got["spec"] == mpijob["spec"]
    assert got["metadata"].get("generation") == mpijob["metadata"].get("generation")
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
    assert (ev["reportingComponent"], ev["reportingInstance"], ev["count"]) == ("mpi-operator", "test", 1)


def test_a_long_event_message_is_cut(client, mpijob, namespace, kubectl):
    executor(client).apply(mpijob, Plan(events=[Event("Normal", "Long", "x" * 5000)]))
    events = json.loads(kubectl("-n", namespace, "get", "events", "-o", "json").stdout)["items"]
    (ev,) = [e for e in events if e["reason"] == "Long"]
    assert ev["message"] == "x" * 1024


def test_a_replica_that_is_not_the_leader_writes_nothing(client, mpijob, namespace):
    executor(client).apply(mpijob, Plan(creates=[Create(config_map(mpijob, "pi-kept"))]))
    ref = Ref("v1", "ConfigMap", namespace, "pi-kept")
    plans = [
        Plan(creates=[Create(config_map(mpijob, "pi-config"))]),
        Plan(patches=[Patch(ref, {"data": {"k": "changed"}})]),
        Plan(deletes=[Delete(ref)]),
        Plan(status={"conditions": []}),
        Plan(events=[Event("Normal", "NotLeaderEvent", "y")]),
        Plan(delete_mpijob=True),
    ]
    for plan in plans:
        with pytest.raises(NotLeader):
            executor(client, leader=False).apply(mpijob, plan)
    assert get_cm(client, namespace, "pi-config") is None
    assert get_cm(client, namespace, "pi-kept")["data"] == {"k": "v"}
    got = client.request("GET", MPIJOBS.path(namespace, "pi"))
    assert got.get("status") in (None, {}) and got["metadata"]["resourceVersion"] == mpijob["metadata"][
        "resourceVersion"]
    events = client.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    assert [e for e in events if e["reason"] == "NotLeaderEvent"] == []


def test_delete_mpijob(client, mpijob, namespace, kubectl):
    executor(client).apply(mpijob, Plan(delete_mpijob=True))
    r = kubectl("-n", namespace, "get", "mpijob", "pi", check=False)
    assert r.returncode != 0 and "NotFound" in r.stderr
    executor(client).apply(mpijob, Plan(delete_mpijob=True))  # already gone: done


def test_delete_mpijob_spares_a_recreated_namesake(client, mpijob, namespace):
    """The TTL delete carries the uid it planned with: a new MPIJob of the same name is not deleted."""
    client.request("DELETE", MPIJOBS.path(namespace, "pi"))
    again = client.request("POST", MPIJOBS.path(namespace), body={k: mpijob[k] for k in ("apiVersion", "kind", "spec")}
                           | {"metadata": {"name": "pi"}})
    executor(client).apply(mpijob, Plan(delete_mpijob=True))
    assert client.request("GET", MPIJOBS.path(namespace, "pi"))["metadata"]["uid"] == again["metadata"]["uid"]



def test_isolation_policy_round_trips_through_the_api_server_and_drift_is_repaired(client, mpijob, namespace):
    """The NetworkPolicy as the planner builds it (reconcilers/netpol.py), extra peers with empty maps and
    lists included, comes back from the real API server with nothing to repair (no write at steady
    state); drifted by someone else, one merge patch brings the owned spec back exactly."""
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "notebooks"}}},
             {"namespaceSelector": {}, "podSelector": {"matchLabels": {}, "matchExpressions": []}},
             {"podSelector": {"matchExpressions": [{"key": "team", "operator": "Exists", "values": []}]}},
             {"ipBlock": {"cidr": "10.1.0.0/16", "except": []}}]
    job = {**mpijob, "metadata": {**mpijob["metadata"],
                                  "annotations": {NETWORK_INGRESS_FROM_ANNOTATION: json.dumps(peers)}}}
    want = netpol.network_policy(job, owner(mpijob))
    res = executor(client).apply(mpijob, Plan(creates=[Create(want)]))
    assert res.refused is None and ("networkpolicies", namespace, "pi-mpijob-isolation") in res.written
    path = NETWORKPOLICIES.path(namespace, "pi-mpijob-isolation")
    stored = client.request("GET", path)
    assert diff(want, stored) is None, stored["spec"]
    client.request("PATCH", path, content_type="application/merge-patch+json", body={
        "metadata": {"labels": {"someone": "else"}},
        "spec": {"podSelector": {"matchLabels": {"extra": "x"}}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 22}]}]}})
    patch = diff(want, client.request("GET", path))
    assert patch is not None
    executor(client).apply(mpijob, Plan(patches=[patch]))
    repaired = client.request("GET", path)
    assert diff(want, repaired) is None and repaired["spec"] == stored["spec"], repaired["spec"]
    assert repaired["metadata"]["labels"]["someone"] == "else"


def test_policy_clash_a_foreign_policy_under_our_name_is_reported_as_a_policy(client, mpijob, namespace):
    """Issue 42 item 1: the create that meets a NetworkPolicy of someone else's under the policy's name
    (not labelled as ours, so no informer shows it) ends the apply with a ForeignObject of kind
    NetworkPolicy, which the controller turns into NetworkIsolated=False, never a clash that fails the
    MPIJob; the object is left as it was."""
    name = network_policy_name(mpijob)
    theirs = client.request("POST", NETWORKPOLICIES.path(namespace), body={
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
        "spec": {"podSelector": {"matchLabels": {"app": "theirs"}}, "policyTypes": ["Ingress"]}})
    res = executor(client).apply(mpijob, Plan(creates=[Create(netpol.network_policy(mpijob, owner(mpijob)))]))
    assert isinstance(res.foreign, ForeignObject) and res.foreign.kind == "NetworkPolicy", res
    assert res.foreign.path == NETWORKPOLICIES.path(namespace, name)
    after = client.request("GET", NETWORKPOLICIES.path(namespace, name))
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
