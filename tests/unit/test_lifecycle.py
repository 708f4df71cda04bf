"""The lifecycle of plan(), row by row, for both worker backends."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from reconcilers import names as n
from reconcilers import status as st
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed
from tests.unit.sim import (
    BACKENDS,
    NOW,
    KeyGen,
    apply_plan,
    at,
    converge,
    exited_0,
    job_finished,
    mpijob,
    pod,
    run,
    running_state,
    with_status,
    workers_ready,
)

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def kinds(p) -> list[str]:
    return [f"{c.obj['kind']}/{c.obj['metadata']['name']}" for c in p.creates]


def cond(job_or_status, ctype):
    status = job_or_status.get("status", job_or_status) if "conditions" not in job_or_status else job_or_status
    return st.get_condition(status, ctype)


def events(p) -> list[str]:
    return [e.reason for e in p.events]


def worker_kind(backend):
    return "StatefulSet" if backend == "statefulset" else "Job"


def stopped_by_controllers(obs):
    """What the Job/StatefulSet controllers do with suspended Jobs and a StatefulSet at 0."""
    ready = "readyReplicas" if obs.workers["kind"] == "StatefulSet" else "ready"
    return replace(obs, pods=[], workers=with_status(obs.workers, **{ready: 0}),
                   launcher=with_status(obs.launcher, active=0, ready=0) if obs.launcher else None)


def workers_stopped(obs) -> bool:
    w = obs.workers
    return w["spec"]["replicas"] == 0 if w["kind"] == "StatefulSet" else w["spec"]["suspend"] is True


# -- hands off ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("managed_by", ["kueue.x-k8s.io/multikueue", "example.com/other"])
def test_not_ours_gives_an_empty_plan(backend, managed_by):
    p = run(mpijob(run_policy={"managedBy": managed_by}), backend=backend)
    assert p.writes == 0 and not p.events and p.requeue_after is None


def test_ours_when_managed_by_is_the_controller_name(backend):
    p = run(mpijob(run_policy={"managedBy": "kubeflow.org/mpi-operator"}), backend=backend)
    assert p.creates


def test_custom_controller_name(backend):
    job = mpijob(run_policy={"managedBy": "example.com/mine"})
    assert run(job, backend=backend, controller_name="example.com/mine").creates
    assert run(job, backend=backend).writes == 0


def test_deleting_gives_an_empty_plan(backend):
    job = mpijob()
    job["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert run(job, backend=backend).writes == 0


# -- invalid --------------------------------------------------------------------------------------------


def test_invalid_spec_fails_with_an_event_and_no_children(backend):
    job = mpijob(name="x" * 60)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    p = run(job, backend=backend)
    assert not p.creates and not p.patches and not p.deletes
    c = cond(p.status, st.FAILED)
    assert c["status"] == "True" and c["reason"] == "InvalidSpec"
    assert "spec.mpiReplicaSpecs.Launcher.replicas" in c["message"] and "metadata.name" in c["message"]
    (ev,) = p.events
    assert ev.type == "Warning" and ev.reason == "InvalidSpec"
    assert "spec.mpiReplicaSpecs.Launcher.replicas" in ev.message and "metadata.name" in ev.message
    job, obs = apply_plan(job, Observed(), p)
    again = run(job, obs, backend=backend)
    assert again.writes == 0 and not again.events


def test_fixed_spec_clears_invalid_and_runs(backend):
    job = mpijob()
    job["spec"]["slotsPerWorker"] = 0
    p = run(job, backend=backend)
    job["status"] = p.status
    job["spec"]["slotsPerWorker"] = 1
    p = run(job, backend=backend)
    assert cond(p.status, st.FAILED) is None and p.creates


# -- creation -------------------------------------------------------------------------------------------


def test_creates_every_child_at_startup(backend):
    keygen = KeyGen()
    p = run(mpijob(), backend=backend, keygen=keygen)
    assert kinds(p) == ["Service/pi", "ConfigMap/pi-config", "Secret/pi-ssh", "NetworkPolicy/pi-mpijob-isolation",
                        f"{worker_kind(backend)}/pi-worker", "Job/pi-launcher"]
    assert keygen.calls == 1
    assert cond(p.status, st.CREATED)["reason"] == "MPIJobCreated"
    assert p.status["startTime"] == "2025-01-01T12:00:00Z"
    assert events(p) == ["MPIJobCreated"]


def test_applying_a_plan_then_planning_again_writes_nothing(backend):
    keygen = KeyGen()
    job, obs, plans = converge(mpijob(), backend=backend)
    assert len(plans) == 2 and plans[-1].writes == 0 and not plans[-1].events
    assert run(job, obs, backend=backend, keygen=keygen).writes == 0
    assert keygen.calls == 0  # the key pair is never regenerated


def test_missing_children_are_recreated(backend):
    job, obs, _ = converge(mpijob(), backend=backend)
    p = run(job, replace(obs, config_map=None, service=None), backend=backend)
    assert kinds(p) == ["Service/pi", "ConfigMap/pi-config"] and not p.patches


def test_wait_for_workers_ready_creates_the_launcher_only_then(backend):
    job = mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"})
    job, obs, _ = converge(job, backend=backend)
    assert obs.launcher is None and obs.workers is not None
    obs = workers_ready(obs, 1)
    assert not run(job, obs, backend=backend).creates
    obs = workers_ready(obs, 2)
    assert kinds(run(job, obs, backend=backend)) == ["Job/pi-launcher"]


def test_wait_for_workers_ready_and_suspend_never_starts_the_launcher(backend):
    """Upstream #615: the launcher was created (and unsuspended) early."""
    job = mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"}, run_policy={"suspend": True})
    job, obs, _plans = converge(job, backend=backend)
    assert obs.launcher is None and obs.workers is None
    assert cond(job, st.SUSPENDED)["status"] == "True"
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, _ = converge(job, obs, backend)
    assert obs.launcher is None and obs.workers is not None
    assert kinds(run(job, workers_ready(obs, 2), backend=backend)) == ["Job/pi-launcher"]


def test_zero_workers(backend):
    _job, obs, _ = converge(mpijob(workers=0, spec={"launcherCreationPolicy": "WaitForWorkersReady"}),
                           backend=backend)
    assert obs.launcher is not None
    assert (obs.workers is not None) == (backend == "statefulset")


# -- running / restarting ---------------------------------------------------------------------------------


def test_running_when_the_launcher_runs_and_workers_are_ready(backend):
    job, obs, _plans = converge(mpijob(), backend=backend)
    obs = workers_ready(obs, 2)
    obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=1), pods=[pod(job, "launcher")])
    p = run(job, obs, backend=backend)
    assert cond(p.status, st.RUNNING)["status"] == "True" and events(p) == ["MPIJobRunning"]
    assert p.status["replicaStatuses"]["Launcher"]["active"] == 1
    job, obs = apply_plan(job, obs, p)
    again = run(job, obs, backend=backend, now=at(60))
    assert again.writes == 0 and not again.events


def test_not_running_until_every_worker_is_ready(backend):
    job, obs, _ = converge(mpijob(), backend=backend)
    obs = replace(workers_ready(obs, 1), launcher=with_status(obs.launcher, ready=1))
    assert cond(run(job, obs, backend=backend).status or job["status"], st.RUNNING) is None


def test_restarting_when_the_launcher_failed_and_retries(backend):
    job, obs = running_state(mpijob(), backend)
    obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=0, failed=1),
                  pods=[pod(job, "launcher", phase="Failed"),
                        *[p for p in obs.pods if "worker" in p["metadata"]["name"]]])
    p = run(job, obs, backend=backend)
    assert cond(p.status, st.RESTARTING)["status"] == "True"
    assert cond(p.status, st.RUNNING) is None  # Running and Restarting exclude each other
    assert "MPIJobRestarting" in events(p)
    # the retry runs: Running again
    job, obs = apply_plan(job, obs, p)
    obs = replace(obs, launcher=with_status(obs.launcher, ready=1),
                  pods=[*obs.pods, pod(job, "launcher", index=1)])
    p = run(job, obs, backend=backend)
    assert cond(p.status, st.RUNNING)["status"] == "True" and cond(p.status, st.RESTARTING) is None


def test_a_retry_that_succeeded_is_not_restarting_before_the_job_counts_it(backend):
    """The retried launcher pod Succeeded but the Job controller has not counted it yet
    (status.failed=1, succeeded=0, no active pod): no spurious Restarting on the way to Succeeded."""
    job, obs = running_state(mpijob(), backend)
    workers = [p for p in obs.pods if "worker" in p["metadata"]["name"]]
    obs = replace(obs, launcher=with_status(obs.launcher, active=0, ready=0, failed=1),
                  pods=[pod(job, "launcher", phase="Failed"), pod(job, "launcher", index=1, phase="Succeeded"),
                        *workers])
    p = run(job, obs, backend=backend)
    assert cond(p.status or job["status"], st.RESTARTING) is None
    assert "MPIJobRestarting" not in events(p)


def test_restarting_when_a_worker_is_lost(backend):
    job, obs = running_state(mpijob(), backend)
    obs = workers_ready(obs, 1)
    gone = tuple(x for x in obs.pods if x["metadata"]["name"].startswith("pi-worker-1"))  # its delete event
    obs = replace(obs, pods=[x for x in obs.pods if not x["metadata"]["name"].startswith("pi-worker-1")])
    p = run(job, obs, backend=backend, gone_workers=gone)
    assert cond(p.status, st.RESTARTING)["status"] == "True"


def test_a_ready_count_that_falls_is_no_restart(backend):
    """A node that misses heartbeats (its pods' Ready False while they run on), a flapping readiness
    probe: the Ready count falls with no pod lost. No Restarting, nothing written (section 9.1)."""
    job, obs = running_state(mpijob(), backend)
    p = run(job, workers_ready(obs, 0), backend=backend)
    assert p.status is None or cond(p.status, st.RESTARTING) is None, p.status
    assert st.is_true(job["status"], st.RUNNING)


# -- finished ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["Running", "All", "None"])
def test_succeeded_stops_workers_per_clean_pod_policy(backend, policy):
    job, obs = running_state(mpijob(run_policy={"cleanPodPolicy": policy}), backend)
    obs, logs = exited_0(replace(obs, launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0)))
    p = run(job, obs, backend=backend, now=at(400), reports=logs)
    c = cond(p.status, st.SUCCEEDED)
    assert c["status"] == "True" and c["reason"] == "MPIJobSucceeded"
    assert p.status["completionTime"] == "2025-01-01T12:05:00Z"
    assert cond(p.status, st.RUNNING)["status"] == "False"
    assert events(p) == ["MPIJobSucceeded"]
    job2, obs2 = apply_plan(job, obs, p)
    assert workers_stopped(obs2) == (policy != "None")
    launcher_pods = [x for x in obs2.pods if x["metadata"]["name"].startswith("pi-launcher")]
    assert bool(launcher_pods) == (policy != "All")  # upstream #643: All covers the launcher's pod too
    if policy == "None":
        assert not p.patches and not p.deletes
    assert run(job2, obs2, backend=backend, now=at(500), reports=logs).writes == 0


@pytest.mark.parametrize("reason", ["BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy"])
def test_failed_from_the_launcher_job_with_its_reason(backend, reason):
    job, obs = running_state(mpijob(), backend)
    failed_pod = pod(job, "launcher", phase="Failed", reason="Error", message="mpirun exited 1")
    obs = replace(obs, launcher=job_finished(obs.launcher, "Failed", reason, failed=7, active=0),
                  pods=[failed_pod, *obs.pods[1:]])
    p = run(job, obs, backend=backend, now=at(400))
    c = cond(p.status, st.FAILED)
    assert c["status"] == "True" and c["reason"] == reason
    if reason == "BackoffLimitExceeded":
        assert "pi-launcher-abc0" in c["message"] and "mpirun exited 1" in c["message"]
    assert p.status["completionTime"] == "2025-01-01T12:05:00Z"
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "MPIJobFailed")] and reason in p.events[0].message
    _, obs2 = apply_plan(job, obs, p)
    assert workers_stopped(obs2)  # upstream #647: a failed job is cleaned up too


def test_failed_before_ever_running_records_running_false(backend):
    job, obs, _ = converge(mpijob(), backend=backend)
    obs = replace(obs, launcher=job_finished(obs.launcher, "Failed", "BackoffLimitExceeded"))
    p = run(job, obs, backend=backend)
    assert cond(p.status, st.RUNNING)["status"] == "False"


def test_finished_creates_nothing_even_if_children_vanish(backend):
    job, obs = running_state(mpijob(), backend)
    obs, logs = exited_0(replace(obs, launcher=job_finished(obs.launcher, "Complete")))
    job, obs, _ = converge(job, obs, backend, now=at(400), reports=logs)
    assert run(job, replace(obs, launcher=None, config_map=None, workers=None), backend=backend).writes == 0


# -- suspend / resume ------------------------------------------------------------------------------------------


def test_suspend_stops_every_pod_and_resume_starts_afresh(backend):
    job, obs = running_state(mpijob(), backend)
    job["spec"]["runPolicy"]["suspend"] = True
    p = run(job, obs, backend=backend, now=at(100))
    assert cond(p.status, st.SUSPENDED)["status"] == "True"
    assert cond(p.status, st.RUNNING) == {**cond(p.status, st.RUNNING), "status": "False", "reason": "MPIJobSuspended"}
    assert events(p) == ["MPIJobSuspended"]
    # the launcher Job that ran is deleted, not suspended: its attempt is neither a finish nor a
    # failure, and the resume makes it afresh (afresh.stop_for_suspend)
    assert [(d.ref.kind, d.ref.name, d.propagation) for d in p.deletes] == [("Job", "pi-launcher", "Foreground")]
    assert not [x for x in p.patches if x.ref.name == "pi-launcher"]
    job, obs = apply_plan(job, obs, p)
    assert obs.launcher is None and workers_stopped(obs)
    obs = stopped_by_controllers(obs)
    p = run(job, obs, backend=backend, now=at(101))  # discover_hosts.sh and replicaStatuses: nothing runs
    assert [x.ref.kind for x in p.patches] == ["ConfigMap"] and not p.creates and not p.events
    job, obs, _ = converge(job, obs, backend, now=at(101))
    # resume: the workers unsuspended in place, the launcher Job made afresh
    job["spec"]["runPolicy"]["suspend"] = False
    p = run(job, obs, backend=backend, now=at(200))
    resumed = cond(p.status, st.SUSPENDED)
    assert (resumed["status"], resumed["reason"]) == ("False", "MPIJobResumed")
    assert p.status["startTime"] == "2025-01-01T12:03:20Z"
    assert events(p) == ["MPIJobResumed"] and not p.deletes
    assert [c.obj["metadata"]["name"] for c in p.creates] == ["pi-launcher"]
    job, obs = apply_plan(job, obs, p)
    assert not obs.launcher["spec"].get("suspend") and not workers_stopped(obs)


def test_template_changes_made_while_suspended_reach_the_children(backend):
    """Kueue's protocol: admission injects a nodeSelector into the suspended MPIJob, then resumes it."""
    job = mpijob(run_policy={"suspend": True})
    job, obs = running_state(mpijob(), backend)  # ran once, then suspended by Kueue (preemption)
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend, now=at(100))
    job, obs, _ = converge(job, stopped_by_controllers(obs), backend, now=at(100))
    for rtype in ("Launcher", "Worker"):
        job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["nodeSelector"] = {"flavor": "a100"}
    p = run(job, obs, backend=backend, now=at(150))
    # nothing while still suspended, except the StatefulSet's template, which has no pod to roll
    assert [x.ref.kind for x in p.patches] == (["StatefulSet"] if backend == "statefulset" else [])
    assert not p.deletes and not p.creates
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, plans = converge(job, obs, backend, now=at(200), rounds=5)
    assert obs.launcher["spec"]["template"]["spec"]["nodeSelector"] == {"flavor": "a100"}
    assert obs.workers["spec"]["template"]["spec"]["nodeSelector"] == {"flavor": "a100"}
    assert not obs.launcher["spec"].get("suspend") and not workers_stopped(obs)
    deleted = [d.ref.name for p in plans for d in p.deletes]
    # (the launcher Job was deleted by the suspend, made afresh by the resume: afresh.stop_for_suspend)
    assert "pi-launcher" not in deleted and (("pi-worker" in deleted) == (backend == "job"))


def test_created_suspended_creates_no_workers_or_launcher(backend):
    job, obs, plans = converge(mpijob(run_policy={"suspend": True}), backend=backend)
    assert obs.launcher is None and obs.workers is None and obs.config_map is not None
    assert "startTime" not in job["status"]
    assert events(plans[0]) == ["MPIJobCreated", "MPIJobSuspended"]


# -- deadlines and TTL ------------------------------------------------------------------------------------------


def test_active_deadline_is_on_the_launcher_job_and_checked_by_the_plan(backend):
    job, obs, plans = converge(mpijob(run_policy={"activeDeadlineSeconds": 600}), backend=backend)
    assert obs.launcher["spec"]["activeDeadlineSeconds"] == 600
    assert plans[0].requeue_after == 600
    assert run(job, obs, backend=backend, now=at(100)).requeue_after == 500
    p = run(job, obs, backend=backend, now=at(601))
    c = cond(p.status, st.FAILED)
    assert c["reason"] == "DeadlineExceeded" and "activeDeadlineSeconds" in c["message"]
    job, obs = apply_plan(job, obs, p)
    assert obs.launcher["spec"]["suspend"] is True and workers_stopped(obs)
    assert run(job, obs, backend=backend, now=at(700)).writes == 0


def test_ttl_deletes_the_finished_mpijob_when_due(backend):
    job, obs = running_state(mpijob(run_policy={"ttlSecondsAfterFinished": 60}), backend)
    obs, logs = exited_0(replace(obs, launcher=job_finished(obs.launcher, "Complete", when="2025-01-01T12:05:00Z")))
    job, obs, plans = converge(job, obs, backend, now=at(310), reports=logs)
    assert plans[-1].requeue_after == 50 and not plans[-1].delete_mpijob
    p = run(job, obs, backend=backend, now=at(360))
    assert p.delete_mpijob and p.writes == 1
    assert "ttlSecondsAfterFinished" not in obs.launcher["spec"]


# -- name clashes ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slot", ["config_map", "launcher", "workers", "service", "secret"])
def test_a_deleted_namesakes_child_is_waited_for_not_a_clash(backend, slot):
    """Delete and re-create under one name: the older MPIJob's children (its uid) are being collected."""
    _job, obs, _ = converge(mpijob(), backend=backend)
    old = dict(getattr(obs, slot))
    old["metadata"] = {**old["metadata"], "ownerReferences": [
        {**old["metadata"]["ownerReferences"][0], "uid": "uid-of-an-older-pi"}]}
    obs = replace(obs, **{slot: old})
    p = run(mpijob(), obs, backend=backend)
    assert cond(p.status, st.FAILED) is None and "MPIJobFailed" not in events(p)
    assert not p.creates and not p.patches and not p.deletes
    assert p.requeue_after is not None and p.requeue_after <= 1.0


@pytest.mark.parametrize("slot", ["config_map", "launcher", "workers", "service", "secret"])
def test_a_child_controlled_by_something_else_is_a_clash_that_clears(backend, slot):
    _job, obs, _ = converge(mpijob(), backend=backend)
    foreign = dict(getattr(obs, slot))
    foreign["metadata"] = {**foreign["metadata"], "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "other", "uid": "u-rs", "controller": True}]}
    obs_clash = replace(obs, **{slot: foreign})
    p = run(mpijob(), obs_clash, backend=backend)
    c = cond(p.status, st.FAILED)
    assert c["reason"] == "ResourceExists" and foreign["metadata"]["name"] in c["message"]
    assert ("Warning", "ResourceExists") in [(e.type, e.reason) for e in p.events]
    assert "completionTime" not in p.status  # not an end: no TTL runs out on it
    touched = [x.ref.name for x in p.patches + p.deletes]
    assert foreign["metadata"]["name"] not in touched
    assert not p.creates
    # the object in the way is deleted: the condition clears and the job runs
    job = mpijob()
    job["status"] = p.status
    p = run(job, replace(obs, **{slot: None}), backend=backend)
    assert cond(p.status, st.FAILED) is None and "completionTime" not in p.status
    assert p.creates


def test_resource_exists_without_owner(backend):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config", "namespace": "ns"}}
    p = run(mpijob(), Observed(config_map=cm), backend=backend)
    assert cond(p.status, st.FAILED)["reason"] == "ResourceExists" and not p.creates and not p.patches


# -- drift -----------------------------------------------------------------------------------------------------------


def test_drift_is_repaired_on_owned_fields_only(backend):
    job, obs = running_state(mpijob(), backend)
    w = obs.workers
    w = {**w, "spec": {**w["spec"], "template": {**w["spec"]["template"], "spec": {
        **w["spec"]["template"]["spec"], "nodeSelector": {"kueue": "injected"}, "schedulerName": "default"}}}}
    if backend == "statefulset":
        w["spec"]["replicas"] = 5
    else:
        w["spec"]["parallelism"] = 5
        w["spec"]["completions"] = 5
    cm = {**obs.config_map, "data": {**obs.config_map["data"], "hostfile": "evil\n", "extra": "kept"}}
    svc = {**obs.service, "spec": {**obs.service["spec"], "selector": {"app": "x", n.JOB_NAME_LABEL: "pi"},
                                   "clusterIP": "None", "type": "ClusterIP"}}
    lau = {**obs.launcher, "metadata": {**obs.launcher["metadata"], "labels": {"mine": "yes"}}}
    obs = replace(obs, workers=w, config_map=cm, service=svc, launcher=lau)
    p = run(job, obs, backend=backend)
    patches = {pa.ref.name: pa.patch for pa in p.patches}
    hostfile = "pi-worker-0.pi.ns.svc slots=1\npi-worker-1.pi.ns.svc slots=1\n"
    assert patches["pi-config"] == {"data": {"hostfile": hostfile}}
    assert patches["pi"] == {"spec": {"selector": {"app": None}}}
    assert patches["pi-launcher"] == {"metadata": {"labels": n.job_labels(job, "launcher")}}
    if backend == "statefulset":
        assert patches["pi-worker"] == {"spec": {"replicas": 2}}
    else:
        assert patches["pi-worker"] == {"spec": {"completions": 2, "parallelism": 2}}
    job, obs = apply_plan(job, obs, p)
    assert obs.workers["spec"]["template"]["spec"]["nodeSelector"] == {"kueue": "injected"}
    assert obs.launcher["metadata"]["labels"]["mine"] == "yes"
    assert run(job, obs, backend=backend).writes == 0


def test_scaling_workers(backend):
    job, obs = running_state(mpijob(), backend)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    p = run(job, obs, backend=backend)
    patches = {pa.ref.name: pa.patch for pa in p.patches}
    assert "pi-worker-2.pi.ns.svc slots=1" in patches["pi-config"]["data"]["hostfile"]
    assert patches["pi-worker"] == ({"spec": {"replicas": 3}} if backend == "statefulset"
                                    else {"spec": {"completions": 3, "parallelism": 3}})


def test_status_timestamps_do_not_churn(backend):
    job, obs = running_state(mpijob(), backend)
    before = {c["type"]: c["lastTransitionTime"] for c in job["status"]["conditions"]}
    assert run(job, obs, backend=backend, now=at(3600)).status is None
    # a changed message keeps the transition time
    job["status"]["conditions"] = [{**c, "message": "old"} for c in job["status"]["conditions"]]
    p = run(job, obs, backend=backend, now=at(3600))
    assert {c["type"]: c["lastTransitionTime"] for c in p.status["conditions"]} == before


def test_observed_at_now_is_deterministic(backend):
    a = run(mpijob(), backend=backend, now=NOW)
    b = run(mpijob(), backend=backend, now=NOW)
    assert a.status == b.status and [c.obj for c in a.creates] != [] and len(a.creates) == len(b.creates)


def test_the_state_column_shows_the_latest_true_condition(backend):
    """The CRD's State printer column is .status.conditions[-1:].type."""
    job, obs = running_state(mpijob(), backend)
    assert job["status"]["conditions"][-1]["type"] == "Running"
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend, now=at(10))
    assert job["status"]["conditions"][-1]["type"] == "Suspended"
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, _ = converge(job, obs, backend, now=at(20))
    assert job["status"]["conditions"][-1]["type"] == "Running"  # Running again (stale observed pods)
    obs = replace(obs, launcher=job_finished(obs.launcher, "Failed", "BackoffLimitExceeded"))
    job, obs, _ = converge(job, obs, backend, now=at(30))
    assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"][-1] == "Failed"
    assert job["status"]["conditions"][-1]["type"] == "Failed"


def test_a_secret_that_lost_a_key_is_replaced_once(backend):
    job, obs, _ = converge(mpijob(), backend=backend)
    broken = {**obs.secret, "data": {"ssh-publickey": obs.secret["data"]["ssh-publickey"]}}
    p = run(job, replace(obs, secret=broken), backend=backend)
    assert [(d.ref.kind, d.ref.name, d.uid) for d in p.deletes] == [("Secret", "pi-ssh", broken["metadata"]["uid"])]
    keygen = KeyGen()
    p = run(job, replace(obs, secret=None), backend=backend, keygen=keygen)
    assert kinds(p) == ["Secret/pi-ssh"] and keygen.calls == 1
    # a cache that keeps no `data` at all is not a reason to replace it
    assert run(job, replace(obs, secret={k: v for k, v in obs.secret.items() if k != "data"}),
               backend=backend).writes == 0


# A clash found while the MPIJob runs (a foreign object under the name of a child that was deleted, or
# of the launcher WaitForWorkersReady has not created yet) is not an end (Failed/ResourceExists has no
# completionTime): the children that run are left exactly as they are (issue 36 item 7).
CLASH_RUNNING = [
    # (case, spec, the child taken: observed foreign object in its slot, or a name the last apply met)
    ("foreign Service in the cache", {}, "service", None),
    ("foreign Secret in the cache", {}, "secret", None),
    ("Service name taken, invisible to the caches", {}, None, "Service ns/pi"),
    ("launcher name taken under WaitForWorkersReady", {"launcherCreationPolicy": "WaitForWorkersReady"}, None,
     "Job ns/pi-launcher"),
]


def _workers_up_launcher_held(backend):
    """WaitForWorkersReady: every worker Ready, the launcher Job not created yet."""
    job, obs, _ = converge(mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"}), backend=backend)
    obs = replace(workers_ready(obs, 2), pods=[pod(job, "worker", i, backend=backend) for i in range(2)])
    return job, obs


@pytest.mark.parametrize(("case", "spec", "slot", "taken"), CLASH_RUNNING, ids=[c[0] for c in CLASH_RUNNING])
def test_clash_running_leaves_the_running_children_alone(backend, case, spec, slot, taken):
    job, obs = _workers_up_launcher_held(backend) if spec else running_state(mpijob(), backend)
    assert spec or cond(job, st.RUNNING)["status"] == "True"
    if slot:
        foreign = copy.deepcopy(getattr(obs, slot))
        foreign["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "other", "uid": "u-rs", "controller": True}]
        obs = replace(obs, **{slot: foreign})
    if taken and taken.startswith("Service"):
        obs = replace(obs, service=None)
    msg = f"{taken} already exists and is not controlled by MPIJob ns/pi" if taken else None
    p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen(), taken=msg))
    assert cond(p.status, st.FAILED)["reason"] == "ResourceExists"
    assert "completionTime" not in p.status
    assert not p.creates and not p.deletes
    assert [(x.ref.kind, x.ref.name, x.patch) for x in p.patches] == []  # no worker stopped, no launcher suspended
    # the name frees up: the run carries on where it was, nothing recreated
    job["status"] = p.status
    if slot:
        obs = replace(obs, **{slot: None})
    p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen()))
    assert cond(p.status, st.FAILED) is None
    assert not p.deletes and not [x for x in p.patches if x.ref.name in ("pi-worker", "pi-launcher")]


def test_clash_running_then_suspended_stops_the_children(backend):
    """Kueue's eviction still stops every pod while a clash is reported."""
    job, obs = running_state(mpijob(), backend)
    foreign = copy.deepcopy(obs.service)
    foreign["metadata"]["ownerReferences"] = []
    job["spec"]["runPolicy"] = {**job["spec"].get("runPolicy", {}), "suspend": True}
    p = run(job, replace(obs, service=foreign), backend=backend)
    assert cond(p.status, st.FAILED)["reason"] == "ResourceExists"
    assert cond(p.status, st.SUSPENDED)["status"] == "True"  # so that a resume starts afresh
    stop = {"spec": {"replicas": 0}} if backend == "statefulset" else {"spec": {"suspend": True}}
    patches = {x.ref.name: x.patch for x in p.patches}
    assert patches["pi-worker"].get("spec", {}).items() >= stop["spec"].items()
    assert patches["pi-launcher"]["spec"]["suspend"] is True


@pytest.mark.parametrize("end", ["launcher succeeded", "launcher failed", "deadline"])
def test_clash_running_still_ends_when_the_run_does(backend, end):
    """The children run on through a clash, so their end (or the deadline) still ends the MPIJob and
    stops its workers; the end replaces the clash's condition."""
    job, obs = running_state(mpijob(run_policy={"activeDeadlineSeconds": 100}), backend)
    foreign = copy.deepcopy(obs.service)
    foreign["metadata"]["ownerReferences"] = []
    obs = replace(obs, service=foreign)
    p = run(job, obs, backend=backend, now=at(10))
    assert cond(p.status, st.FAILED)["reason"] == "ResourceExists" and not p.patches
    job["status"] = p.status
    now = at(10)
    if end == "deadline":
        now = at(101)
    else:
        ctype, reason = ("Complete", "") if end == "launcher succeeded" else ("Failed", "BackoffLimitExceeded")
        obs = replace(obs, launcher=job_finished(obs.launcher, ctype, reason))
    obs, logs = exited_0(obs) if end == "launcher succeeded" else (obs, {})
    p = run(job, obs, backend=backend, now=now, reports=logs)
    want = {"launcher succeeded": (st.SUCCEEDED, "MPIJobSucceeded"),
            "launcher failed": (st.FAILED, "BackoffLimitExceeded"), "deadline": (st.FAILED, "DeadlineExceeded")}[end]
    assert cond(p.status, want[0])["reason"] == want[1] and p.status.get("completionTime")
    if end == "launcher succeeded":
        assert cond(p.status, st.FAILED) is None
    stop = {"replicas": 0} if backend == "statefulset" else {"suspend": True}
    assert any(x.ref.name == "pi-worker" and x.patch["spec"].items() >= stop.items() for x in p.patches)
    assert foreign["metadata"]["name"] not in [x.ref.name for x in p.patches + p.deletes]
    assert ("MPIJobSucceeded" if end == "launcher succeeded" else "MPIJobFailed") in events(p)
