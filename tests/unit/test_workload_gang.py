"""Gang scheduling through the Workload API (reconcilers/gang/workload_gang.py, --gang-scheduling=workload):
the Workload and PodGroup, the pod template mark, and their lifecycle in plan(), for both backends."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from reconcilers import status as st
from reconcilers.gang import podgroup as pg
from reconcilers.gang import workload_gang as wg
from reconcilers.types import Config
from reconcilers.validation import validate
from tests.unit.sim import BACKENDS, apply_plan, converge, job_finished, mpijob, pod, run, workers_ready

MODE = wg.MODE
OWNER = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "uid-pi", "controller": True,
         "blockOwnerDeletion": True}
LABELS = {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/operator-name": "mpi-operator"}


def with_pod_spec(job: dict, **fields) -> dict:
    for rs in job["spec"]["mpiReplicaSpecs"].values():
        rs["template"]["spec"].update(copy.deepcopy(fields))
    return job


@pytest.mark.parametrize("workers,policy,creation,want", [
    (2, {}, None, 3), (0, {}, None, 1), (8, {"minAvailable": 5}, None, 5),
    (8, {"minAvailable": 0}, None, 1),  # the API's minimum
    (2, {}, "AtStartup", 3), (2, {}, "WaitForWorkersReady", 2), (0, {}, "WaitForWorkersReady", 1),
])
def test_workload_min_count(workers, policy, creation, want):
    spec = {"launcherCreationPolicy": creation} if creation else {}
    assert wg.min_count(mpijob(workers=workers, spec=spec, run_policy={"schedulingPolicy": policy})) == want


@pytest.mark.parametrize("priority", ["", "high"])
def test_workload_objects_follow_the_pinned_api_types(priority):
    job = with_pod_spec(mpijob(), priorityClassName=priority) if priority else mpijob()
    extra = {"priorityClassName": priority} if priority else {}
    assert wg.workload(job, OWNER) == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "pi", "namespace": "ns", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {"controllerRef": {"apiGroup": "kubeflow.org", "kind": "MPIJob", "name": "pi"},
                 "podGroupTemplates": [{"name": "mpijob", "schedulingPolicy": {"gang": {"minCount": 3}}, **extra}]}}
    assert wg.pod_group(job, OWNER) == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "pi", "namespace": "ns", "labels": LABELS, "ownerReferences": [OWNER]},
        "spec": {"workloadRef": {"workloadName": "pi", "templateName": "mpijob"},
                 "schedulingPolicy": {"gang": {"minCount": 3}}, **extra}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_every_pod_template_names_the_group_and_keeps_its_scheduler(backend):
    job = with_pod_spec(mpijob(), schedulerName="my-scheduler", schedulingGroup={"podGroupName": "users"})
    _, obs, _ = converge(job, backend=backend, gang_scheduler=MODE)
    assert obs.workload["metadata"]["ownerReferences"][0]["uid"] == "uid-pi"
    assert obs.pod_group["apiVersion"] == wg.API and obs.pod_group["metadata"]["ownerReferences"][0]["uid"] == "uid-pi"
    for child in (obs.workers, obs.launcher):
        spec = child["spec"]["template"]["spec"]
        assert spec["schedulingGroup"] == {"podGroupName": "pi"}
        assert spec["schedulerName"] == "my-scheduler"
        assert pg.POD_GROUP_LABEL not in child["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gang", ["", "scheduler-plugins-scheduler", pg.VOLCANO])
def test_workload_objects_only_in_their_mode(backend, gang):
    _, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=gang)
    assert obs.workload is None
    assert "schedulingGroup" not in obs.workers["spec"]["template"]["spec"]
    assert (obs.pod_group is None) == (gang == "")


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_created_before_the_workers_then_zero_writes(backend):
    job = mpijob()
    p = run(job, backend=backend, gang_scheduler=MODE)
    names = [f"{c.obj['kind']}/{c.obj['metadata']['name']}" for c in p.creates]
    worker_kind = "StatefulSet" if backend == "statefulset" else "Job"
    assert names.index("Workload/pi") < names.index("PodGroup/pi") < names.index(f"{worker_kind}/pi-worker")
    job, obs, plans = converge(job, backend=backend, gang_scheduler=MODE)
    assert plans[-1].writes == 0 and not plans[-1].events
    # What the API server and the scheduler add (defaults, priority, a finalizer, the status) is no drift.
    tpl = obs.workload["spec"]["podGroupTemplates"][0]
    obs = replace(
        obs,
        workload={**obs.workload, "spec": {**obs.workload["spec"], "podGroupTemplates": [
            {**tpl, "priority": 0, "disruptionMode": {"single": {}}}]}},
        pod_group={**obs.pod_group,
                   "metadata": {**obs.pod_group["metadata"], "finalizers": ["scheduling.k8s.io/podgroup-protection"]},
                   "spec": {**obs.pod_group["spec"], "priority": 0, "disruptionMode": {"single": {}}},
                   "status": {"conditions": [{"type": wg.SCHEDULED_CONDITION, "status": "True",
                                              "reason": "Scheduled", "message": ""}]}})
    assert run(job, obs, backend, gang_scheduler=MODE).writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_min_count_drift_is_repaired_keeping_what_the_server_set(backend):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=MODE)
    tpl = {**obs.workload["spec"]["podGroupTemplates"][0], "priority": 0}
    tpl["schedulingPolicy"] = {"gang": {"minCount": 1}}
    obs = replace(obs, workload={**obs.workload, "spec": {**obs.workload["spec"], "podGroupTemplates": [tpl]}},
                  pod_group={**obs.pod_group, "spec": {**obs.pod_group["spec"], "priority": 0,
                                                       "schedulingPolicy": {"gang": {"minCount": 7}}}})
    obs.pod_group["metadata"] = {**obs.pod_group["metadata"], "labels": {}}
    p = run(job, obs, backend, gang_scheduler=MODE)
    patches = {x.ref.kind: x.patch for x in p.patches}
    assert patches == {
        "Workload": {"spec": {"podGroupTemplates": [{**tpl, "schedulingPolicy": {"gang": {"minCount": 3}}}]}},
        "PodGroup": {"metadata": {"labels": LABELS}, "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}}
    _, obs = apply_plan(job, obs, p)
    assert obs.workload["spec"]["podGroupTemplates"][0]["priority"] == 0
    assert run(job, obs, backend, gang_scheduler=MODE).writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_follows_suspend_resume_finish(backend):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=MODE)
    uids = {obs.workload["metadata"]["uid"], obs.pod_group["metadata"]["uid"]}
    job["spec"]["runPolicy"]["suspend"] = True
    p = run(job, obs, backend, gang_scheduler=MODE)
    assert {(d.ref.kind, d.uid) for d in p.deletes if d.ref.kind in ("Workload", "PodGroup")} == {
        ("Workload", obs.workload["metadata"]["uid"]), ("PodGroup", obs.pod_group["metadata"]["uid"])}
    job, obs, _ = converge(job, obs, backend, gang_scheduler=MODE)
    assert obs.workload is None and obs.pod_group is None
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, _ = converge(job, obs, backend, gang_scheduler=MODE)
    assert {obs.workload["metadata"]["uid"], obs.pod_group["metadata"]["uid"]}.isdisjoint(uids)
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete"))
    job, obs, _ = converge(job, obs, backend, gang_scheduler=MODE)
    assert st.is_true(job["status"], st.SUCCEEDED) and obs.workload is None and obs.pod_group is None


def _deleting(obj: dict) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2025-01-01T11:59:00Z"}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_resume_waits_for_the_old_pod_group_to_go(backend):
    """The API server keeps a PodGroup while active pods name it: pods of a resume made before it is
    gone would join the old group and keep it alive."""
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=MODE)
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend, gang_scheduler=MODE)
    job["spec"]["runPolicy"]["suspend"] = False
    old = _deleting({**wg.pod_group(job, OWNER), "metadata": {**wg.pod_group(job, OWNER)["metadata"], "uid": "old"}})
    stopping = pod(job, "worker", 0, backend=backend)
    stopping["metadata"]["deletionTimestamp"] = "2025-01-01T11:59:00Z"
    obs = replace(obs, pod_group=old, pods=[stopping])
    p = run(job, obs, backend, gang_scheduler=MODE)
    assert p.requeue_after is not None and not p.deletes
    assert [c.obj["kind"] for c in p.creates] == ["Workload"]
    assert not [x for x in p.patches if x.ref.kind in ("Job", "StatefulSet")]  # the workers stay stopped
    job, obs = apply_plan(job, obs, p)
    obs = replace(obs, pod_group=None, pods=[])
    job, obs, _ = converge(job, obs, backend, gang_scheduler=MODE)
    assert obs.pod_group["metadata"]["uid"] != "old"
    assert not (obs.workers["spec"].get("suspend") or obs.workers["spec"].get("replicas") == 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_group_deleted_mid_run_does_not_stop_the_run(backend):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=MODE)
    obs = replace(obs, pod_group=_deleting(obs.pod_group),
                  pods=[pod(job, "launcher")] + [pod(job, "worker", i, backend=backend) for i in range(2)])
    p = run(job, obs, backend, gang_scheduler=MODE)
    assert not p.creates and not p.deletes and p.requeue_after is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["Workload", "PodGroup"])
def test_workload_foreign_objects_clash_and_predecessors_are_waited_for(backend, kind):
    slot = "workload" if kind == "Workload" else "pod_group"
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=MODE)
    foreign = {"apiVersion": wg.API, "kind": kind, "metadata": {"name": "pi", "namespace": "ns", "uid": "x"},
               "spec": {}}
    p = run({**job, "status": {}}, replace(obs, **{slot: foreign}), backend, gang_scheduler=MODE)
    assert st.get_condition(p.status, st.FAILED)["reason"] == st.R_RESOURCE_EXISTS
    assert kind in st.get_condition(p.status, st.FAILED)["message"]
    assert not [x for x in p.patches + p.deletes if x.ref.kind == kind]
    predecessor = {**foreign, "metadata": {**foreign["metadata"], "ownerReferences": [{**OWNER, "uid": "gone"}]}}
    p = run({**job, "status": {}}, replace(obs, **{slot: predecessor}), backend, gang_scheduler=MODE)
    assert st.get_condition(p.status, st.FAILED) is None and p.requeue_after is not None
    assert not p.creates and not p.deletes and not p.patches


def _unschedulable(obs, message: str = "0/3 nodes are available: 3 Insufficient cpu."):
    cond = {"type": wg.SCHEDULED_CONDITION, "status": "False", "reason": "Unschedulable", "message": message}
    return replace(obs, pod_group={**obs.pod_group, "status": {"conditions": [cond]}})


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_gang_wait_is_shown_in_the_schedulers_words_then_cleared(backend):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=MODE)
    obs = _unschedulable(obs)
    p = run(job, obs, backend, gang_scheduler=MODE)
    c = st.get_condition(p.status, pg.WAITING_CONDITION)
    assert c["status"] == "True" and c["reason"] == pg.R_WAITING
    assert "minCount 3" in c["message"]
    assert "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu." in c["message"]
    assert [(e.type, e.reason) for e in p.events] == [("Normal", pg.R_WAITING)]
    job, obs = apply_plan(job, obs, p)
    assert run(job, obs, backend, gang_scheduler=MODE).writes == 0
    # the scheduler rewrites its message at each attempt: no write
    p = run(job, _unschedulable(obs, "0/3 nodes are available: 2 Insufficient cpu."), backend, gang_scheduler=MODE)
    assert p.writes == 0 and not p.events
    placed = {"type": wg.SCHEDULED_CONDITION, "status": "True", "reason": "Scheduled", "message": ""}
    p = run(job, replace(obs, pod_group={**obs.pod_group, "status": {"conditions": [placed]}}), backend,
            gang_scheduler=MODE)
    assert st.get_condition(p.status, pg.WAITING_CONDITION) is None
    assert [e.reason for e in p.events] == [pg.R_GANG_SCHEDULED]


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_api_missing_every_mpijob_says_so_and_starts_no_pod(backend):
    why = wg.unavailable_message(["workloads", "podgroups"])
    config = {"gang_scheduler": MODE, "gang_unavailable": why}
    p = run(mpijob(), backend=backend, **config)
    kinds = {c.obj["kind"] for c in p.creates}
    assert kinds == {"Service", "ConfigMap", "Secret"}  # no Workload, PodGroup, workers or launcher
    c = st.get_condition(p.status, pg.WAITING_CONDITION)
    assert (c["status"], c["reason"]) == ("True", wg.R_UNAVAILABLE)
    assert "GenericWorkload" in c["message"] and "--runtime-config=scheduling.k8s.io/v1beta1=true" in c["message"]
    assert p.status["conditions"][-1]["type"] == pg.WAITING_CONDITION  # the State column
    assert [(e.type, e.reason) for e in p.events if e.reason == wg.R_UNAVAILABLE] == [("Warning", wg.R_UNAVAILABLE)]
    job, obs, plans = converge(mpijob(), backend=backend, **config)
    assert plans[-1].writes == 0 and obs.workers is None and obs.launcher is None
    # Restarted on a cluster that serves the API: the gang and the pods come, the condition goes.
    job, obs, plans = converge(job, obs, backend=backend, gang_scheduler=MODE)
    assert obs.workload is not None and obs.workers is not None
    assert st.get_condition(job["status"], pg.WAITING_CONDITION) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_workload_wait_for_workers_ready_gangs_the_workers_and_the_launcher_joins_later(backend):
    job = mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"})
    job, obs, _ = converge(job, backend=backend, gang_scheduler=MODE)
    assert obs.pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert obs.launcher is None  # held until the workers are Ready: they alone form the gang
    obs = workers_ready(obs, 2)
    job, obs, _ = converge(job, obs, backend, gang_scheduler=MODE)
    assert obs.launcher["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "pi"}


@pytest.mark.parametrize("spec,policy,field", [
    ({"Launcher": {"schedulerName": "a"}}, {}, "spec.mpiReplicaSpecs.Launcher.template.spec.schedulerName"),
    ({"Worker": {"priorityClassName": "high"}}, {}, "spec.mpiReplicaSpecs.Launcher.template.spec.priorityClassName"),
    ({}, {"minAvailable": 4}, "spec.runPolicy.schedulingPolicy.minAvailable"),
    ({"launcherCreationPolicy": "WaitForWorkersReady"}, {"minAvailable": 3},
     "spec.runPolicy.schedulingPolicy.minAvailable"),
])
def test_workload_gangs_the_scheduler_cannot_place_are_invalid(spec, policy, field):
    job = mpijob(run_policy={"schedulingPolicy": policy})
    for rtype, fields in spec.items():
        if rtype in ("Launcher", "Worker"):
            job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"].update(fields)
        else:
            job["spec"][rtype] = fields
    errors = validate(job, Config(gang_scheduler=MODE))
    assert [e.path for e in errors] == [field], errors
    assert validate(job, Config()) == [] and validate(job, Config(gang_scheduler=pg.VOLCANO)) == []
    p = run(job, gang_scheduler=MODE)
    assert st.get_condition(p.status, st.FAILED)["reason"] == st.R_INVALID and not p.creates


@pytest.mark.parametrize("policy", [{"minAvailable": 3}, {"minAvailable": 1}, {}])
def test_workload_gangs_that_fit_are_valid(policy):
    job = with_pod_spec(mpijob(run_policy={"schedulingPolicy": policy}), schedulerName="s", priorityClassName="p")
    assert validate(job, Config(gang_scheduler=MODE)) == []
