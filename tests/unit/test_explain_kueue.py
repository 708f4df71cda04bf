"""Issue 51 item 1, Kueue: an MPIJob Kueue keeps suspended says why in its Suspended condition, quoting
the Workload's conditions (reconcilers/explain/kueue.py); the Workload informer keeps only what that
needs (informers/transforms.py slim_kueue_workload)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.config import Options
from controller.executor import Executor
from controller.mpijob_controller import MPIJobController
from informers.factory import InformerFactory
from informers.transforms import slim_kueue_workload
from reconcilers import status as st
from reconcilers.explain import kueue
from tests.unit.sim import BACKENDS, apply_plan, at, converge, mpijob, run
from testsupport.fake_api import FakeApi

SHORT = ("couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor default-flavor, "
         "20m more needed")
QUOTA_FALSE = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": SHORT}


def workload(*conditions: dict, owner_uid: str = "uid-pi", queue: str | None = "team-a", **meta) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "mpijob-pi-1a2b3", "namespace": "ns", "uid": "w-uid", "resourceVersion": "9",
                     "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
                                          "uid": owner_uid, "controller": True}], **meta},
        "spec": {"queueName": queue} if queue else {},
        "status": {"conditions": list(conditions)},
    }


# -- what Kueue says (table) ------------------------------------------------------------------------


@pytest.mark.parametrize("wl, reason, says", [
    (None, None, []),
    (workload(), None, []),  # Kueue has not looked at it yet: nothing to quote
    (workload(QUOTA_FALSE), "QuotaNotReserved",
     ["Kueue has not admitted it: Workload mpijob-pi-1a2b3 (LocalQueue team-a): QuotaReserved=False (Pending): "
      + SHORT]),
    (workload(QUOTA_FALSE, queue=None), "QuotaNotReserved", ["Workload mpijob-pi-1a2b3: QuotaReserved=False"]),
    (workload({"type": "QuotaReserved", "status": "False", "reason": "Inadmissible",
               "message": "ClusterQueue cq-a is inactive"}), "QuotaNotReserved",
     ["QuotaReserved=False (Inadmissible): ClusterQueue cq-a is inactive"]),
    (workload({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
               "message": "Quota reserved in ClusterQueue cq-a"},
              {"type": "Admitted", "status": "False", "reason": "NoChecks",
               "message": "The workload has not all checks ready"}), "NotAdmitted",
     ["Admitted=False (NoChecks): The workload has not all checks ready"]),
    (workload({"type": "Evicted", "status": "True", "reason": "Preempted",
               "message": "Preempted to accommodate a workload (UID: x) due to prioritization in the ClusterQueue"},
              QUOTA_FALSE), "QuotaNotReserved",
     ["Evicted=True (Preempted): Preempted to accommodate", "; QuotaReserved=False (Pending): " + SHORT]),
    (workload({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "reserved"},
              {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted"}), None, []),
])
def test_explain_kueue_hold_quotes_the_workload(wl, reason, says):
    got = kueue.hold(wl)
    if reason is None:
        assert got is None
        return
    assert got is not None and got[0] == reason
    for s in says:
        assert s in got[1], got[1]


@pytest.mark.parametrize("workloads, want", [
    ([], None),
    ([workload(owner_uid="uid-other")], None),  # a namesake's, gone before
    ([workload(deletionTimestamp="2025-01-01T12:00:00Z")], None),
    ([workload(owner_uid="uid-other"), workload(QUOTA_FALSE)], 1),
])
def test_explain_kueue_owned_workload_by_uid(workloads, want):
    got = kueue.owned_workload(workloads, "uid-pi")
    assert got is (None if want is None else workloads[want])


def test_explain_kueue_transform_keeps_only_what_is_read():
    full = workload(dict(QUOTA_FALSE, lastTransitionTime="2025-01-01T12:00:00Z", observedGeneration=1),
                    managedFields=[{"manager": "kueue"}], labels={"kueue.x-k8s.io/job-uid": "uid-pi"})
    full["spec"]["podSets"] = [{"name": "worker", "count": 2, "template": {"spec": {"containers": [{}]}}}]
    full["status"]["resourceRequests"] = [{"name": "worker", "resources": {"cpu": "20m"}}]
    slim = slim_kueue_workload(full)
    assert slim["spec"] == {"queueName": "team-a"}
    assert slim["status"] == {"conditions": [QUOTA_FALSE]}
    assert set(slim["metadata"]) == {"name", "namespace", "uid", "resourceVersion", "ownerReferences"}
    assert kueue.hold(slim) == kueue.hold(full)
    assert "podSets" in full["spec"]  # its argument is not modified


# -- the plan: the Suspended condition ---------------------------------------------------------------


def _suspended(backend: str):
    job = mpijob(run_policy={"suspend": True})
    job, obs, _ = converge(job, backend=backend)
    assert st.get_condition(job["status"], st.SUSPENDED)["reason"] == st.R_SUSPENDED
    return job, obs


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_kueue_suspended_says_why_once_and_keeps_the_state(backend):
    job, obs = _suspended(backend)
    p = run(job, replace(obs, kueue_workload=workload(QUOTA_FALSE)), backend)
    c = st.get_condition(p.status, st.SUSPENDED)
    assert c["status"] == "True" and c["reason"] == "QuotaNotReserved"
    assert c["message"] == ("MPIJob ns/pi is suspended: Kueue has not admitted it: Workload mpijob-pi-1a2b3 "
                            f"(LocalQueue team-a): QuotaReserved=False (Pending): {SHORT}")
    assert st.conditions_of(p.status)[-1]["type"] == st.SUSPENDED  # the State column, Kueue's reason beside it
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "QuotaNotReserved")]
    assert p.writes == 1  # the status (and its Event)
    job, obs = apply_plan(job, replace(obs, kueue_workload=workload(QUOTA_FALSE)), p)
    # steady state: the same words, nothing written
    again = run(job, obs, backend, now=at(30))
    assert again.writes == 0 and not again.events
    # Kueue rewords (another amount short): the condition follows, without an Event
    more = dict(QUOTA_FALSE, message=SHORT.replace("20m", "30m"))
    p = run(job, replace(obs, kueue_workload=workload(more)), backend, now=at(40))
    assert "30m more needed" in st.get_condition(p.status, st.SUSPENDED)["message"] and not p.events
    assert st.get_condition(p.status, st.SUSPENDED)["lastTransitionTime"] == c["lastTransitionTime"]


def test_explain_kueue_no_workload_reads_as_before():
    job, obs = _suspended("job")
    p = run(job, replace(obs, kueue_workload=workload()))
    assert p.writes == 0  # Kueue said nothing yet: the suspend reads MPIJobSuspended, unchanged


def test_explain_kueue_admitted_resumes():
    job, obs = _suspended("job")
    job, obs = apply_plan(job, obs, run(job, replace(obs, kueue_workload=workload(QUOTA_FALSE))))
    job["spec"]["runPolicy"]["suspend"] = False
    admitted = workload({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
                        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"})
    p = run(job, replace(obs, kueue_workload=admitted))
    c = st.get_condition(p.status, st.SUSPENDED)
    assert c["status"] == "False" and c["reason"] == st.R_RESUMED


# -- the informer: served only, its changes queue the owner, the plan sees the owned one -------------


@pytest.mark.parametrize("served", [True, False])
def test_explain_kueue_workloads_watched_when_served_and_queue_their_mpijob(served):
    api = FakeApi()
    factory = InformerFactory(api, namespace="ns")
    ctrl = MPIJobController(Options(worker_backend="job"), factory,
                            Executor(api, is_leader=lambda: True, component="mpi-operator", instance="t"),
                            kueue_served=served)
    watched = {(inf.resource.group, inf.resource.plural, inf.reflector.label_selector) for inf in factory.informers()}
    assert (("kueue.x-k8s.io", "workloads", "") in watched) is served
    if not served:
        assert ctrl.observed(mpijob()).kueue_workload is None
        ctrl.queue.shutdown()
        return
    ctrl._active = True
    ctrl.mpijobs.store.add(mpijob())
    pending = slim_kueue_workload(workload(QUOTA_FALSE))
    ctrl.kueue_workloads.store.add(pending)
    assert ctrl.observed(mpijob()).kueue_workload == pending
    for h in ctrl.kueue_workloads.handlers:
        h.on_update(pending, {**pending, "metadata": {**pending["metadata"], "resourceVersion": "10"}})
    assert len(ctrl.queue) == 0  # nothing Kueue says changed: no reconcile
    for h in ctrl.kueue_workloads.handlers:
        h.on_update(pending, slim_kueue_workload(workload(dict(QUOTA_FALSE, message="other"))))
    assert ctrl.queue.get(timeout=1)[0] == "ns/pi"
    ctrl.queue.shutdown()
