"""Issue 42 item 3: upstream v0.8.2's ClusterRole, kept by a user who swaps only the image, lacks verbs this
operator sends. The operator knows at start (a SelfSubjectAccessReview per grant, controller/access.py),
then runs with what it has: features whose grant is missing off and named, every MPIJob held and told
why when running one is impossible, or no start at all without what it needs to tell MPIJobs anything.
The cluster's side is e2e/test_upstream_rbac.py."""

from __future__ import annotations

import copy
import threading

import pytest

from client import permissions as perm
from controller import __main__ as main_module
from controller import access, config
from reconcilers import access as job_access
from reconcilers import elastic, names, status
from reconcilers.refusal import BLOCKED
from reconcilers.types import Observed
from tests.unit import sim
from testsupport.fake_api import FakeApi
from testsupport.upstream_rbac import UPSTREAM_RULES, grants

HELD_UNDER_UPSTREAM = {
    ("batch", "jobs", "get"), ("batch", "jobs", "patch"), ("batch", "jobs", "delete"),
    ("", "services", "get"), ("", "services", "patch"),
    ("", "configmaps", "get"), ("", "configmaps", "patch"),
    ("", "secrets", "get"), ("", "secrets", "patch"), ("", "secrets", "delete"),
}


def _upstream_missing(backend: str = "job") -> set[perm.Triple]:
    want = perm.needed(backend, "", network_isolation=True)
    return want - grants(UPSTREAM_RULES, want)


def test_upstream_rbac_sorted_into_features_off_and_mpijobs_held():
    a = perm.assess(_upstream_missing(), "job")
    assert not a.refuse, "upstream grants what telling an MPIJob needs: the operator starts"
    assert a.blocked == HELD_UNDER_UPSTREAM
    assert {f.name: lacks for f, lacks in a.off} == {
        "network-isolation": perm.expand(perm.NETWORK_ISOLATION.grants),
        "launcher-log": {("", "pods/log", "get")},
        "statefulset-workers": perm.expand(perm.STATEFULSET_WORKERS.grants),
        # upstream never read Kueue's Workloads: a Kueue-held MPIJob reads Suspended, not why
        "kueue-reasons": perm.expand(perm.KUEUE_REASONS.grants),
    }
    # with --worker-backend=statefulset the StatefulSets run the workers: needed, not a feature
    a = perm.assess(_upstream_missing("statefulset"), "statefulset")
    assert ("apps", "statefulsets", "create") in a.blocked and not a.feature_off("statefulset-workers")


@pytest.mark.parametrize("lacking", [{("kubeflow.org", "mpijobs", "watch")}, {("", "events", "create")},
                                     {("kubeflow.org", "mpijobs/status", "patch")},
                                     {("coordination.k8s.io", "leases", "update")}])
def test_upstream_rbac_without_what_tells_an_mpijob_the_operator_refuses_to_start(lacking):
    a = perm.assess(lacking | {("", "pods/log", "get"), ("batch", "jobs", "patch")}, "job")
    assert a.refuse == lacking
    assert a.missing == lacking | {("", "pods/log", "get"), ("batch", "jobs", "patch")}


def _reviewing(denied: set[perm.Triple]):
    """An API server's SelfSubjectAccessReview answers: allowed unless the triple is in `denied`."""
    asked = []

    def respond(method, path, body):
        attrs = body["spec"]["resourceAttributes"]
        resource = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        t = (attrs["group"], resource, attrs["verb"])
        asked.append((t, attrs.get("namespace")))
        return {"status": {"allowed": t not in denied}}
    return respond, asked


def test_upstream_rbac_the_operator_asks_one_review_per_grant_before_any_informer():
    denied = _upstream_missing()
    respond, asked = _reviewing(denied)
    api = FakeApi(respond=respond)
    opts = config.parse(["--leader-elect", "--leader-election-namespace=ops"])
    a = main_module._assess(api, opts, threading.Event())
    want = perm.needed("job", "", True) | perm.expand(perm.LEADER_ELECTION)
    assert {t for t, _ in asked} == want and len(asked) == len(want)
    assert all(ns == ("ops" if t[1] == "leases" else None) for t, ns in asked)
    assert a.blocked == HELD_UNDER_UPSTREAM and a.feature_off("network-isolation")
    assert all(m == "POST" and p.endswith("/selfsubjectaccessreviews") for m, p, _ in api.calls)


class _Lines:
    """Stands in for a module's logger: the lines it was given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, level):
        return lambda msg, **kw: self.lines.append(f"{level} {msg} {kw}")


def test_upstream_rbac_main_refuses_to_start_naming_every_missing_verb(monkeypatch):
    respond, _ = _reviewing(_upstream_missing() | {("kubeflow.org", "mpijobs/status", "patch")})
    api = FakeApi(respond=respond)
    lines = _Lines()
    monkeypatch.setattr(access, "log", lines)
    monkeypatch.setattr(main_module.RestClient, "from_kubeconfig", classmethod(lambda cls, *a, **kw: api))
    monkeypatch.setattr(main_module.signal, "signal", lambda *a: None)
    monkeypatch.setattr(main_module, "InformerFactory", lambda *a, **kw: pytest.fail("an informer made"))
    assert main_module.main(["--health-probe-bind-address=0", "--metrics-bind-address=0"]) == 2
    text = "\n".join(lines.lines)
    assert "not starting" in text and perm.MANIFEST in text
    for t in _upstream_missing() | {("kubeflow.org", "mpijobs/status", "patch")}:
        assert perm.spell(t) in text


def test_upstream_rbac_every_mpijob_held_and_told_which_verbs_lack():
    a = perm.assess(_upstream_missing(), "job")
    why = access.message(a, "")
    p = sim.run(sim.mpijob(), Observed(), permissions_missing=why)
    assert not p.creates and not p.patches and not p.deletes
    blocked = status.get_condition(p.status, BLOCKED)
    assert blocked["status"] == "True" and blocked["reason"] == job_access.R_RBAC
    for t in HELD_UNDER_UPSTREAM:
        assert perm.spell(t) in blocked["message"]
    assert perm.MANIFEST in blocked["message"]
    assert [(e.type, e.reason) for e in p.events if e.reason == job_access.R_RBAC] == [("Warning", "RBACMissing")]
    # told once: the next pass writes nothing
    job = copy.deepcopy(sim.mpijob())
    job["status"] = p.status
    again = sim.run(job, Observed(), permissions_missing=why)
    assert again.status is None and not again.events
    # granted, and the operator restarted: the hold goes, the MPIJob starts
    p = sim.run(job, Observed())
    assert status.get_condition(p.status, BLOCKED) is None and p.creates


def test_upstream_rbac_a_feature_off_is_named_on_each_mpijob_it_touches():
    a = perm.assess({("networking.k8s.io", "networkpolicies", "list"), ("", "pods", "patch")}, "job")
    off = access.features_off(a, "")
    p = sim.run(sim.mpijob(), Observed(), features_off=off, network_isolation=False)
    cond = status.get_condition(p.status, job_access.PERMISSIONS_MISSING)
    assert cond["status"] == "True" and "list networkpolicies.networking.k8s.io" in cond["message"]
    assert "network isolation is off" in cond["message"] and perm.MANIFEST in cond["message"]
    assert any(e.type == "Warning" and e.reason == job_access.R_RBAC for e in p.events)
    assert p.creates and not any(c.obj["kind"] == "NetworkPolicy" for c in p.creates)
    opted_out = sim.mpijob()
    opted_out["metadata"]["annotations"] = {names.NETWORK_ISOLATION_ANNOTATION: "false"}
    p = sim.run(opted_out, Observed(), features_off=off, network_isolation=False)
    assert status.get_condition(p.status, job_access.PERMISSIONS_MISSING) is None


def test_upstream_rbac_without_pods_patch_no_elastic_launcher_is_stamped():
    job = sim.mpijob()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"] = [
        "--host-discovery-script", "/etc/mpi/discover_hosts.sh", "python", "t.py"]
    job, obs = sim.running_state(job, "job")
    for pod in obs.pods:  # the launcher carries the digest of hosts it no longer has
        pod["metadata"]["annotations"] = {elastic.REFRESH_ANNOTATION: "stale"}
    stamped = sim.run(job, obs)
    assert any(p.ref.kind == "Pod" for p in stamped.patches), "the premise: a stamp is due"
    off = access.features_off(perm.assess({("", "pods", "patch")}, "job"), "")
    p = sim.run(job, obs, features_off=off)
    assert not any(x.ref.kind == "Pod" for x in p.patches)
    assert "elastic launchers are not stamped" in status.get_condition(p.status, job_access.PERMISSIONS_MISSING)[
        "message"]
