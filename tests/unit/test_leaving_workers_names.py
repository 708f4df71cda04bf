"""The Service while the worker Job is made afresh (docs/architecture.md section 11, "Names while the
workers are made afresh"): it selects the launcher alone while the old workers are on their way out,
so their names stop resolving at once (a terminating pod keeps its record under
publishNotReadyAddresses), and selects every pod again in the plan that creates the new workers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import children, names
from tests.unit.sim import apply_plan, run, running_state
from tests.unit.test_relaunch_workers import ctx_of, deleting, lost_at
from tests.unit.test_retries import job_with, running_launcher, workers

ALL = {names.JOB_NAME_LABEL: "pi"}
LAUNCHER_ONLY = {names.JOB_NAME_LABEL: "pi", names.JOB_ROLE_LABEL: names.ROLE_LAUNCHER}
IN_PLACE = {"launcher_restart": "in-place", "container_restart_rules": True}


def _state(case: str, backend: str):
    job, obs = running_state(job_with(), backend)
    if case in ("pod-deleting", "pod-succeeded"):
        obs = replace(obs, pods=[p for p in obs.pods if p["metadata"]["labels"][names.JOB_ROLE_LABEL] != "worker"]
                      + lost_at(0, case.removeprefix("pod-"), job))
    elif case == "object-deleting":
        obs = replace(obs, workers=deleting(obs.workers))
    elif case == "object-gone":
        obs = replace(obs, workers=None, pods=[p for p in obs.pods
                                               if p["metadata"]["labels"][names.JOB_ROLE_LABEL] != "worker"])
    elif case == "launcher-held":  # a resume whose launcher waits (its gang, WaitForWorkersReady)
        obs = replace(obs, workers=deleting(obs.workers),
                      launcher={**obs.launcher, "spec": {**obs.launcher["spec"], "suspend": True}})
    elif case == "suspended":
        job["spec"]["runPolicy"]["suspend"] = True
        obs = replace(obs, workers=deleting(obs.workers))
    return job, obs


def _selector(p, obs) -> dict:
    """The Service's selector once the plan is applied."""
    for patch in p.patches:
        if patch.ref.kind == "Service":
            sel = dict(obs.service["spec"]["selector"])
            for k, v in patch.patch["spec"]["selector"].items():
                sel.pop(k) if v is None else sel.__setitem__(k, v)
            return sel
    return obs.service["spec"]["selector"]


@pytest.mark.parametrize(("case", "backend", "leaving", "want"), [
    ("running", "job", False, ALL),
    ("pod-deleting", "job", True, LAUNCHER_ONLY),  # known at the delete: the plan deletes the worker Job
    ("pod-succeeded", "job", True, LAUNCHER_ONLY),  # its index completed: the same
    ("object-deleting", "job", True, LAUNCHER_ONLY),  # Foreground: the old pods still there
    ("object-gone", "job", False, ALL),  # this plan creates the new workers: their names must resolve
    ("launcher-held", "job", True, ALL),  # no launcher runs to look the workers up: left as it is
    ("suspended", "job", True, ALL),  # leaving, but nothing runs: no write for the Service
    ("running", "statefulset", False, ALL),
    ("pod-deleting", "statefulset", False, ALL),  # the StatefulSet replaces that pod; the others stay
])
def test_service_selects_the_launcher_alone_while_the_workers_leave(case, backend, leaving, want):
    job, obs = _state(case, backend)
    assert _selector(run(job, obs, backend), obs) == want
    assert children.workers_leaving(ctx_of(job, obs, backend)) is leaving


def test_in_place_a_lost_worker_leaves_the_service_with_its_job_and_the_new_workers_come_back():
    """--launcher-restart=in-place, the Job backend. Worker 0's pod deleted while the launcher runs:
    one plan narrows the Service to the launcher and deletes the worker Job (Background; the executor
    sends patches before deletes), the launcher stays (the kubelet restarts it in place). While the old
    worker Job goes nothing is written for the Service again; the plan that creates the new worker Job
    selects every pod again, so the new workers' names resolve as soon as their pods have addresses."""
    job, obs = running_state(job_with(backoff=3), "job")
    job["spec"]["launcherCreationPolicy"] = "AtStartup"
    obs = replace(obs, pods=[running_launcher(job, restarts=1, last_code=205), *lost_at(0, "deleting", job)])
    p = run(job, obs, "job", **IN_PLACE)
    assert [(d.ref.kind, d.ref.name, d.propagation) for d in p.deletes] == [("Job", "pi-worker", "Background")]
    assert _selector(p, obs) == LAUNCHER_ONLY, p.patches

    job, obs = apply_plan(job, obs, replace(p, deletes=[]))
    going = run(job, replace(obs, workers=deleting(obs.workers)), "job", **IN_PLACE)
    assert not [x for x in going.patches if x.ref.kind == "Service"], going.patches
    assert not going.creates and not going.deletes, (going.creates, going.deletes)

    gone = replace(obs, workers=None, pods=[running_launcher(job, restarts=1, last_code=205)])
    back = run(job, gone, "job", **IN_PLACE)
    assert [c.obj["metadata"]["name"] for c in back.creates] == ["pi-worker"], back.creates
    assert _selector(back, gone) == ALL, back.patches


# -- the new workers made while the old ones stop ------------------------------------------------------------

def _old_set(job: dict, backend: str = "job", born: str = "2025-01-01T12:00:05Z", phase: str = "Running") -> list:
    """The pods of a worker object deleted Background (gone from the cache): controlled by a uid no
    longer observed, so stale (ownership.our_pods); being deleted, still stopping unless `phase` says
    they ended."""
    ws = workers(job, backend)
    for w in ws:
        w["metadata"]["ownerReferences"][0]["uid"] = "uid-of-the-old-worker-object"
        w["metadata"]["creationTimestamp"] = born
        w["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:40Z"
        w["status"]["phase"] = phase
    return ws


def _old_set_state(backend: str, service: dict, **old) -> tuple[dict, object]:
    job, obs = running_state(job_with(backoff=3), backend)
    job["spec"]["launcherCreationPolicy"] = "AtStartup"
    svc = {**obs.service, "spec": {**obs.service["spec"], "selector": service}}
    return job, replace(obs, service=svc, workers=None,
                        pods=[running_launcher(job, restarts=1, last_code=205), *_old_set(job, backend, **old)])


@pytest.mark.parametrize(("case", "backend", "service", "old", "made", "want"), [
    # the Service already keeps the workers' names out: the new worker Job now, beside the old pods
    ("narrowed", "job", LAUNCHER_ONLY, {}, True, LAUNCHER_ONLY),
    # not yet (a cache behind the patch): narrowed first, the Job on a later pass
    ("not-narrowed", "job", ALL, {}, False, LAUNCHER_ONLY),
    # a deleted predecessor's pods (made before this MPIJob): the same, their names withheld alike
    ("predecessor", "job", LAUNCHER_ONLY, {"born": "2025-01-01T11:59:00Z"}, True, LAUNCHER_ONLY),
    # a StatefulSet names its pods as the old ones: it could not make them before those are gone
    ("statefulset", "statefulset", LAUNCHER_ONLY, {}, False, LAUNCHER_ONLY),
    # every old pod ended (sshd exits 0): no old name resolves, every pod is selected again
    ("old-ended", "job", LAUNCHER_ONLY, {"phase": "Succeeded"}, True, ALL),
])
def test_the_new_worker_job_is_made_while_the_old_pods_stop_once_their_names_are_withheld(
        case, backend, service, old, made, want):
    job, obs = _old_set_state(backend, service, **old)
    p = run(job, obs, backend, **IN_PLACE)
    kinds = [c.obj["kind"] for c in p.creates if c.obj["metadata"]["name"] == "pi-worker"]
    assert bool(kinds) is made, p.creates
    assert _selector(p, obs) == want, p.patches
    assert not p.deletes, p.deletes


def test_in_place_the_new_workers_start_while_the_old_ones_stop_and_their_names_return_once_those_ended():
    """The Job backend, restarted in place. The worker Job deleted (Background) in the plan that sees
    the loss, beside the Service narrowed; on the next pass (the Job gone, its pods stopping) the new
    worker Job is made; its pods are the workers (the old ones stale: another Job's), not a new loss;
    the Service selects every pod again only once every old pod ended."""
    job, obs = _old_set_state("job", LAUNCHER_ONLY)
    p = run(job, obs, "job", **IN_PLACE)
    job, obs = apply_plan(job, obs, p)
    assert obs.workers is not None and obs.service["spec"]["selector"] == LAUNCHER_ONLY

    uid = obs.workers["metadata"]["uid"]
    new = workers(job, "job")
    for w in new:
        w["metadata"]["ownerReferences"][0]["uid"] = uid
    old = [x for x in obs.pods if x["metadata"]["labels"][names.JOB_ROLE_LABEL] == "worker"]
    launcher = running_launcher(job, restarts=1, last_code=205)
    both = replace(obs, pods=[launcher, *old, *new])
    assert children.workers_lost(ctx_of(job, both), obs.workers) is None
    p = run(job, both, "job", **IN_PLACE)
    assert not p.deletes and not p.creates, (p.deletes, p.creates)
    assert _selector(p, both) == LAUNCHER_ONLY, p.patches

    ended = replace(both, pods=[launcher, *_old_set(job, phase="Succeeded"), *new])
    p = run(job, ended, "job", **IN_PLACE)
    assert not p.deletes and not p.creates, (p.deletes, p.creates)
    assert _selector(p, ended) == ALL, p.patches
