"""Gang scheduling (reconcilers/gang/podgroup.py): the PodGroup, the pod template marks, and its lifecycle
in plan(), for both PodGroup APIs and both worker backends."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from reconcilers import status as st
from reconcilers.failure.evidence import LauncherReport
from reconcilers.gang import podgroup as pg
from reconcilers.types import Config
from tests.unit.sim import BACKENDS, apply_plan, converge, job_finished, mpijob, pod, run, running_state

SCHED = "scheduler-plugins-scheduler"
GANGS = (SCHED, pg.VOLCANO)


def with_resources(job: dict, launcher: dict | None, worker: dict | None) -> dict:
    for rtype, res in (("Launcher", launcher), ("Worker", worker)):
        if res is not None:
            job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]["resources"] = res
    return job


@pytest.mark.parametrize("text,value", [
    ("1", Decimal(1)), (3, Decimal(3)), ("500m", Decimal("0.5")), ("2Gi", Decimal(2 * 2**30)),
    ("1.5", Decimal("1.5")), ("1e3", Decimal(1000)), ("128974848", Decimal(128974848)), ("1k", Decimal(1000)),
])
def test_parse_quantity(text, value):
    assert pg.parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1x", "Gi", "1 Gi", "abc"])
def test_parse_quantity_refuses(bad):
    with pytest.raises(ValueError):
        pg.parse_quantity(bad)


@pytest.mark.parametrize("value,text", [
    (Decimal(3), "3"), (Decimal("1.5"), "1500m"), (Decimal(2 * 2**30), "2Gi"), (Decimal(1536 * 2**20), "1536Mi"),
    (Decimal(1000), "1000"), (Decimal(0), "0"), (Decimal("0.0001"), "1m"),
])
def test_format_quantity(value, text):
    assert pg.format_quantity(value) == text


@pytest.mark.parametrize("workers,policy,creation,want", [
    (2, {}, None, 3), (0, {}, None, 1), (8, {"minAvailable": 5}, None, 5), (8, {"minAvailable": 0}, None, 0),
    (2, {}, "AtStartup", 3), (2, {}, "WaitForWorkersReady", 2),
    (2, {"minAvailable": 3}, "WaitForWorkersReady", 3),
])
def test_min_member(workers, policy, creation, want):
    spec = {"launcherCreationPolicy": creation} if creation else {}
    assert pg.min_member(mpijob(workers=workers, spec=spec, run_policy={"schedulingPolicy": policy})) == want


def test_min_resources_without_the_launcher_when_it_waits_for_the_workers():
    job = with_resources(mpijob(workers=2, spec={"launcherCreationPolicy": "WaitForWorkersReady"}),
                         {"requests": {"cpu": "1"}}, {"requests": {"cpu": "2"}})
    assert pg.min_resources(job, pg.min_member(job)) == {"cpu": "4"}


@pytest.mark.parametrize("launcher,worker,policy,want", [
    # launcher + 2 workers
    ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "2", "memory": "1Gi"}}, {}, {"cpu": "5", "memory": "2Gi"}),
    # a limit stands in for a missing request; a request wins over its limit
    (None, {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"memory": "512Mi"}}, {},
     {"cpu": "1", "memory": "1Gi"}),
    # minAvailable 2: the launcher and one worker must start together
    ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "2"}}, {"minAvailable": 2}, {"cpu": "3"}),
    # no resources anywhere: an empty list, as upstream
    (None, None, {}, {}),
    # given: taken as is
    ({"requests": {"cpu": "1"}}, None, {"minResources": {"cpu": "7", "nvidia.com/gpu": 4}},
     {"cpu": "7", "nvidia.com/gpu": 4}),
    # a malformed quantity is left out (the API server names it when the pods are created)
    ({"requests": {"cpu": "lots", "memory": "1Gi"}}, None, {}, {"memory": "1Gi"}),
    # minAvailable 0: no minResources
    ({"requests": {"cpu": "1"}}, None, {"minAvailable": 0}, None),
])
def test_min_resources(launcher, worker, policy, want):
    job = with_resources(mpijob(workers=2, run_policy={"schedulingPolicy": policy}), launcher, worker)
    assert pg.min_resources(job, pg.min_member(job)) == want


@pytest.mark.parametrize("gang,policy,annotations,want", [
    (SCHED, {}, {}, {"minMember": 3, "minResources": {"cpu": "3"}, "scheduleTimeoutSeconds": 0}),
    (SCHED, {"scheduleTimeoutSeconds": 60, "queue": "q"}, {},
     {"minMember": 3, "minResources": {"cpu": "3"}, "scheduleTimeoutSeconds": 60}),
    (pg.VOLCANO, {}, {}, {"minMember": 3, "minResources": {"cpu": "3"}}),
    (pg.VOLCANO, {"queue": "q", "priorityClass": "high"}, {pg.VOLCANO_QUEUE_ANNOTATION: "other"},
     {"minMember": 3, "minResources": {"cpu": "3"}, "queue": "q", "priorityClassName": "high"}),
    (pg.VOLCANO, {}, {pg.VOLCANO_QUEUE_ANNOTATION: "from-annotation"},
     {"minMember": 3, "minResources": {"cpu": "3"}, "queue": "from-annotation"}),
])
def test_pod_group_spec(gang, policy, annotations, want):
    job = with_resources(mpijob(run_policy={"schedulingPolicy": policy}), {"requests": {"cpu": "1"}},
                         {"requests": {"cpu": "1"}})
    job["metadata"]["annotations"] = annotations
    assert pg.pod_group_spec(job, Config(gang_scheduler=gang)) == want


@pytest.mark.parametrize("launcher_pc,worker_pc,policy_pc,want", [
    ("", "", "", ""), ("l", "w", "", "l"), ("", "w", "", "w"), ("l", "w", "p", "p"),
])
def test_priority_class(launcher_pc, worker_pc, policy_pc, want):
    job = mpijob(run_policy={"schedulingPolicy": {"priorityClass": policy_pc}})
    for rtype, pc in (("Launcher", launcher_pc), ("Worker", worker_pc)):
        if pc:
            job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["priorityClassName"] = pc
    assert pg.priority_class(job) == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gang,api,mark", [
    (SCHED, pg.SCHEDULER_PLUGINS_API, ("labels", pg.POD_GROUP_LABEL)),
    (pg.VOLCANO, pg.VOLCANO_API, ("annotations", pg.VOLCANO_GROUP_ANNOTATION)),
])
def test_templates_name_the_scheduler_and_group(backend, gang, api, mark):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "mine"
    _, obs, _ = converge(job, backend=backend, gang_scheduler=gang)
    assert obs.pod_group["apiVersion"] == api and obs.pod_group["metadata"]["name"] == "pi"
    assert obs.pod_group["metadata"]["ownerReferences"][0]["uid"] == "uid-pi"
    for child in (obs.workers, obs.launcher):
        tpl = child["spec"]["template"]
        assert tpl["spec"]["schedulerName"] == gang  # the user's "mine" is replaced, as upstream
        assert tpl["metadata"][mark[0]][mark[1]] == "pi"


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_the_flag_nothing_changes(backend):
    _, obs, _ = converge(mpijob(run_policy={"schedulingPolicy": {"minAvailable": 1}}), backend=backend)
    assert obs.pod_group is None
    assert "schedulerName" not in obs.workers["spec"]["template"]["spec"]
    assert pg.POD_GROUP_LABEL not in obs.workers["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gang", GANGS)
def test_created_before_the_workers_then_zero_writes(backend, gang):
    job = mpijob()
    p = run(job, backend=backend, gang_scheduler=gang)
    names = [f"{c.obj['kind']}/{c.obj['metadata']['name']}" for c in p.creates]
    worker_kind = "StatefulSet" if backend == "statefulset" else "Job"
    assert names.index("PodGroup/pi") < names.index(f"{worker_kind}/pi-worker")
    job, obs, plans = converge(job, backend=backend, gang_scheduler=gang)
    assert plans[-1].writes == 0 and not plans[-1].events
    # the scheduler's status on the PodGroup and a field the operator does not set cause no write
    obs = replace(obs, pod_group={**obs.pod_group, "status": {"phase": "Running", "running": 3},
                                  "spec": {**obs.pod_group["spec"], "minTaskMember": {"x": 1}}})
    assert run(job, obs, backend, gang_scheduler=gang).writes == 0
    job, obs = running_state(job, backend)
    assert run(job, obs, backend).writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gang", GANGS)
def test_drift_is_repaired_on_owned_fields_only(backend, gang):
    job = with_resources(mpijob(), {"requests": {"cpu": "1"}}, {"requests": {"cpu": "1"}})
    job, obs, _ = converge(job, backend=backend, gang_scheduler=gang)
    spec = obs.pod_group["spec"]
    obs.pod_group["spec"] = {**spec, "minMember": 1, "minResources": {"cpu": "3000m", "memory": "1Gi"},
                             "other": "kept"}
    p = run(job, obs, backend, gang_scheduler=gang)
    assert [x.ref.kind for x in p.patches] == ["PodGroup"]
    assert p.patches[0].patch == {"spec": {"minMember": 3, "minResources": {"cpu": "3", "memory": None}}}
    _, obs = apply_plan(job, obs, p)
    assert obs.pod_group["spec"]["other"] == "kept"
    assert run(job, obs, backend, gang_scheduler=gang).writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gang", GANGS)
def test_follows_suspend_resume_finish(backend, gang):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=gang)
    uid = obs.pod_group["metadata"]["uid"]
    job["spec"]["runPolicy"]["suspend"] = True
    p = run(job, obs, backend, gang_scheduler=gang)
    assert [(d.ref.kind, d.uid) for d in p.deletes if d.ref.kind == "PodGroup"] == [("PodGroup", uid)]
    job, obs, _ = converge(job, obs, backend, gang_scheduler=gang)
    assert obs.pod_group is None
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, _ = converge(job, obs, backend, gang_scheduler=gang)
    assert obs.pod_group is not None
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete"))
    job, obs, _ = converge(job, obs, backend, gang_scheduler=gang)
    assert st.is_true(job["status"], st.SUCCEEDED) and obs.pod_group is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_foreign_pod_group_is_a_clash(backend):
    foreign = {"apiVersion": pg.SCHEDULER_PLUGINS_API, "kind": "PodGroup",
               "metadata": {"name": "pi", "namespace": "ns", "uid": "x"}, "spec": {"minMember": 9}}
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=SCHED, rounds=6)
    obs = replace(obs, pod_group=foreign)
    p = run({**job, "status": {}}, obs, backend, gang_scheduler=SCHED)
    assert st.get_condition(p.status, st.FAILED)["reason"] == st.R_RESOURCE_EXISTS
    assert not [x for x in p.patches + p.deletes if x.ref.kind == "PodGroup"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gang,phases", [(SCHED, ("Pending", "Scheduling")), (pg.VOLCANO, ("Pending", "Inqueue"))])
def test_the_gang_wait_is_shown_then_cleared(backend, gang, phases):
    """One status write when the wait begins (the message names the phase then), none while the phase
    changes during the wait, one when the gang is placed."""
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=gang)
    obs = replace(obs, pod_group={**obs.pod_group, "status": {"phase": phases[0]}})
    p = run(job, obs, backend, gang_scheduler=gang)
    c = st.get_condition(p.status, pg.WAITING_CONDITION)
    assert c["status"] == "True" and phases[0] in c["message"] and "minMember 3" in c["message"]
    assert p.status["conditions"][-1]["type"] == pg.WAITING_CONDITION  # the State column
    assert [e.reason for e in p.events] == [pg.R_WAITING]
    job, obs = apply_plan(job, obs, p)
    assert run(job, obs, backend, gang_scheduler=gang).writes == 0  # steady while it waits
    obs = replace(obs, pod_group={**obs.pod_group, "status": {"phase": phases[1]}})
    p = run(job, obs, backend, gang_scheduler=gang)
    assert p.writes == 0 and not p.events
    obs = replace(obs, pod_group={**obs.pod_group, "status": {"phase": "Running"}})
    p = run(job, obs, backend, gang_scheduler=gang)
    assert st.get_condition(p.status, pg.WAITING_CONDITION) is None
    assert [e.reason for e in p.events] == [pg.R_GANG_SCHEDULED]


@pytest.mark.parametrize("backend", BACKENDS)
def test_running_clears_the_wait(backend):
    job, obs = running_state(mpijob(), backend)
    job["status"]["conditions"].append({"type": pg.WAITING_CONDITION, "status": "True", "reason": pg.R_WAITING,
                                        "message": "m"})
    p = run(job, obs, backend, gang_scheduler=SCHED)
    assert p.status is not None and st.get_condition(p.status, pg.WAITING_CONDITION) is None


def _on_node(p: dict, node: str | None = "node-1", deleting: bool = False) -> dict:
    p = {**p, "spec": {**p["spec"], **({"nodeName": node} if node else {})}, "metadata": dict(p["metadata"])}
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2025-01-01T12:05:00Z"
    return p


# The gang's pods as the MPIJob ends (launcher Succeeded), and whether the PodGroup may go now: only
# once no pod of the gang holds a node (an ended pod does not; a deleted one does until it ends).
@pytest.mark.parametrize("workers,released", [
    ([("Running", "node-1", False)] * 2, False),  # cleanPodPolicy still to stop them
    ([("Running", "node-1", True), ("Succeeded", "node-1", True)], False),  # one still stopping
    ([("Succeeded", "node-1", True), ("Failed", "node-2", False)], True),  # ended: off their nodes
    ([("Pending", None, True), ("Pending", None, False)], True),  # never placed: held nothing
    ([], True),  # gone
])
@pytest.mark.parametrize("gang,marked", [(SCHED, True), (pg.VOLCANO, False)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_released_at_the_end_once_no_pod_holds_a_node(backend, gang, marked, workers, released):
    job, obs, _ = converge(mpijob(), backend=backend, gang_scheduler=gang)
    uid = obs.pod_group["metadata"]["uid"]
    pods = [_on_node(pod(job, "launcher", phase="Succeeded"))]
    pods += [_on_node(pod(job, "worker", i, phase, backend), node, deleting)
             for i, (phase, node, deleting) in enumerate(workers)]
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete"), pods=pods)
    # Workers that ended as the launcher exits 0 are judged by its log (workerloss.judge): a clean one.
    launcher_uid = pods[0]["metadata"]["uid"]
    p = run(job, obs, backend, gang_scheduler=gang, reports={launcher_uid: LauncherReport(launcher_uid)})
    assert st.is_true(p.status, st.SUCCEEDED)
    assert pg.WAITING_CONDITION not in {c["type"] for c in p.status.get("conditions", [])}
    deletes = [(d.ref.kind, d.uid) for d in p.deletes if d.ref.kind == "PodGroup"]
    patches = [x for x in p.patches if x.ref.kind == "PodGroup"]
    if not released:
        assert deletes == [] and patches == []
        return
    assert deletes == [("PodGroup", uid)]
    if not marked:  # Volcano's scheduler retries by itself: no mark
        assert patches == []
        return
    # The mark (the update that wakes the gangs waiting for room) goes out before the delete, in the
    # same plan (the executor sends patches before deletes).
    ((mark,),) = [patches]
    assert mark.patch == {"metadata": {"annotations": {pg.RELEASED_ANNOTATION: "2025-01-01T12:00:00Z"}}}
    # Marked before (a delete that failed, or a release before a resume): marked again, the update
    # that wakes the waiting gangs this time.
    obs.pod_group["metadata"]["annotations"] = {pg.RELEASED_ANNOTATION: "2025-01-01T11:59:00Z"}
    again = run(job, obs, backend, gang_scheduler=gang, reports={launcher_uid: LauncherReport(launcher_uid)})
    assert [x.patch for x in again.patches if x.ref.kind == "PodGroup"] == [mark.patch]
    assert [(d.ref.kind, d.uid) for d in again.deletes if d.ref.kind == "PodGroup"] == [("PodGroup", uid)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_released_on_suspend_once_the_pods_are_off_their_nodes(backend):
    job, obs = running_state(mpijob(), backend)
    job, obs, _ = converge(job, obs, backend, gang_scheduler=SCHED)
    obs = replace(obs, pods=[_on_node(p) for p in obs.pods])
    job["spec"]["runPolicy"]["suspend"] = True
    p = run(job, obs, backend, gang_scheduler=SCHED)
    assert st.is_true(p.status, st.SUSPENDED)
    assert not [x for x in p.deletes + p.patches if x.ref.kind == "PodGroup"]
    obs = replace(obs, pods=[_on_node(x, deleting=True) | {"status": {"phase": "Succeeded"}} for x in obs.pods])
    p = run(job, obs, backend, gang_scheduler=SCHED)
    assert [x.ref.kind for x in p.patches if x.ref.kind == "PodGroup"] == ["PodGroup"]
    assert [d.ref.kind for d in p.deletes if d.ref.kind == "PodGroup"] == ["PodGroup"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_resume_before_the_release_makes_the_group_afresh(backend):
    job, obs = running_state(mpijob(), backend)
    job, obs, _ = converge(job, obs, backend, gang_scheduler=SCHED)
    old_uid = obs.pod_group["metadata"]["uid"]
    obs = replace(obs, pods=[_on_node(p) for p in obs.pods])
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs = apply_plan(job, obs, run(job, obs, backend, gang_scheduler=SCHED))
    assert obs.pod_group is not None  # kept: the pods still hold their nodes
    # Resumed while the stopped run's pods are still being deleted (on their nodes).
    obs = replace(obs, pods=[_on_node(p, deleting=True) for p in obs.pods],
                  pod_group={**obs.pod_group, "status": {"phase": "Finished", "succeeded": 3}})
    job["spec"]["runPolicy"]["suspend"] = False
    p = run(job, obs, backend, gang_scheduler=SCHED)
    assert [list(x.patch["metadata"]["annotations"]) for x in p.patches if x.ref.kind == "PodGroup"] == \
        [[pg.RELEASED_ANNOTATION]]
    assert [(d.ref.kind, d.uid) for d in p.deletes] == [("PodGroup", old_uid)]
    # no pod until the group is new: the workers and the launcher are left as the suspend left them
    # (the launcher Job, deleted by the suspend, is made afresh later; the Job backend's Service leaves
    # the stopping workers' names out meanwhile: nothing that makes a pod)
    assert not p.creates and p.requeue_after == 1.0
    assert {x.ref.kind for x in p.patches} <= {"PodGroup", "ConfigMap", "Service"}
    assert st.get_condition(p.status, st.SUSPENDED)["status"] == "False"
    job["status"] = p.status
    # Being deleted: still no pod; gone: made afresh, then the workers.
    deleting = {**obs.pod_group, "metadata": {**obs.pod_group["metadata"], "deletionTimestamp": "x"}}
    p = run(job, replace(obs, pod_group=deleting), backend, gang_scheduler=SCHED)
    # (the Job backend's worker Job, whose suspended pods ended, is made afresh: it makes no pod meanwhile)
    assert not p.creates and [(d.ref.kind, d.ref.name) for d in p.deletes] in ([], [("Job", "pi-worker")])
    assert {x.ref.kind for x in p.patches} <= {"ConfigMap", "Service"}
    p = run(job, replace(obs, pod_group=None), backend, gang_scheduler=SCHED)
    # the group first; the launcher Job the suspend deleted may be made in the same plan, as on a first start
    assert [c.obj["kind"] for c in p.creates][:1] == ["PodGroup"]
    assert {c.obj["kind"] for c in p.creates} <= {"PodGroup", "Job"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_resumed_run_with_pods_keeps_its_group(backend):
    # The resume's status write failed after its pods were made: their group is not taken away.
    job, obs = running_state(mpijob(), backend)
    job, obs, _ = converge(job, obs, backend, gang_scheduler=SCHED)
    job["status"]["conditions"].append({"type": st.SUSPENDED, "status": "True", "reason": "Suspended",
                                        "message": "", "lastTransitionTime": "2025-01-01T11:00:00Z"})
    p = run(job, obs, backend, gang_scheduler=SCHED)
    assert not [x for x in p.patches + p.deletes if x.ref.kind == "PodGroup"]
