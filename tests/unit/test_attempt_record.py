"""Launcher pods held by a finalizer until their end is recorded (issue 50 item 4;
reconcilers/failure/hold.py, docs/architecture.md section 11 "The record of each attempt's end").

The biggest risk of a finalizer is a pod that hangs Terminating for good: every way an MPIJob's life
ends releases its held pods (`test_a_held_pod_is_always_released`), and a pod whose end is not yet
recorded is kept (`test_a_pod_whose_end_is_not_recorded_is_kept`)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from reconcilers import desired, names
from reconcilers import status as st
from reconcilers.failure import hold, ledger
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs
from tests.unit.sim import BACKENDS, NOW, KeyGen, apply_plan, job_finished, mpijob, pod, run, running_state

DT = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
      "message": "Eviction API: evicting", "lastTransitionTime": "2025-01-01T12:00:10Z"}
F = names.ATTEMPT_RECORD_FINALIZER


def held(p: dict, launcher_job: dict | None) -> dict:
    p = copy.deepcopy(p)
    p["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking", F]
    if launcher_job is not None:
        p["metadata"]["ownerReferences"][0]["uid"] = launcher_job["metadata"]["uid"]
    return p


def ended(job: dict, code: int, launcher_job: dict, disrupted: bool = False, deleting: bool = False) -> dict:
    p = pod(job, "launcher", 0, phase="Succeeded" if code == 0 else "Failed", conditions=[DT] if disrupted else [],
            containerStatuses=[{"name": "launcher", "restartCount": 0,
                                "state": {"terminated": {"exitCode": code}}}])
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:20Z"
    return held(p, launcher_job)


def released(p) -> list[str]:
    return [x.ref.name for x in p.patches if x.ref.kind == "Pod" and x.strategic
            and x.patch == {"metadata": {"$deleteFromPrimitiveList/finalizers": [F]}}]


def test_the_launcher_template_carries_the_finalizer_unless_pods_cannot_be_patched():
    job = mpijob()
    from reconcilers.defaults import with_defaults
    job = with_defaults(job)
    assert F in desired.launcher(job, Config())["spec"]["template"]["metadata"]["finalizers"]
    off = Config(features_off=((names.ATTEMPT_RECORD_FEATURE, "no patch pods"),))
    assert F not in (desired.launcher(job, off)["spec"]["template"]["metadata"].get("finalizers") or [])
    # the workers' templates carry none (their StatefulSet would wait on it to make a pod of the same name)
    assert not desired.workers(job, Config())["spec"]["template"]["metadata"].get("finalizers")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("code", [0, 1, 143])
def test_drained_while_away(backend, code):
    """The operator is away while a drain evicts the launcher (DisruptionTarget; mpirun exits `code` on
    SIGTERM, Open MPI 5's 0) and deletes its pod: the pod stays, held, so the operator back finds it
    and judges nothing of it: the run goes on free (backoffLimit 0), never Succeeded. The pod is
    released only once its end is recorded (the launcher Job made afresh, or the attempt announced)."""
    job, obs = running_state(mpijob(run_policy={"backoffLimit": 0}), backend)
    drained = ended(job, code, obs.launcher, disrupted=True, deleting=True)
    after = (job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0) if code == 0
             else {**obs.launcher, "status": {"active": 0, "failed": 0}})
    obs = replace(obs, pods=[drained, *obs.pods[1:]], launcher=after)
    p = run(job, obs, backend)
    assert st.get_condition(p.status, st.SUCCEEDED) is None and st.get_condition(p.status, st.FAILED) is None
    assert "not counted" in st.get_condition(p.status, st.RESTARTING)["message"]
    assert not released(p), "released before its end is recorded"
    job, obs = apply_plan(job, obs, p)
    if obs.launcher is not None:  # the Job made afresh is being deleted (Foreground): the pod goes first
        going = copy.deepcopy(obs.launcher)
        if code == 0:
            going["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:30Z"
        obs = replace(obs, launcher=going)
    p = run(job, obs, backend)
    assert released(p) == [drained["metadata"]["name"]], p.patches
    assert st.get_condition(p.status or job["status"], st.SUCCEEDED) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_drained_exit_0_is_held_until_its_launcher_job_is_made_afresh(backend):
    """A drain evicts the launcher, mpirun exits 0 (Open MPI 5 on SIGTERM), and its end is announced
    before the launcher Job shows Complete (the Job controller lags its pods). Its Job cannot run it
    again, so the relaunch reads this pod (afresh.interrupted_end): the pod stays held until its Job is
    made afresh. Released once announced (the e2e run on the StatefulSet backend), the pod went first
    and the Job's Complete read as the MPIJob's success."""
    job, obs = running_state(mpijob(run_policy={"backoffLimit": 0}), backend)
    drained = ended(job, 0, obs.launcher, disrupted=True, deleting=True)
    obs = replace(obs, pods=[drained, *obs.pods[1:]], launcher={**obs.launcher, "status": {"active": 1}})
    p = run(job, obs, backend)
    assert "not counted" in st.get_condition(p.status, st.RESTARTING)["message"]
    job, obs = apply_plan(job, obs, p)
    p = run(job, obs, backend)  # announced, its Job not Complete yet
    assert not released(p), "released before its launcher Job is made afresh"
    job, obs = apply_plan(job, obs, p)
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0))
    p = run(job, obs, backend)
    assert st.get_condition(p.status or job["status"], st.SUCCEEDED) is None
    assert ("Job", "pi-launcher") in [(d.ref.kind, d.ref.name) for d in p.deletes], "not made afresh"


def _active(backend):
    job, obs = running_state(mpijob(), backend)
    return job, obs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["mpijob-deleted", "finished", "finished-clean-all", "ttl-due", "old-job",
                                  "launcher-job-deleting", "suspended-running", "announced-failure"])
def test_a_held_pod_is_always_released(backend, case):
    job, obs = _active(backend)
    launcher_job = obs.launcher
    pod_ = held(obs.pods[0], launcher_job)  # Running
    if case == "mpijob-deleted":
        job["metadata"]["deletionTimestamp"] = "2025-01-01T12:01:00Z"
    elif case in ("finished", "finished-clean-all", "ttl-due"):
        pod_ = ended(job, 0, launcher_job)
        job["status"]["conditions"].append({"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded"})
        job["status"]["completionTime"] = "2025-01-01T11:00:00Z"
        if case == "finished-clean-all":
            job["spec"]["runPolicy"]["cleanPodPolicy"] = "All"
        if case == "ttl-due":
            job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 60
    elif case == "old-job":
        pod_["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-launcher-job-made-afresh"
        pod_["status"]["phase"] = "Failed"
    elif case == "launcher-job-deleting":
        obs = replace(obs, launcher={**launcher_job, "metadata": {**launcher_job["metadata"],
                                                                  "deletionTimestamp": "2025-01-01T12:01:00Z"}})
    elif case == "suspended-running":
        job["spec"]["runPolicy"]["suspend"] = True
    elif case == "announced-failure":
        pod_ = ended(job, 1, launcher_job)
        book = ledger.Ledger(1, 1, 0, pod_["metadata"].get("creationTimestamp", ""),
                             ((pod_["metadata"]["name"], 0),))
        launcher_job = copy.deepcopy(launcher_job)
        launcher_job["metadata"].setdefault("annotations", {})[ledger.LEDGER] = book.to_json()
        launcher_job["status"] = {"failed": 1, "active": 1}
        obs = replace(obs, launcher=launcher_job)
    obs = replace(obs, pods=[pod_, *obs.pods[1:]])
    p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen()))
    if case == "suspended-running":
        # the suspend's plan deletes the launcher Job, and a release never goes before a Job's delete
        # (a refused one would stop the plan): the next plan releases
        assert not released(p) and ("Job", "pi-launcher") in [(d.ref.kind, d.ref.name) for d in p.deletes]
        assert p.requeue_after is not None and p.requeue_after <= hold.RECHECK_S
        job["status"] = p.status
        obs = replace(obs, launcher={**launcher_job, "metadata": {**launcher_job["metadata"],
                                                                  "deletionTimestamp": "2025-01-01T12:01:00Z"}})
        p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen()))
    assert released(p) == [pod_["metadata"]["name"]], (p.patches, p.status)
    if case == "ttl-due":
        assert p.delete_mpijob
    if case == "finished-clean-all":
        assert ("Pod", pod_["metadata"]["name"]) in [(d.ref.kind, d.ref.name) for d in p.deletes]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["running", "failed-not-announced", "succeeded-awaiting-verdict"])
def test_a_pod_whose_end_is_not_recorded_is_kept(backend, case):
    """Running, or ended and not yet in the ledger or the verdict: kept (a failure this plan announces is
    released by the next one, `hold.RECHECK_S` later)."""
    job, obs = _active(backend)
    job["spec"]["mpiImplementation"] = "OpenMPI"
    pod_ = held(obs.pods[0], obs.launcher)
    if case == "failed-not-announced":
        pod_ = ended(job, 1, obs.launcher)
        obs = replace(obs, launcher={**obs.launcher, "status": {"failed": 1, "active": 1}})
    elif case == "succeeded-awaiting-verdict":
        pod_ = ended(job, 0, obs.launcher)
        obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0))
    obs = replace(obs, pods=[pod_, *obs.pods[1:]])
    p = run(job, obs, backend)
    assert not released(p), p.patches
    if case != "running":
        assert p.requeue_after is not None and p.requeue_after <= hold.RECHECK_S + 1
        job, obs = apply_plan(job, obs, p)
        if case == "failed-not-announced":
            assert released(run(job, obs, backend)) == [pod_["metadata"]["name"]]


def test_the_orphans_of_a_gone_mpijob_are_released():
    pods = [held(pod(mpijob(), "launcher", 0, phase="Succeeded"), None), pod(mpijob(), "worker", 0)]
    assert [x.ref.name for x in hold.release_all(pods, "gone")] == [pods[0]["metadata"]["name"]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_clean_run_costs_one_release_and_nothing_at_bring_up(backend):
    """Writes of a whole life without a loss: the bring-up's are unchanged (no pod is released before
    its end), and the end adds one: the launcher pod's release, sent by the plan after the verdict's
    (the record first)."""
    from tests.unit.sim import at, converge, with_status, workers_ready
    from tests.unit.test_worker_loss import exits, launcher, open_mpi, report

    job, obs, plans = converge(open_mpi(), backend=backend)
    running = launcher(job, 0, created=5)
    obs = workers_ready(replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                                pods=[held(running, obs.launcher)] + [pod(job, "worker", i, backend=backend)
                                                                       for i in range(2)]), 2)
    job, obs, more = converge(job, obs, backend, now=at(6))
    assert not any(released(q) for q in [*plans, *more])
    done = held(launcher(job, 0, created=5, end=60), obs.launcher)
    p = exits(job, obs, backend, done, now=61.2, reports=report("clean", done["metadata"]["uid"]))
    assert st.is_true(p.status, st.SUCCEEDED) and not released(p) and p.requeue_after <= hold.RECHECK_S
    job["status"] = p.status
    obs = replace(obs, pods=[done, *obs.pods[1:]],
                  launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0))
    after = run(job, obs, backend, now=at(62.5))
    assert released(after) == [done["metadata"]["name"]]
    assert after.writes == 1 + sum(1 for x in after.patches if x.ref.kind != "Pod"), after.patches


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("seen_generation", "want"), [
    (1, "Succeeded"),  # the kubelet wrote its end before the delete: it finished, then was evicted
    (2, None),  # written after the delete: the eviction ended it (no finish: made afresh)
    (None, None),  # no observedGeneration (an older kubelet, kwok): the condition decides, as before
])
def test_evicted_after_finish(backend, seen_generation, want):
    """The launcher exited 0 after its ranks finished, then a drain evicted it (the Eviction API sets
    DisruptionTarget on a Succeeded pod too) before the verdict was written (the operator away, the pod
    held). Its end is its own: the MPIJob is Succeeded, not run again. Told by the pod alone: a graceful
    delete raises metadata.generation, and the kubelet's terminal status records the generation it saw."""
    from reconcilers.failure.evidence import LauncherReport

    job, obs = running_state(mpijob(run_policy={"backoffLimit": 0}, spec={"mpiImplementation": "OpenMPI"}), backend)
    done = ended(job, 0, obs.launcher, disrupted=True, deleting=True)
    done["metadata"]["generation"] = 2
    if seen_generation is not None:
        done["status"]["observedGeneration"] = seen_generation
    obs = replace(obs, pods=[done, *obs.pods[1:]],
                  launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0))
    uid = done["metadata"]["uid"]
    p = run(job, obs, backend, reports={uid: LauncherReport(uid)})
    succeeded = st.get_condition(p.status, st.SUCCEEDED)
    assert (succeeded["status"] if succeeded else None) == ("True" if want else None), p.status
    deleted = [(d.ref.kind, d.ref.name) for d in p.deletes]
    assert (("Job", "pi-launcher") in deleted) == (want is None), deleted
