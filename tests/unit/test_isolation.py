"""Network isolation (reconcilers/netpol.py, docs/architecture.md section 10): each MPIJob's
NetworkPolicy built, created before any pod, repaired exactly, deleted when isolation is turned off
for it, never made for hostNetwork pods (which say so), and what it costs in writes."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from reconcilers import names as n
from reconcilers import netpol, refusal
from reconcilers import status as st
from reconcilers.desired import owner_reference
from reconcilers.diff import diff
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed
from reconcilers.validation import validate
from tests.unit.sim import (
    BACKENDS,
    NOW,
    KeyGen,
    apply_plan,
    converge,
    exited_0,
    job_finished,
    merge_patch,
    mpijob,
    run,
    running_state,
    with_status,
)

OWN = {"matchLabels": {n.JOB_NAME_LABEL: "pi", n.OPERATOR_NAME_LABEL: "mpi-operator"}}
POLICY = "pi-mpijob-isolation"
NOTEBOOKS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "notebooks"}}}


def annotated(job: dict, **ann: str) -> dict:
    job = copy.deepcopy(job)
    job["metadata"].setdefault("annotations", {}).update(ann)
    return job


def isolated(**ann: str) -> dict:
    keys = {"isolation": n.NETWORK_ISOLATION_ANNOTATION, "ingress_from": n.NETWORK_INGRESS_FROM_ANNOTATION}
    return annotated(mpijob(), **{keys[k]: v for k, v in ann.items()})


def host_network(job: dict, rtype: str = "Worker") -> dict:
    job = copy.deepcopy(job)
    job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["hostNetwork"] = True
    return job


def policies(p) -> list[dict]:
    return [c.obj for c in p.creates if c.obj["kind"] == "NetworkPolicy"]


def kinds(p) -> list[str]:
    return [c.obj["kind"] for c in p.creates]


# -- the object ----------------------------------------------------------------------------------------


def test_isolation_policy_admits_the_mpijobs_own_pods_on_every_port_and_leaves_egress():
    pol = netpol.network_policy(mpijob(), owner_reference(mpijob()))
    assert pol["apiVersion"] == "networking.k8s.io/v1" and pol["kind"] == "NetworkPolicy"
    assert pol["metadata"]["name"] == POLICY and pol["metadata"]["namespace"] == "ns"
    assert pol["metadata"]["labels"] == n.job_labels(mpijob())
    (ref,) = pol["metadata"]["ownerReferences"]
    assert ref["controller"] is True and ref["kind"] == "MPIJob" and ref["uid"] == "uid-pi"
    assert pol["spec"] == {"podSelector": OWN, "policyTypes": ["Ingress"],
                           "ingress": [{"from": [{"podSelector": OWN}]}]}


def selects(selector: dict, labels: dict) -> bool:
    """A matchLabels-only selector (what the policy's own selectors are) against a pod's labels."""
    assert set(selector) == {"matchLabels"}
    return selector["matchLabels"].items() <= labels.items()


def test_foreign_job_name_another_operators_pod_of_the_same_name_is_neither_selected_nor_admitted():
    """Issue 42 item 2: the Training Operator labels PyTorchJob and TFJob pods job-name too. A
    PyTorchJob `pi` beside MPIJob `pi` keeps its ingress (not selected) and is not admitted to the
    MPIJob's pods (not a peer); the MPIJob's own pods, ours or upstream's, are both."""
    pol = netpol.network_policy(mpijob(), owner_reference(mpijob()))
    pytorch = {n.JOB_NAME_LABEL: "pi", n.OPERATOR_NAME_LABEL: "pytorchjob-controller",
               "training.kubeflow.org/replica-type": "master"}
    ours = n.job_labels(mpijob(), n.ROLE_WORKER)
    upstreams = {n.JOB_NAME_LABEL: "pi", n.OPERATOR_NAME_LABEL: "mpi-operator", n.JOB_ROLE_LABEL: "worker"}
    (rule,) = pol["spec"]["ingress"]
    for labels, want in ((pytorch, False), (ours, True), (upstreams, True)):
        assert selects(pol["spec"]["podSelector"], labels) is want, labels
        assert any(selects(peer["podSelector"], labels) for peer in rule["from"]) is want, labels


@pytest.mark.parametrize(("peers", "want"), [
    pytest.param([NOTEBOOKS], [NOTEBOOKS], id="a-namespace"),
    pytest.param([{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "prometheus"}}}],
                 [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "prometheus"}}}],
                 id="any-namespace"),
    pytest.param([{"podSelector": {"matchLabels": {}, "matchExpressions": []}}], [{"podSelector": {}}],
                 id="empty-maps-as-the-api-server-stores-them"),
    pytest.param([{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists", "values": []}]}}],
                 [{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}],
                 id="exists-without-values"),
    pytest.param([{"ipBlock": {"cidr": "10.1.0.0/16", "except": []}},
                  {"ipBlock": {"cidr": "10.2.0.0/16", "except": ["10.2.3.0/24"]}}],
                 [{"ipBlock": {"cidr": "10.1.0.0/16"}},
                  {"ipBlock": {"cidr": "10.2.0.0/16", "except": ["10.2.3.0/24"]}}],
                 id="ip-blocks"),
])
def test_isolation_extra_sources_come_after_the_own_pods_in_canonical_form(peers, want):
    job = isolated(ingress_from=json.dumps(peers))
    assert validate(job) == []
    pol = netpol.network_policy(job, owner_reference(job))
    assert pol["spec"]["ingress"] == [{"from": [{"podSelector": OWN}, *want]}]


A = n.NETWORK_INGRESS_FROM_ANNOTATION


@pytest.mark.parametrize(("ann", "path", "words"), [
    ({n.NETWORK_ISOLATION_ANNOTATION: "off"}, f"metadata.annotations[{n.NETWORK_ISOLATION_ANNOTATION}]", "true"),
    ({A: "[{"}, f"metadata.annotations[{A}]", "is not JSON"),
    ({A: json.dumps(NOTEBOOKS)}, f"metadata.annotations[{A}]", "JSON list"),
    ({A: "[{}]"}, f"metadata.annotations[{A}][0]", "must be an object"),
    ({A: '[{"namespace": "x"}]'}, f"metadata.annotations[{A}][0]", "unknown field(s) namespace"),
    ({A: '[{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]'}, f"metadata.annotations[{A}][0]", "two peers"),
    ({A: '[{"ipBlock": {"except": ["10.0.0.0/9"]}}]'}, f"metadata.annotations[{A}][0].ipBlock", "cidr"),
    ({A: '[{"podSelector": {"matchLabels": {"a": 1}}}]'},
     f"metadata.annotations[{A}][0].podSelector.matchLabels", "strings"),
    ({A: '[{"podSelector": {"app": "x"}}]'}, f"metadata.annotations[{A}][0].podSelector", "label selector"),
    ({A: '[{}, {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}]'},
     f"metadata.annotations[{A}][1].podSelector.matchExpressions[0]", "operator one of"),
])
def test_isolation_annotations_the_operator_cannot_act_on_are_invalid_spec(ann, path, words):
    job = annotated(mpijob(), **ann)
    errors = {e.path: e.message for e in validate(job)}
    assert path in errors and words in errors[path], errors
    p = run(job)
    assert not p.creates and st.get_condition(p.status, st.FAILED)["reason"] == "InvalidSpec"


def test_isolation_refused_by_the_api_server_names_the_annotation():
    r = refusal.Refusal(422, "Invalid", "NetworkPolicy.networking.k8s.io \"pi\" is invalid", "NetworkPolicy", "pi",
                        causes=(refusal.Cause("spec.ingress[0].from[1].ipBlock.cidr", "invalid CIDR"),))
    assert refusal.fields(r) == [f"metadata.annotations[{A}]"]


# -- the plan --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_policy_is_created_with_the_shared_children_before_any_pod(backend):
    p = run(mpijob(), backend=backend)
    assert kinds(p)[:4] == ["Service", "ConfigMap", "Secret", "NetworkPolicy"]
    assert policies(p) == [netpol.network_policy(mpijob(), owner_reference(mpijob()))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["flag", "annotation"])
def test_isolation_off_makes_no_policy_and_says_nothing(backend, how):
    job = isolated(isolation="false") if how == "annotation" else mpijob()
    config = {"network_isolation": False} if how == "flag" else {}
    job, obs, plans = converge(job, backend=backend, **config)
    assert obs.network_policy is None and not any(policies(p) for p in plans)
    assert st.get_condition(job["status"], netpol.NOT_ISOLATED) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_annotation_true_is_the_default(backend):
    assert policies(run(isolated(isolation="true"), backend=backend)) == policies(run(mpijob(), backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_turned_off_by_annotation_deletes_the_policy_and_on_again_makes_it(backend):
    job, obs = running_state(mpijob(), backend)
    pol = obs.network_policy
    off = annotated(job, **{n.NETWORK_ISOLATION_ANNOTATION: "false"})
    p = run(off, obs, backend)
    (d,) = p.deletes
    assert (d.ref.kind, d.ref.name, d.uid) == ("NetworkPolicy", POLICY, pol["metadata"]["uid"])
    assert p.writes == 1 and not p.creates and not p.patches
    off, obs = apply_plan(off, obs, p)
    assert run(off, obs, backend).writes == 0
    on = annotated(off, **{n.NETWORK_ISOLATION_ANNOTATION: "true"})
    p = run(on, obs, backend)
    assert [c.obj["kind"] for c in p.creates] == ["NetworkPolicy"] and p.writes == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rtype", ["Launcher", "Worker"])
def test_isolation_host_network_runs_without_a_policy_and_says_so_once(backend, rtype):
    job = host_network(mpijob(), rtype)
    first = run(job, backend=backend)
    assert not policies(first) and kinds(first)[:3] == ["Service", "ConfigMap", "Secret"]
    c = st.get_condition(first.status, netpol.NOT_ISOLATED)
    assert (c["status"], c["reason"]) == ("False", netpol.R_HOST_NETWORK)
    assert "hostNetwork" in c["message"] and n.NETWORK_ISOLATION_ANNOTATION in c["message"]
    assert [e.type for e in first.events if e.reason == netpol.R_NOT_ISOLATED] == ["Warning"]
    # the condition rides on the first status write (Created): no write of its own
    assert first.writes == len(run(mpijob(), backend=backend).creates) - 1 + 1
    job, obs, plans = converge(job, backend=backend)
    assert not any(e.reason == netpol.R_NOT_ISOLATED for p in plans[1:] for e in p.events)
    assert obs.network_policy is None and st.get_condition(job["status"], netpol.NOT_ISOLATED) == c


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_host_network_opted_out_by_annotation_says_nothing(backend):
    job = annotated(host_network(mpijob()), **{n.NETWORK_ISOLATION_ANNOTATION: "false"})
    p = run(job, backend=backend)
    assert not policies(p) and st.get_condition(p.status, netpol.NOT_ISOLATED) is None
    assert not any(e.reason == netpol.R_NOT_ISOLATED for e in p.events)


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_host_network_taken_while_suspended_drops_the_policy_and_back_again(backend):
    job, obs = running_state(mpijob(), backend)
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend)
    assert obs.network_policy is not None, "a suspend keeps the policy"
    hosted = host_network(job)
    p = run(hosted, obs, backend)
    assert [(d.ref.kind, d.ref.name) for d in p.deletes] == [("NetworkPolicy", POLICY)]
    assert st.get_condition(p.status, netpol.NOT_ISOLATED)["status"] == "False"
    hosted, obs, _ = converge(hosted, obs, backend)
    plain = copy.deepcopy(hosted)
    del plain["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"]
    p = run(plain, obs, backend)
    assert policies(p) and st.get_condition(p.status, netpol.NOT_ISOLATED) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_policy_drift_is_repaired_exactly_in_one_write(backend):
    job, obs = running_state(isolated(ingress_from=json.dumps([NOTEBOOKS])), backend)
    drifted = copy.deepcopy(obs.network_policy)
    drifted["spec"]["podSelector"]["matchLabels"]["extra"] = "x"
    drifted["spec"]["policyTypes"] = ["Ingress", "Egress"]
    drifted["spec"]["ingress"] = [{"from": [{"podSelector": {}}]}, {"ports": [{"port": 22}]}]
    drifted["metadata"]["labels"] = {"someone": "else"}
    p = run(job, replace(obs, network_policy=drifted), backend)
    (patch,) = p.patches
    assert patch.ref.kind == "NetworkPolicy" and p.writes == 1
    job2, obs2 = apply_plan(job, replace(obs, network_policy=drifted), p)
    assert obs2.network_policy["spec"] == obs.network_policy["spec"]
    assert obs2.network_policy["metadata"]["labels"] == {"someone": "else", **n.job_labels(job)}
    assert run(job2, obs2, backend).writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_sources_changed_by_the_user_reach_the_policy(backend):
    job, obs = running_state(mpijob(), backend)
    more = annotated(job, **{A: json.dumps([NOTEBOOKS])})
    p = run(more, obs, backend)
    (patch,) = p.patches
    assert patch.patch == {"spec": {"ingress": [{"from": [{"podSelector": OWN}, NOTEBOOKS]}]}}


def test_isolation_diff_of_what_the_api_server_returns_is_empty():
    """The API server's copy carries what it adds (uid, resourceVersion, managedFields, a generation):
    none of it is owned, so the steady state writes nothing."""
    job = isolated(ingress_from=json.dumps([NOTEBOOKS, {"podSelector": {"matchLabels": {}}}]))
    want = netpol.network_policy(job, owner_reference(job))
    stored = copy.deepcopy(want)
    stored["metadata"].update(uid="u", resourceVersion="7", generation=1, creationTimestamp="2025-01-01T00:00:00Z",
                              managedFields=[{"manager": "mpijob-operator"}])
    assert diff(want, stored) is None


def foreign_policy(name: str = POLICY, **labels: str) -> dict:
    return {"apiVersion": netpol.API, "kind": netpol.KIND,
            "metadata": {"name": name, "namespace": "ns", "uid": "someone", "labels": labels},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_clash_a_users_policy_named_like_the_mpijob_is_not_ours_to_mind(backend):
    """Issue 42 item 1: the policy has a name of its own, so a user's NetworkPolicy `pi` (made before
    the feature) is neither a clash nor touched; ours is made beside it, and the job runs on."""
    assert netpol.network_policy(mpijob(), owner_reference(mpijob()))["metadata"]["name"] == POLICY
    job, obs = running_state(mpijob(), backend)
    users = foreign_policy("pi", **n.job_labels(mpijob()))
    p = run(job, replace(obs, network_policy=None, legacy_network_policy=users), backend)
    assert st.get_condition(p.status or job["status"], st.FAILED) is None
    assert policies(p) == [netpol.network_policy(mpijob(), owner_reference(mpijob()))]
    assert not p.deletes and not p.patches


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seen", ["cached", "found-by-the-create"])
def test_policy_clash_on_our_name_costs_isolation_never_the_run(backend, seen):
    """Issue 42 item 1: an object holding the policy's own name never fails, holds or stops the
    MPIJob (Kueue would take Failed=True as the end and release the quota while the pods run): its
    children run on, it says so once (NetworkIsolated=False/PolicyNameTaken and a Warning Event), it
    ends Succeeded with its launcher, and the policy is made once the name is free."""
    job, obs = running_state(mpijob(), backend)
    obs = replace(obs, network_policy=foreign_policy(**n.job_labels(mpijob())) if seen == "cached" else None)
    taken = seen != "cached"
    p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen(), policy_taken=taken))
    assert st.get_condition(p.status, st.FAILED) is None and st.is_true(p.status, st.RUNNING)
    c = st.get_condition(p.status, netpol.NOT_ISOLATED)
    assert (c["status"], c["reason"]) == ("False", netpol.R_NAME_TAKEN)
    assert f"NetworkPolicy ns/{POLICY}" in c["message"] and n.NETWORK_ISOLATION_ANNOTATION in c["message"]
    assert [(e.type, e.reason) for e in p.events] == [("Warning", netpol.R_NOT_ISOLATED)]
    assert not p.creates and not p.patches and not p.deletes, "the foreign object and the job's children untouched"
    job, _ = apply_plan(job, obs, p)
    again = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen(), policy_taken=taken))
    assert again.writes == 0 and not again.events, "said once"
    done, logs = exited_0(replace(obs, launcher=job_finished(obs.launcher, "Complete", succeeded=1)))
    p = plan(Inputs(job, done, Config(worker_backend=backend), NOW, KeyGen(), reports=logs, policy_taken=taken))
    assert st.is_true(p.status, st.SUCCEEDED)
    free = run(job, replace(obs, network_policy=None), backend)
    assert policies(free) and st.get_condition(free.status, netpol.NOT_ISOLATED) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_policy_clash_an_older_versions_policy_is_replaced_a_users_never_touched(backend):
    """The policy an older version made under the MPIJob's own name, controlled by the MPIJob: its
    successor created and it deleted in one apply (creates go first). The same name held by an object
    the MPIJob does not control: left alone."""
    old = netpol.network_policy(mpijob(), owner_reference(mpijob()))
    old["metadata"].update(name="pi", uid="np-old")
    old["spec"] = {"podSelector": {"matchLabels": {n.JOB_NAME_LABEL: "pi"}}, "policyTypes": ["Ingress"],
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {n.JOB_NAME_LABEL: "pi"}}}]}]}
    job, obs = running_state(mpijob(), backend)
    p = run(job, replace(obs, network_policy=None, legacy_network_policy=old), backend)
    assert [c.obj["metadata"]["name"] for c in p.creates] == [POLICY]
    assert [(d.ref.name, d.uid) for d in p.deletes] == [("pi", "np-old")]
    job, obs2 = apply_plan(job, replace(obs, network_policy=None, legacy_network_policy=old), p)
    assert obs2.legacy_network_policy is None and run(job, obs2, backend).writes == 0
    # while the new name is taken, the old policy stays, brought to the new selectors
    p = plan(Inputs(job, replace(obs, network_policy=None, legacy_network_policy=old), Config(worker_backend=backend),
                    NOW, KeyGen(), policy_taken=True))
    (patch,) = p.patches
    assert patch.ref.name == "pi" and not p.deletes
    assert merge_patch(old, patch.patch)["spec"]["podSelector"] == OWN
    users = {**old, "metadata": {**old["metadata"], "ownerReferences": []}}
    p = run(job, replace(obs, legacy_network_policy=users), backend)
    assert p.writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_a_predecessors_policy_is_waited_for_then_ours_made(backend):
    old = netpol.network_policy(mpijob(), {**owner_reference(mpijob()), "uid": "uid-old"})
    old["metadata"]["uid"] = "np-old"
    p = run(mpijob(), Observed(network_policy=old), backend)
    assert not p.creates and not p.deletes and p.requeue_after is not None
    assert st.get_condition(p.status, st.FAILED) is None
    p = run(mpijob(), Observed(), backend)
    assert policies(p)


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_policy_stays_when_the_mpijob_finishes(backend):
    job, obs = running_state(mpijob(), backend)
    obs, logs = exited_0(replace(obs, launcher=job_finished(obs.launcher, "Complete", succeeded=1)))
    job, obs, _ = converge(job, obs, backend, reports=logs)
    assert st.is_true(job["status"], st.SUCCEEDED) and obs.network_policy is not None
    missing = run(job, replace(obs, network_policy=None), backend)
    assert not missing.creates, "a finished MPIJob makes nothing new"


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_adds_one_create_per_mpijob_and_nothing_at_steady_state(backend):
    """docs/architecture.md 7.1: the writes of an MPIJob's whole life, with and without isolation
    (created, Running, Succeeded, then quiet): exactly one more, the NetworkPolicy's create."""
    def life(**config) -> tuple[int, int, list[str]]:
        job, obs, plans = converge(mpijob(), backend=backend, **config)
        ready = "readyReplicas" if obs.workers["kind"] == "StatefulSet" else "ready"
        obs = replace(obs, workers=with_status(obs.workers, **{ready: 2}),
                      launcher=with_status(obs.launcher, active=1, ready=1))
        job, obs, more = converge(job, obs, backend, **config)
        obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", succeeded=1))
        job, obs, last = converge(job, obs, backend, **config)
        all_plans = plans + more + last
        steady = run(job, obs, backend, **config)
        return (sum(p.writes for p in all_plans), sum(len(p.events) for p in all_plans) + steady.writes,
                [c.obj["kind"] for p in all_plans for c in p.creates])
    on_writes, on_rest, on_creates = life()
    off_writes, off_rest, off_creates = life(network_isolation=False)
    assert on_writes == off_writes + 1 and on_rest == off_rest
    assert sorted(on_creates) == sorted([*off_creates, "NetworkPolicy"])
