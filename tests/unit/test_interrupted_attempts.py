"""An attempt a suspend or a disruption ended is neither a finish nor a failure (issue 50 items 1 and
2; reconcilers/verdict.py, reconcilers/failure/retries.py `interruption`, `stop_for_suspend`;
docs/architecture.md section 11, "An attempt a suspend or a disruption ended").

Table-driven over every class of the launcher's exit code (0, 1-127 under restartPolicy ExitCode and
not, 128-255), both backends and each MPI, with runPolicy.backoffLimit 0: the run is never Succeeded
nor Failed for it, and no retry is counted."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from reconcilers import status as st
from reconcilers.failure import ledger
from reconcilers.failure.evidence import LauncherReport
from tests.unit.sim import BACKENDS, apply_plan, job_finished, mpijob, pod, run, running_state, with_status

MPIS = ("OpenMPI", "MPICH", "Intel")
CODES = (0, 1, 3, 137, 143, 255)
POLICIES = ("Never", "ExitCode")
DT = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
      "message": "Eviction API: evicting", "lastTransitionTime": "2025-01-01T12:00:10Z"}
PRRTE_LINE = "PRRTE has lost communication with a remote daemon."


def every_case(name: str, values: list[str]):
    """Every backend, MPI, launcher restartPolicy and exit code class, and `name` over `values`."""
    def mark(f):
        for arg, vals in (("backend", BACKENDS), ("impl", MPIS), ("policy", POLICIES), ("code", CODES),
                          (name, values)):
            f = pytest.mark.parametrize(arg, vals)(f)
        return f
    return mark


def job_of(impl: str, policy: str) -> dict:
    job = mpijob(run_policy={"backoffLimit": 0}, spec={"mpiImplementation": impl})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = policy
    return job


def ended_launcher(job: dict, code: int, index: int = 0, conditions: list | None = None) -> dict:
    return pod(job, "launcher", index, phase="Succeeded" if code == 0 else "Failed", conditions=conditions or [],
               containerStatuses=[{"name": "launcher", "restartCount": 0,
                                   "state": {"terminated": {"exitCode": code,
                                                            "reason": "Completed" if code == 0 else "Error"}}}])


def job_after(launcher: dict, policy: str, code: int) -> dict:
    """What the Job controller makes of its pod's end: Complete on exit 0, Failed by the podFailurePolicy
    on 1-127 under ExitCode, else one failure counted and a retry (its limit is a failure wider)."""
    if code == 0:
        return job_finished(launcher, "Complete", succeeded=1, active=0, ready=0)
    if policy == "ExitCode" and 1 <= code <= 127:
        return job_finished(launcher, "Failed", reason="PodFailurePolicy", failed=1, active=0, ready=0)
    return with_status(launcher, failed=1, active=0, ready=0)


def verdict(p) -> str | None:
    for ctype in (st.SUCCEEDED, st.FAILED):
        c = st.get_condition(p.status or {}, ctype)
        if c is not None and c.get("status") == "True":
            return f"{ctype}/{c.get('reason')}"
    return None


def reports_for(obs, cut: bool) -> dict:
    """Every launcher pod's log read: PRRTE's lost-daemon line in it (`cut`) or a clean one."""
    return {p["metadata"]["uid"]: LauncherReport(p["metadata"]["uid"], cut_short=PRRTE_LINE if cut else None)
            for p in obs.pods if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "launcher"}


def counted(job: dict, obs) -> int:
    book = ledger.read(obs.launcher) if obs.launcher is not None else ledger.parse(
        ((obs.config_map or {}).get("metadata", {}).get("annotations") or {}).get(ledger.LEDGER))
    return book.counted


# -- item 1: preempted ----------------------------------------------------------------------------------


@every_case("seen", ["after-the-suspend", "with-the-suspend"])
def test_preempted(backend, impl, policy, code, seen):
    """Kueue preempts: runPolicy.suspend true. The launcher's mpirun gets SIGTERM and exits `code`
    (Open MPI 5's exits 0), its Job completes, fails or counts a failure; seen by the plan after the one
    that saw the suspend, or in the same. Nothing is judged or counted while suspended (neither
    Succeeded nor Failed, replicaStatuses.Launcher.failed 0); the launcher Job that ran is deleted,
    and the resume makes it afresh with nothing counted."""
    job, obs = running_state(job_of(impl, policy), backend)
    job["spec"]["runPolicy"]["suspend"] = True
    if seen == "after-the-suspend":
        p = run(job, obs, backend)
        assert verdict(p) is None, p.status
        assert ("Job", "pi-launcher", "Foreground") in [(d.ref.kind, d.ref.name, d.propagation) for d in p.deletes]
        going = copy.deepcopy(obs.launcher)
        going["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:30Z"
        job["status"] = p.status
        obs = replace(obs, launcher=going)
    # the launcher's end, as the pod and Job controllers report it
    ended = ended_launcher(job, code)
    obs = replace(obs, pods=[ended, *obs.pods[1:]], launcher=job_after(obs.launcher, policy, code))
    for reports in ({}, reports_for(obs, cut=True)):
        p = run(job, obs, backend, reports=reports)
        assert verdict(p) is None, p.status
        assert st.is_true(p.status or job["status"], st.SUSPENDED)
        assert (p.status or job["status"])["replicaStatuses"]["Launcher"].get("failed", 0) == 0
        assert not p.read_logs
    job, obs = apply_plan(job, obs, p)
    # the old launcher Job and its pod gone; resumed
    obs = replace(obs, launcher=None, pods=[
        p_ for p_ in obs.pods if p_["metadata"]["labels"].get("training.kubeflow.org/job-role") != "launcher"])
    job["spec"]["runPolicy"]["suspend"] = False
    for _ in range(4):
        p = run(job, obs, backend)
        assert verdict(p) is None, p.status
        job, obs = apply_plan(job, obs, p)
        if obs.launcher is not None:
            break
        obs = replace(obs, pods=[])  # the stopped workers gone
    assert obs.launcher is not None, "the resume made no launcher Job"
    assert counted(job, obs) == 0 and ledger.read(obs.launcher).failed == 0
    assert job["status"]["replicaStatuses"]["Launcher"].get("failed", 0) == 0


def test_preempted_before_its_launcher_started_keeps_the_launcher_job():
    """A launcher Job made but whose pod never started (no pod, an empty status): a suspend stops it
    as before (suspended in place, deleting nothing): there is no attempt to leave unjudged."""
    from tests.unit.sim import converge
    job, obs, _ = converge(mpijob(), backend="job")
    assert obs.launcher is not None and not obs.pods
    job["spec"]["runPolicy"]["suspend"] = True
    p = run(job, obs, "job")
    assert not [d for d in p.deletes if d.ref.name == "pi-launcher"]
    assert {"spec": {"suspend": True}} in [x.patch for x in p.patches if x.ref.name == "pi-launcher"]


# -- item 2: a worker evicted -----------------------------------------------------------------------------


def evicted_worker(job: dict, backend: str, index: int = 1) -> dict:
    w = pod(job, "worker", index, backend=backend, conditions=[DT])
    w["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:40Z"
    return w


@every_case("seen", ["while-running", "with-the-exit"])
def test_evicted_worker(backend, impl, policy, code, seen):
    """Worker 1 evicted through the Eviction API (DisruptionTarget) while the launcher runs; mpirun
    exits `code` (PRRTE exits 0 after losing a daemon, its log showing it), with backoffLimit 0. The
    eviction was seen while the launcher ran, or only with its exit. The attempt is not judged: never
    Succeeded, WorkerLostDuringRun, PermanentExitCode nor BackoffLimitExceeded; nothing counted; a
    launcher Job that cannot run it again (Complete, or failed by its podFailurePolicy) is made afresh."""
    job, obs = running_state(job_of(impl, policy), backend)
    workers = [p for p in obs.pods if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "worker"]
    launcher_pod = obs.pods[0]
    if seen == "while-running":
        obs = replace(obs, pods=[launcher_pod, workers[0], evicted_worker(job, backend)])
        p = run(job, obs, backend)
        assert verdict(p) is None, p.status
        job, obs = apply_plan(job, obs, p)
    ended = ended_launcher(job, code)
    obs = replace(obs, pods=[ended, workers[0], evicted_worker(job, backend)],
                  launcher=job_after(obs.launcher, policy, code))
    for reports in ({}, reports_for(obs, cut=True)):
        p = run(job, obs, backend, reports=reports)
        assert verdict(p) is None, p.status
        restarting = st.get_condition(p.status or job["status"], st.RESTARTING)
        assert restarting is not None and "not counted" in restarting["message"], p.status
        assert "0 of 0 retries" in restarting["message"], restarting
        if st.job_outcome(obs.launcher) is not None:
            assert ("Job", "pi-launcher") in [(d.ref.kind, d.ref.name) for d in p.deletes], p.deletes
            book = ledger.parse(next(x.patch for x in p.patches if x.ref.kind == "ConfigMap")
                                ["metadata"]["annotations"][ledger.LEDGER])
            assert book.counted == 0 and book.failed == 1, book
        else:  # the Job retries by itself, its limit raised by the attempt not counted
            patch = next(x.patch for x in p.patches if x.ref.kind == "Job" and x.ref.name == "pi-launcher")
            assert ledger.parse(patch["metadata"]["annotations"][ledger.LEDGER]).counted == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_deleted_by_hand_is_still_judged(backend):
    """No DisruptionTarget (`kubectl delete pod`): Open MPI 5's exit 0 after it is judged from the
    launcher's log as before (Failed/WorkerLostDuringRun when it shows the lost daemon)."""
    job, obs = running_state(job_of("OpenMPI", "Never"), backend)
    gone = pod(job, "worker", 1, backend=backend)
    gone["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:40Z"
    obs = replace(obs, pods=[ended_launcher(job, 0), obs.pods[1], gone],
                  launcher=job_after(obs.launcher, "Never", 0))
    p = run(job, obs, backend, reports=reports_for(obs, cut=True))
    assert verdict(p) == "Failed/WorkerLostDuringRun", p.status


@pytest.mark.parametrize("backend", BACKENDS)
def test_evicted_worker_binds_one_attempt_not_the_next_jobs(backend):
    """Seen on the real node: the evicted worker's pod, gone from the cache but remembered (Inputs.disrupted),
    bound the launcher Job made afresh's next attempt too, and every exit 0 after was read as cut short
    by it: a run made afresh for ever. Its binding goes with the ledger to the new Job, so the next
    attempt's exit 0 is judged (Succeeded on a clean log)."""
    from reconcilers.plan import plan
    from reconcilers.types import Config, Inputs
    from tests.unit.sim import NOW, KeyGen

    def step(job, obs, **kw):
        p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen(), disrupted=(gone,), **kw))
        return (*apply_plan(job, obs, p), p)

    job, obs = running_state(job_of("OpenMPI", "Never"), backend)
    gone = evicted_worker(job, backend)
    fresh = [p for p in obs.pods if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "worker"]
    job, obs, p = step(job, replace(obs, pods=[obs.pods[0], *fresh]))
    obs = replace(obs, pods=[ended_launcher(job, 0), *fresh], launcher=job_after(obs.launcher, "Never", 0))
    job, obs, p = step(job, obs)
    assert ("Job", "pi-launcher") in [(d.ref.kind, d.ref.name) for d in p.deletes] and verdict(p) is None
    obs = replace(obs, launcher=None, pods=fresh)
    job, obs, p = step(job, obs)
    if obs.launcher is None:  # (the Job backend's workers made afresh first)
        job, obs, p = step(job, replace(obs, pods=fresh))
    assert obs.launcher is not None
    second = ended_launcher(job, 0, index=1)
    second["metadata"]["ownerReferences"][0]["uid"] = obs.launcher["metadata"]["uid"]
    obs = replace(obs, pods=[second, *fresh], launcher=job_after(obs.launcher, "Never", 0))
    job, obs, p = step(job, obs)
    job, obs, p = step(job, obs, reports=reports_for(obs, cut=False))
    assert verdict(p) == "Succeeded/MPIJobSucceeded", (p.status, p.deletes)
