"""A worker lost while a launcher attempt runs (reconcilers/workerloss.py, docs/architecture.md section 9):
recorded in the condition WorkerLost so that Open MPI 5's exit 0 after the loss ends Failed/
WorkerLostDuringRun even once Running has cleared Restarting; a retried launcher that succeeds ends
Succeeded; a worker Job created late, a scale-up or a scale-down is no loss; the happy path writes
nothing more."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from reconcilers import status as st
from reconcilers import workerloss as wl
from reconcilers.types import Observed
from tests.unit.sim import (
    BACKENDS,
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


def t(seconds: float) -> str:
    return st.fmt_time(at(seconds))


def cond(job_or_status: dict, ctype: str) -> dict | None:
    return st.get_condition(job_or_status.get("status", job_or_status), ctype)


def launcher(job: dict, attempt: int, start: float, end: float | None = None, code: int = 0) -> dict:
    """Launcher pod of `attempt` (0, 1, ...): Running from `start`, or ended at `end` with `code`."""
    if end is None:
        return pod(job, "launcher", attempt, startTime=t(start))
    return pod(job, "launcher", attempt, phase="Succeeded" if code == 0 else "Failed", startTime=t(start),
               containerStatuses=[{"name": "launcher", "state": {"terminated": {"exitCode": code,
                                                                               "finishedAt": t(end)}}}])


def lost_worker(job: dict, backend: str, index: int, at_s: float) -> dict:
    """A worker deleted at `at_s` (kubectl delete: deletionTimestamp = the request + 30 s of grace),
    whose sshd exited 0 at once."""
    p = pod(job, "worker", index, phase="Succeeded", backend=backend,
            containerStatuses=[{"name": "worker", "state": {"terminated": {"exitCode": 0, "finishedAt": t(at_s)}}}])
    p["metadata"].update(deletionTimestamp=t(at_s + 30), deletionGracePeriodSeconds=30)
    return p


def step(job: dict, obs: Observed, backend: str, now: float):
    p = run(job, obs, backend, now=at(now))
    job, obs = apply_plan(job, obs, p)
    return job, obs, p


def open_mpi(workers: int = 2) -> dict:
    return mpijob(workers=workers, spec={"mpiImplementation": "OpenMPI"})


def lose_worker_0(backend: str, job: dict, obs: Observed, attempt: dict, when: float = 20):
    """Worker 0 is lost at `when` while `attempt` runs; the operator sees it 0.6 s later."""
    pods = [attempt, lost_worker(job, backend, 0, when), pod(job, "worker", 1, backend=backend)]
    obs = workers_ready(replace(obs, pods=pods), 1)
    if backend == "job":  # the Indexed Job counts the stopped sshd's index as completed
        obs = replace(obs, workers=with_status(obs.workers, succeeded=1, completedIndexes="0"))
    return step(job, obs, backend, when + 0.6)


def worker_back(backend: str, job: dict, obs: Observed, attempt: dict, now: float):
    """The replacement worker 0 is Ready (the Job backend's worker Job was recreated first)."""
    obs = replace(obs, pods=[attempt, pod(job, "worker", 0, backend=backend), pod(job, "worker", 1, backend=backend)])
    job, obs, _ = converge(job, obs, backend, now=at(now))  # the Job backend: creates the worker Job again
    obs = workers_ready(obs, 2)
    return converge(job, obs, backend, now=at(now + 1))[:2]


def launcher_exits(job: dict, obs: Observed, backend: str, done: dict, when: float, now: float, failed: int = 0):
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", when=t(when), succeeded=1, active=0,
                                             failed=failed),
                  pods=[done, *[p for p in obs.pods if p["metadata"]["labels"] != done["metadata"]["labels"]]])
    return run(job, obs, backend, now=at(now))


# -- 1. Open MPI 5 exits 0 after the replacement worker is Ready ---------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loss_outlives_running_and_the_exit_0_after_it_fails_the_mpijob(backend):
    """The race seen on the real node (StatefulSet backend): worker 0 lost at 20 s, its replacement
    Ready at 23 s (Running again, Restarting cleared), PRRTE exits 0 at 26 s. Planned from the stored
    status alone (as after an operator restart), the MPIJob ends Failed/WorkerLostDuringRun."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0, start=0)
    job, obs, p = lose_worker_0(backend, job, obs, a)
    assert cond(job, st.RESTARTING)["status"] == "True"
    lost = cond(job, wl.WORKER_LOST)
    assert lost["status"] == "True" and lost["lastTransitionTime"] == t(20), job["status"]
    assert "pi-worker-0" in lost["message"] and "pi-launcher-abc0" in lost["message"], lost
    # before the True conditions, as the condition-order policy puts it: the last one is the state
    conds = job["status"]["conditions"]
    assert conds[-1]["type"] == st.RESTARTING and all(c["status"] != "True" for c in conds[:conds.index(lost)])
    job, obs = worker_back(backend, job, obs, a, now=23)
    assert st.is_true(job["status"], st.RUNNING) and cond(job, st.RESTARTING) is None
    assert cond(job, wl.WORKER_LOST)["status"] == "True", job["status"]
    p = launcher_exits(job, obs, backend, launcher(job, 0, start=0, end=26), when=26, now=27)
    failed = cond(p.status, st.FAILED)
    assert failed["status"] == "True" and failed["reason"] == "WorkerLostDuringRun", p.status
    assert cond(p.status, st.SUCCEEDED) is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seen_running", [True, False])
def test_a_retried_launcher_that_succeeds_ends_succeeded(backend, seen_running):
    """Attempt 0 lost worker 0 and failed (mpirun non-zero); the Job's retry (attempt 1, 12 s later)
    succeeds. Seen running, the retry drops the record in the write that says Running; not seen
    (it ran and ended between two reconciles), the record did not count and goes with Succeeded."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0, start=0)
    job, obs, _ = lose_worker_0(backend, job, obs, a)
    a_failed = launcher(job, 0, start=0, end=21, code=1)
    obs = replace(obs, launcher=with_status(obs.launcher, failed=1, active=0, ready=0))
    job, obs = worker_back(backend, job, obs, a_failed, now=22)
    assert cond(job, wl.WORKER_LOST) is None, "attempt 0 failed: its record is over"
    retry = launcher(job, 1, start=33)
    if seen_running:
        obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                      pods=[a_failed, retry, *[p for p in obs.pods if p is not a_failed]])
        job, obs, p = step(job, obs, backend, 34)
        assert st.is_true(job["status"], st.RUNNING) and cond(job, wl.WORKER_LOST) is None
    p = launcher_exits(job, obs, backend, launcher(job, 1, start=33, end=50), when=50, now=51, failed=1)
    assert cond(p.status, st.SUCCEEDED)["status"] == "True" and cond(p.status, st.FAILED) is None, p.status
    assert cond(p.status, wl.WORKER_LOST) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_record_left_from_a_failed_attempt_is_dropped_with_the_retrys_running(backend):
    """The record of attempt 0 is still stored when the retry runs (the operator was down): the
    write that makes the MPIJob Running drops it too; the retry's own loss is recorded afresh."""
    job, obs = running_state(open_mpi(), backend)
    job, obs, _ = lose_worker_0(backend, job, obs, launcher(job, 0, start=0))
    a_failed = launcher(job, 0, start=0, end=21, code=1)
    retry = launcher(job, 1, start=33)
    obs = replace(obs, launcher=with_status(obs.launcher, failed=1, active=1, ready=1),
                  pods=[a_failed, retry, *[pod(job, "worker", i, backend=backend) for i in range(2)]])
    job, obs, _ = converge(job, obs, backend, now=at(34))
    obs = workers_ready(obs, 2)
    job, obs, p = step(job, obs, backend, 35)
    assert p.status is not None and st.is_true(p.status, st.RUNNING) and cond(p.status, wl.WORKER_LOST) is None
    job, obs, _ = lose_worker_0(backend, job, obs, retry, when=40)
    assert cond(job, wl.WORKER_LOST)["lastTransitionTime"] == t(40) and "abc1" in cond(job, wl.WORKER_LOST)["message"]


# -- 2. workers that came late, or were asked for, are no loss ---------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_object_created_after_the_launcher_started_is_no_loss(backend):
    """The worker Job (or StatefulSet) was refused for a while (quota) and created 20 s after the
    launcher pod started (launcherCreationPolicy AtStartup); its pods came up at 21 s, the MPIJob ran
    from 22 s, and mpirun exited 0: Succeeded. (Before: the worker Job's creation during the launcher's
    run counted as a loss, Failed/WorkerLostDuringRun.)"""
    job, obs, _ = converge(mpijob(spec={"mpiImplementation": "OpenMPI", "launcherCreationPolicy": "AtStartup"}),
                           backend=backend)
    workers = copy.deepcopy(obs.workers)
    workers["metadata"]["creationTimestamp"] = t(20)
    pods = [pod(job, "worker", i, backend=backend) for i in range(2)]
    for p in pods:
        p["metadata"]["creationTimestamp"] = t(21)
    obs = workers_ready(replace(obs, workers=workers, launcher=with_status(obs.launcher, active=1, ready=1),
                                pods=[launcher(job, 0, start=0), *pods]), 2)
    job, obs, _ = converge(job, obs, backend, now=at(22))
    assert st.is_true(job["status"], st.RUNNING) and cond(job, wl.WORKER_LOST) is None
    p = launcher_exits(job, obs, backend, launcher(job, 0, start=0, end=60), when=60, now=61)
    assert cond(p.status, st.SUCCEEDED)["status"] == "True" and cond(p.status, st.FAILED) is None, p.status


@pytest.mark.parametrize("seen", [True, False])
def test_a_replacement_no_plan_saw_coming_is_a_loss(seen):
    """The StatefulSet replaced worker 0 between two reconciles (no plan saw it gone): a worker pod
    created 20 s after Running was set replaces a lost one. A plan that sees it records the loss
    (one status write); one that first sees the launcher's exit 0 fails the MPIJob all the same."""
    job, obs = running_state(open_mpi(), "statefulset")
    new = pod(job, "worker", 0, backend="statefulset")
    new["metadata"]["creationTimestamp"] = t(20)
    obs = replace(obs, pods=[launcher(job, 0, start=0), new, obs.pods[2]])
    if seen:
        job, obs, p = step(job, obs, "statefulset", 21)
        assert p.writes == 1 and p.status is not None and not p.events
        assert "pi-worker-0 was replaced" in cond(job, wl.WORKER_LOST)["message"]
        assert st.is_true(job["status"], st.RUNNING)
    p = launcher_exits(job, obs, "statefulset", launcher(job, 0, start=0, end=26), when=26, now=27)
    assert cond(p.status, st.FAILED)["reason"] == "WorkerLostDuringRun", p.status


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scale_up_while_running_is_no_loss(backend):
    """Worker replicas 2 -> 3 (elastic Horovod): the Ready count is below the new replicas until the
    third worker is up; that is no loss."""
    job, obs = running_state(open_mpi(), backend)
    obs = replace(obs, pods=[launcher(job, 0, start=0), *obs.pods[1:]])
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    job, obs, _ = converge(job, obs, backend, now=at(30))
    assert cond(job, wl.WORKER_LOST) is None, job["status"]
    p = launcher_exits(job, obs, backend, launcher(job, 0, start=0, end=60), when=60, now=61)
    assert cond(p.status, st.SUCCEEDED)["status"] == "True", p.status


def test_a_scale_down_removes_a_worker_without_a_loss():
    """Worker replicas 2 -> 1: the StatefulSet deletes worker 1, which was asked for."""
    job, obs = running_state(open_mpi(), "statefulset")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1
    obs = workers_ready(replace(obs, pods=[launcher(job, 0, start=0), obs.pods[1],
                                           lost_worker(job, "statefulset", 1, 30)]), 1)
    job, obs, _ = converge(job, obs, "statefulset", now=at(31))
    assert cond(job, wl.WORKER_LOST) is None, job["status"]
    p = launcher_exits(job, obs, "statefulset", launcher(job, 0, start=0, end=60), when=60, now=61)
    assert cond(p.status, st.SUCCEEDED)["status"] == "True", p.status


def test_other_mpis_record_nothing():
    """MPICH and Intel MPI fail on a lost host (the Job retries): no record, no extra write."""
    job, obs = running_state(mpijob(spec={"mpiImplementation": "MPICH"}), "statefulset")
    job, obs, _ = lose_worker_0("statefulset", job, obs, launcher(job, 0, start=0))
    assert cond(job, st.RESTARTING)["status"] == "True" and cond(job, wl.WORKER_LOST) is None


# -- 3. the happy path writes nothing more -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_without_a_loss_never_writes_the_record(backend):
    job, obs, plans = converge(open_mpi(), backend=backend)
    obs = workers_ready(replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                                pods=[launcher(job, 0, start=5)] + [pod(job, "worker", i, backend=backend)
                                                                     for i in range(2)]), 2)
    job, obs, more = converge(job, obs, backend, now=at(6))
    p = launcher_exits(job, obs, backend, launcher(job, 0, start=5, end=60), when=60, now=61)
    statuses = [q.status for q in [*plans, *more, p] if q.status is not None]
    assert all(cond(s, wl.WORKER_LOST) is None for s in statuses)
    assert len(statuses) == 3, "Created, Running, Succeeded"
    assert cond(p.status, st.SUCCEEDED)["status"] == "True"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ended", [11, 15])
def test_workers_a_suspend_stopped_are_no_loss_of_the_run_the_resume_starts(backend, ended):
    """The race CI met on the real node (launcherCreationPolicy AtStartup): suspended at 10, resumed at
    11.3, the new launcher pod starts at 11.4 (stored as 11) while the old workers' sshd, stopped by
    the suspend, ends at 11.x (stored as 11: the same second) or, resumed before they stopped, later.
    Their ends are no loss of the resumed run: no Restarting, no record, and its exit 0 is a success."""
    job, obs = running_state(open_mpi(), backend)
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend, now=at(10))
    old = [lost_worker(job, backend, i, ended) for i in range(2)]
    for w in old:
        w["metadata"]["creationTimestamp"] = t(0)
    ready = "readyReplicas" if backend == "statefulset" else "ready"
    obs = replace(obs, pods=old, workers=with_status(obs.workers, **{ready: 0}),
                  launcher=with_status(obs.launcher, active=0, ready=0))
    if backend == "job":  # the Indexed Job counts the stopped sshds' indexes as completed
        obs = replace(obs, workers=with_status(obs.workers, succeeded=2, completedIndexes="0,1"))
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, resume = step(job, obs, backend, 11.3)  # the Job backend deletes the worker Job
    assert cond(job, st.SUSPENDED)["lastTransitionTime"] == t(11)
    a = launcher(job, 1, start=11.4)
    a["metadata"]["creationTimestamp"] = t(11)
    obs = replace(obs, pods=[a, *old], launcher=with_status(obs.launcher, active=1, ready=1))
    job, obs, seen = step(job, obs, backend, ended + 0.5)  # the old pods still in the cache
    obs = replace(obs, pods=[a])  # gone; the Job backend creates its worker Job again
    job, obs, more = converge(job, obs, backend, now=at(ended + 1))
    new = [pod(job, "worker", i, backend=backend) for i in range(2)]
    for w in new:
        w["metadata"]["creationTimestamp"] = t(ended + 1)
    obs = workers_ready(replace(obs, pods=[a, *new]), 2)
    job, obs, last = converge(job, obs, backend, now=at(ended + 2))
    assert st.is_true(job["status"], st.RUNNING), job["status"]
    every = [resume, seen, *more, *last]
    assert not [e for q in every for e in q.events if e.reason == st.R_RESTARTING]
    assert all(cond(q.status, wl.WORKER_LOST) is None for q in every if q.status is not None)
    p = launcher_exits(job, obs, backend, launcher(job, 1, start=11.4, end=40), when=40, now=41)
    assert cond(p.status, st.SUCCEEDED)["status"] == "True" and cond(p.status, st.FAILED) is None, p.status


def test_a_worker_created_in_the_resumes_second_is_of_the_resumed_run():
    """Creation and the resume are stored in whole seconds: a pod created in the resume's second may be
    the resumed run's own, so its loss counts; one created a second before was stopped by the suspend."""
    resumed = {"conditions": [{"type": st.SUSPENDED, "status": "False", "reason": st.R_RESUMED,
                               "lastTransitionTime": t(11)}]}
    made = lambda s: {"metadata": {"creationTimestamp": t(s)}}  # noqa: E731
    assert wl.stopped_by_suspend(made(10), wl.resumed_at(resumed))
    assert not wl.stopped_by_suspend(made(11), wl.resumed_at(resumed))
    assert not wl.stopped_by_suspend({"metadata": {}}, wl.resumed_at(resumed))
    assert not wl.stopped_by_suspend(made(10), wl.resumed_at({}))  # never suspended
    suspended = {"conditions": [{**resumed["conditions"][0], "status": "True"}]}
    assert not wl.stopped_by_suspend(made(10), wl.resumed_at(suspended))


# -- the pieces --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("meta,status,want", [
    ({}, {"phase": "Running"}, None),
    ({"deletionTimestamp": t(50), "deletionGracePeriodSeconds": 30}, {"phase": "Running"}, at(20)),
    ({"deletionTimestamp": t(50)}, {"phase": "Running"}, at(50)),  # no grace period given: the timestamp
    # never later than now
    ({"deletionTimestamp": t(90), "deletionGracePeriodSeconds": 30}, {"phase": "Running"}, at(55)),
    ({}, {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"finishedAt": t(12)}}},
                                                      {"state": {"terminated": {"finishedAt": t(10)}}}]}, at(10)),
    ({}, {"phase": "Failed"}, at(55)),  # ended, no container told when: now
])
def test_pod_lost_at(meta, status, want):
    p = {"metadata": meta, "status": status}
    assert wl.pod_lost_at(p, at(55)) == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(backend=hs.sampled_from(BACKENDS), lost=hs.integers(0, 70), a_end=hs.integers(5, 30),
       backoff=hs.integers(10, 20), run_s=hs.integers(1, 30), a_exit=hs.sampled_from([0, 1]))
def test_an_exit_0_fails_exactly_when_its_own_attempt_lost_a_worker(backend, lost, a_end, backoff, run_s, a_exit):
    """Attempt 0 runs [0, a_end] and exits `a_exit`; if it failed, attempt 1 runs from a_end + backoff
    for run_s seconds and exits 0. Worker 0 is lost at `lost` (seen 0.6 s later) unless that is after
    the end. The MPIJob ends Failed/WorkerLostDuringRun iff the loss fell in the run of the attempt
    that exited 0, and Succeeded otherwise."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0, start=0)
    if a_exit == 0:
        done, end, failed = launcher(job, 0, start=0, end=a_end), a_end, 0
        attempts = [(0, a_end, a)]
    else:
        r_start = a_end + backoff
        done, end, failed = launcher(job, 1, start=r_start, end=r_start + run_s), r_start + run_s, 1
        attempts = [(0, a_end, a), (r_start, end, launcher(job, 1, start=r_start))]
    a_failed = launcher(job, 0, start=0, end=a_end, code=1)
    if lost < end:
        running = [p for s, e, p in attempts if s <= lost < e]
        if running:
            cur = running[0]
            others = [a_failed] if cur is not a else []
        else:  # between the attempts: attempt 0 failed, the retry is not there yet
            cur, others = a_failed, []
        obs = replace(obs, launcher=with_status(obs.launcher, failed=failed if cur is not a else 0))
        job, obs, _ = lose_worker_0(backend, job, obs, cur, when=lost)
        obs = replace(obs, pods=[*others, *obs.pods])
        job, obs = worker_back(backend, job, obs, cur, now=lost + 3)
    p = launcher_exits(job, obs, backend, done, when=end, now=end + 1, failed=failed)
    own = lost < end and lost >= (0 if a_exit == 0 else end - run_s)
    if own:
        assert cond(p.status, st.FAILED)["reason"] == "WorkerLostDuringRun", p.status
    else:
        assert cond(p.status, st.SUCCEEDED)["status"] == "True" and cond(p.status, st.FAILED) is None, p.status
