"""plan() on the failure paths real clusters take: a worker whose sshd exits 0 when stopped, a resume
after such a stop, a name reused at once, a backend switch, template keys that go away, and a
resume under WaitForWorkersReady."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from reconcilers import names as n
from reconcilers import status as st
from reconcilers.types import Observed
from tests.unit.sim import (
    apply_plan,
    at,
    converge,
    job_finished,
    mpijob,
    pod,
    run,
    running_state,
    with_status,
    workers_ready,
)


def cond(status, ctype):
    return st.get_condition(status, ctype)


def deletes(p) -> list[tuple[str, str, str]]:
    return [(d.ref.kind, d.ref.name, d.propagation) for d in p.deletes]


def suspended_then_stopped(job, obs, backend, **worker_status):
    """Suspended (Kueue's preemption), and what the controllers then did: every pod stopped; for the
    Job backend, each stopped sshd exited 0, so the Indexed Job counts its indexes as completed."""
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend, now=at(100))
    ready = "readyReplicas" if backend == "statefulset" else "ready"
    obs = replace(obs, pods=[], workers=with_status(obs.workers, **{ready: 0}, **worker_status),
                  launcher=with_status(obs.launcher, active=0, ready=0) if obs.launcher else None)
    job, obs, _ = converge(job, obs, backend, now=at(101))
    return job, obs


# -- 1. a lost worker of the Job backend -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["pod-succeeded", "completed-index", "job-complete"])
def test_a_worker_that_ended_succeeded_makes_the_worker_job_recreated(how):
    job, obs = running_state(mpijob(), "job")
    if how == "pod-succeeded":  # the pod informer saw it before the Job controller counted it
        ended = pod(job, "worker", 0, phase="Succeeded")  # deleted: one that exits by itself is paced
        ended["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:39Z"  # (tests/unit/test_worker_exit_loop.py)
        obs = replace(obs, pods=[ended, *obs.pods[2:]])
    elif how == "completed-index":
        obs = replace(obs, workers=with_status(obs.workers, succeeded=1, completedIndexes="0", ready=1))
    else:
        obs = replace(obs, workers=with_status(obs.workers, succeeded=2, completedIndexes="0-1", ready=0,
                                               conditions=[{"type": "Complete", "status": "True"}]))
    obs = workers_ready(obs, 1) if how != "job-complete" else obs
    p = run(job, obs, now=at(10))
    # Background: the Job goes at once, its pods stop beside the new one (children.workers_leaving)
    assert deletes(p) == [("Job", "pi-worker", "Background")]
    assert p.deletes[0].uid == obs.workers["metadata"]["uid"]
    assert cond(p.status, st.RESTARTING)["status"] == "True"
    assert not p.creates
    # a deletion under way (someone's Foreground one: the Job stays until its pods are gone): nothing more
    deleting = copy.deepcopy(obs.workers)
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:11Z"
    job["status"] = p.status
    again = run(job, replace(obs, workers=deleting), now=at(11))
    assert not again.deletes and not again.creates
    assert not [x for x in again.patches if x.ref.name == "pi-worker"]
    # gone: created afresh, every index runs again
    p = run(job, replace(obs, workers=None, pods=[]), now=at(12))
    (create,) = [c.obj for c in p.creates]
    assert (create["kind"], create["metadata"]["name"], create["spec"]["suspend"]) == ("Job", "pi-worker", False)


def test_the_plan_that_sees_a_worker_pod_deleted_says_restarting_though_the_jobs_ready_count_lags():
    """Worker 0's pod being deleted, the worker Job's `ready` still 2 (the Job controller writes it
    later): that plan deletes the worker Job (it goes at once) and says Restarting, naming the worker;
    the passes after it see the old pods as another Job's, so it is this one that must say it."""
    job, obs = running_state(mpijob(), "job")
    going = copy.deepcopy(obs.pods[1])
    going["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:10Z"
    obs = workers_ready(replace(obs, pods=[obs.pods[0], going, *obs.pods[2:]]), 2)
    p = run(job, obs, now=at(10))
    assert deletes(p) == [("Job", "pi-worker", "Background")]
    restarting = cond(p.status, st.RESTARTING)
    assert restarting["status"] == "True", p.status
    assert "worker pi-worker-0 (pod pi-worker-0-xyz) was lost (deleted)" in restarting["message"], p.status
    assert (cond(p.status, st.RUNNING) or {}).get("status") != "True", p.status


def test_a_lost_worker_of_the_statefulset_backend_is_left_to_the_statefulset():
    job, obs = running_state(mpijob(), "statefulset")
    gone = tuple(obs.pods[2:])  # worker 1's delete, as the pod informer told it
    obs = workers_ready(replace(obs, pods=obs.pods[:2]), 1)
    p = run(job, obs, backend="statefulset", now=at(10), gone_workers=gone)
    assert not p.deletes and not p.creates
    assert cond(p.status, st.RESTARTING)["status"] == "True"
    assert "worker pi-worker-1 (pod pi-worker-1) was lost" in cond(p.status, st.RESTARTING)["message"]


def test_a_finished_mpijob_never_recreates_its_workers():
    job, obs = running_state(mpijob(), "job")
    job["status"]["conditions"].append({"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded"})
    obs = replace(obs, workers=with_status(obs.workers, succeeded=2, completedIndexes="0-1"))
    p = run(job, obs, now=at(10))
    assert not p.deletes and not p.creates


def test_resume_after_the_workers_exited_0_recreates_them_even_with_the_same_template():
    job, obs = running_state(mpijob(), "job")
    job, obs = suspended_then_stopped(job, obs, "job", succeeded=2, completedIndexes="0-1")
    job["spec"]["runPolicy"]["suspend"] = False
    p = run(job, obs, now=at(200))
    assert ("Job", "pi-worker", "Background") in deletes(p)
    job, obs = apply_plan(job, obs, p)
    job, obs, _ = converge(job, obs, "job", now=at(201))
    assert obs.workers["spec"]["suspend"] is False and "status" not in obs.workers


def test_resume_without_completed_indexes_unsuspends_in_place():
    job, obs = running_state(mpijob(), "job")
    job, obs = suspended_then_stopped(job, obs, "job", failed=2)  # the image's sshd exits non-zero
    job["spec"]["runPolicy"]["suspend"] = False
    p = run(job, obs, now=at(200))
    assert not p.deletes
    assert {"spec": {"suspend": False}} in [x.patch for x in p.patches]


# -- 2. delete and re-create under one name --------------------------------------------------------------------------


def test_a_predecessors_pods_still_stopping_hold_back_the_new_launcher_and_the_workers_names():
    """A deleted predecessor's pods still stopping: the Service is made selecting the launcher alone;
    once it is seen so, the worker Job is made beside them (its pods' names stay out of DNS until
    every old worker ended: docs/architecture.md section 11), the launcher Job once the old launcher
    pod ended (it would share its hostname, which no Service narrows), every pod selected again once
    the old workers ended."""
    old = mpijob(uid="uid-old")
    _j, old_obs = running_state(old, "job")
    old_pods = [{**p_, "metadata": {**p_["metadata"], "ownerReferences": [
        {**p_["metadata"]["ownerReferences"][0], "uid": "uid-of-the-old-job"}]}} for p_ in old_obs.pods]
    fresh = mpijob(uid="uid-new")
    p = run(fresh, Observed(pods=old_pods))
    kinds = sorted(c.obj["kind"] for c in p.creates)
    assert kinds == ["ConfigMap", "NetworkPolicy", "Secret", "Service"], kinds  # no worker Job or launcher yet
    assert p.requeue_after == 1.0
    assert p.status["replicaStatuses"]["Worker"]["active"] == 0  # the old pods are not counted
    service = next(c.obj for c in p.creates if c.obj["kind"] == "Service")
    assert service["spec"]["selector"].get(n.JOB_ROLE_LABEL) == n.ROLE_LAUNCHER, service
    job, obs = apply_plan(fresh, Observed(pods=old_pods), p)
    p = run(job, obs)
    assert [c.obj["metadata"]["name"] for c in p.creates] == ["pi-worker"], p.creates
    job, obs = apply_plan(job, obs, p)
    stopped = [with_status(x, phase="Succeeded") for x in old_pods]
    p = run(job, replace(obs, pods=stopped))
    assert [c.obj["metadata"]["name"] for c in p.creates] == ["pi-launcher"], p.creates
    assert [x.patch["spec"]["selector"] for x in p.patches if x.ref.kind == "Service"] == [
        {n.JOB_ROLE_LABEL: None}], p.patches


# -- 3. the backend an MPIJob started with ---------------------------------------------------------------------------


@pytest.mark.parametrize("started,flag", [("statefulset", "job"), ("job", "statefulset")])
def test_an_mpijob_keeps_the_backend_it_started_with(started, flag):
    job, obs = running_state(mpijob(), started)
    p = run(job, obs, backend=flag, now=at(10))
    assert p.writes == 0, p
    # its ConfigMap records the backend: kept while the workers are away too
    assert obs.config_map["metadata"]["annotations"][n.BACKEND_ANNOTATION] == started
    p = run(job, replace(obs, workers=None), backend=flag, now=at(11))
    (create,) = [c.obj for c in p.creates]
    assert create["kind"] == ("StatefulSet" if started == "statefulset" else "Job")


@pytest.mark.parametrize("value,kind", [("statefulset", "StatefulSet"), ("job", "Job")])
def test_the_mpijob_annotation_chooses_over_the_flag(value, kind):
    job = mpijob()
    job["metadata"]["annotations"] = {n.BACKEND_ANNOTATION: value}
    flag = "job" if value == "statefulset" else "statefulset"
    _job, obs, _ = converge(job, backend=flag)
    assert obs.workers["kind"] == kind


def test_an_unknown_backend_annotation_is_invalid():
    job = mpijob()
    job["metadata"]["annotations"] = {n.BACKEND_ANNOTATION: "deployment"}
    p = run(job)
    failed = cond(p.status, st.FAILED)
    assert failed["reason"] == "InvalidSpec" and n.BACKEND_ANNOTATION in failed["message"]
    assert not p.creates


def test_a_second_set_of_workers_of_the_other_kind_is_removed():
    job, obs = running_state(mpijob(), "job")
    _j, sts_obs = running_state(mpijob(), "statefulset")
    sts = copy.deepcopy(sts_obs.workers)
    sts["metadata"]["creationTimestamp"] = "2025-01-01T12:01:00Z"
    obs.workers["metadata"]["creationTimestamp"] = "2025-01-01T12:00:00Z"
    p = run(job, replace(obs, other_workers=sts), backend="statefulset", now=at(10))
    assert deletes(p) == [("StatefulSet", "pi-worker", "Foreground")]
    assert not p.creates


# -- 4. template keys that go away -----------------------------------------------------------------------------------


def test_a_statefulset_template_loses_the_keys_the_mpijob_template_lost():
    """Kueue re-admits a suspended MPIJob on another flavor: one nodeSelector key replaced by another."""
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"flavor-a": "x"}
    job, obs = running_state(job, "statefulset")
    job, obs = suspended_then_stopped(job, obs, "statefulset")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"flavor-b": "y"}
    job["spec"]["runPolicy"]["suspend"] = False
    p = run(job, obs, backend="statefulset", now=at(200))
    (patch,) = [x.patch for x in p.patches if x.ref.kind == "StatefulSet"]
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {"flavor-a": None, "flavor-b": "y"}
    job, obs = apply_plan(job, obs, p)
    assert obs.workers["spec"]["template"]["spec"]["nodeSelector"] == {"flavor-b": "y"}


# -- 5. resume under WaitForWorkersReady -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["job", "statefulset"])
def test_resume_with_wait_for_workers_ready_holds_the_launcher_until_they_are(backend):
    job, obs, _ = converge(mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"}), backend=backend)
    job, obs, _ = converge(job, workers_ready(obs, 2), backend)
    obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                  pods=[pod(job, "launcher")] + [pod(job, "worker", i, backend=backend) for i in range(2)])
    job, obs, _ = converge(job, obs, backend)
    assert cond(job["status"], st.RUNNING)["status"] == "True"
    job, obs = suspended_then_stopped(job, obs, backend)
    job["spec"]["runPolicy"]["suspend"] = False
    # the suspend deleted the launcher Job that had run (afresh.stop_for_suspend): the resume makes it
    # afresh, once every worker is Ready
    job, obs, _ = converge(job, obs, backend, now=at(200))
    assert obs.launcher is None, "launcher made with 0 workers Ready"
    obs = workers_ready(obs, 1)
    p = run(job, obs, backend=backend, now=at(201))
    assert not [x for x in p.patches if x.ref.name == "pi-launcher"] and not p.creates
    obs = workers_ready(obs, 2)
    p = run(job, obs, backend=backend, now=at(202))
    (made,) = [c.obj for c in p.creates if c.obj["metadata"]["name"] == "pi-launcher"]
    assert made["spec"].get("suspend") in (None, False)


def test_a_name_the_last_apply_found_taken_is_reported_until_it_is_free():
    """An object without our labels is invisible to the caches: the controller passes what the create
    met (Inputs.taken) while that object exists."""
    from reconcilers.plan import plan
    from reconcilers.types import Config, Inputs
    from tests.unit.sim import NOW, KeyGen

    job = mpijob()
    msg = "ConfigMap ns/pi-config already exists and is not controlled by MPIJob ns/pi; delete or rename it"
    p = plan(Inputs(job, Observed(), Config(), NOW, KeyGen(), taken=msg))
    failed = cond(p.status, st.FAILED)
    assert (failed["reason"], failed["message"]) == ("ResourceExists", msg)
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "MPIJobCreated"), ("Warning", "ResourceExists")]
    assert not p.creates
    job["status"] = p.status
    p = plan(Inputs(job, Observed(), Config(), NOW, KeyGen()))
    assert cond(p.status, st.FAILED) is None and len(p.creates) == 6


@pytest.mark.parametrize("conds,suspended,expect", [
    ([], False, None),
    ([{"type": "Created", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"}], False,
     "2025-01-01T12:00:00+00:00"),
    ([{"type": "Created", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"},
      {"type": "Running", "status": "True", "lastTransitionTime": "2025-01-01T12:01:00Z"}], False, None),
    ([{"type": "Created", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"},
      {"type": "Restarting", "status": "True", "lastTransitionTime": "2025-01-01T12:05:00Z"}], False,
     "2025-01-01T12:05:00+00:00"),
    ([{"type": "Created", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"}], True, None),
    ([{"type": "Succeeded", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"}], False, None),
])
def test_not_running_since_for_the_stuck_job_alert(conds, suspended, expect):
    got = st.not_running_since({"conditions": conds}, suspended)
    assert (got.isoformat() if got else None) == expect


# -- a launcher that exits 0 although a worker was lost (Open MPI 5) --------------------------------


def _launcher_done(job, started: str, finished: str) -> dict:
    return pod(job, "launcher", phase="Succeeded", startTime=started, containerStatuses=[
        {"name": "launcher", "state": {"terminated": {"exitCode": 0, "finishedAt": finished}}}])


def _worker_lost_then_launcher_exits_0(impl, backend, started="2025-01-01T12:00:00Z", lost_at=20,
                                       finished="2025-01-01T12:00:21Z"):
    """Running; worker 0 deleted at `lost_at` s (seen by the operator); then the launcher pod
    started at `started` ends Succeeded at `finished` and its Job completes."""
    job, obs = running_state(mpijob(spec={"mpiImplementation": impl}), backend)
    deleting = copy.deepcopy(obs.pods)
    deleting[1]["metadata"]["deletionTimestamp"] = st.fmt_time(at(lost_at))
    obs = workers_ready(replace(obs, pods=deleting), 1)
    job, obs = apply_plan(job, obs, run(job, obs, backend, now=at(lost_at)))
    assert cond(job["status"], st.RESTARTING)["status"] == "True"
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", when=finished, succeeded=1, active=0),
                  pods=[_launcher_done(job, started, finished), *obs.pods[1:]])
    return job, run(job, obs, backend, now=at(lost_at + 2))


def test_hydra_launcher_exiting_0_after_a_lost_worker_is_trusted():
    """MPICH and Intel MPI fail on a lost host (the Job retries): an exit 0 is theirs to give."""
    _, p = _worker_lost_then_launcher_exits_0("MPICH", "job")
    assert cond(p.status, st.SUCCEEDED)["status"] == "True" and cond(p.status, st.FAILED) is None
