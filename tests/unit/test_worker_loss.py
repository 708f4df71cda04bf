"""The verdict on an Open MPI launcher's exit 0 after a worker's loss (reconcilers/failure/workerloss.py,
reconcilers/failure/evidence.py, docs/architecture.md section 9.1): a loss is recorded (condition WorkerLost,
naming the launcher pod) from pods that ended or are being deleted, or deletes the controller saw,
never from a Ready count or from times of two clocks; an exit 0 after a recorded loss waits for the
launcher's log, which decides: a lost daemon or rank -> Failed/WorkerLostDuringRun, none ->
Succeeded, unreadable -> Failed. Scenario names follow issue 35: setup_loss, heartbeat,
readiness_flap, clock_skew, elastic."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from reconcilers import status as st
from reconcilers.failure import evidence, runs
from reconcilers.failure import workerloss as wl
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import Observed, Plan
from reconcilers.validation import validate
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

PRRTE_LINE = "PRTE has lost communication with a remote daemon."
CLEAN, CUT, UNREADABLE = "clean", "cut", "unreadable"


def t(seconds: float) -> str:
    return st.fmt_time(at(seconds))


def cond(job_or_status: dict, ctype: str) -> dict | None:
    return st.get_condition(job_or_status.get("status", job_or_status), ctype)


def open_mpi(workers: int = 2, annotations: dict | None = None, launcher_args: list | None = None) -> dict:
    job = mpijob(workers=workers, spec={"mpiImplementation": "OpenMPI"})
    if annotations:
        job["metadata"]["annotations"] = annotations
    if launcher_args is not None:
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"] = launcher_args
    return job


def launcher(job: dict, attempt: int, created: float = 0, end: float | None = None, code: int = 0) -> dict:
    """Launcher pod of `attempt` (0, 1, ...), created at `created` (the API server's clock): Running,
    or ended with `code`."""
    if end is None:
        p = pod(job, "launcher", attempt, startTime=t(created + 1))
    else:
        p = pod(job, "launcher", attempt, phase="Succeeded" if code == 0 else "Failed", startTime=t(created + 1),
                containerStatuses=[{"name": "launcher", "state": {"terminated": {"exitCode": code,
                                                                                "finishedAt": t(end)}}}])
    p["metadata"]["creationTimestamp"] = t(created)
    return p


def lost_worker(job: dict, backend: str, index: int, asked: float, ended: bool = True) -> dict:
    """A worker whose delete was asked for at `asked` (kubectl delete: deletionTimestamp = the request
    + 30 s of grace); its sshd exited 0 at once (`ended`) or is still stopping."""
    p = pod(job, "worker", index, phase="Succeeded" if ended else "Running", backend=backend,
            containerStatuses=[{"name": "worker", "state": {"terminated": {"exitCode": 0, "finishedAt": t(asked)}}}]
            if ended else [])
    p["metadata"].update(deletionTimestamp=t(asked + 30), deletionGracePeriodSeconds=30)
    return p


def step(job: dict, obs: Observed, backend: str, now: float, **kw):
    p = run(job, obs, backend, now=at(now), **kw)
    job, obs = apply_plan(job, obs, p)
    return job, obs, p


def lose_worker_0(backend: str, job: dict, obs: Observed, attempt: dict, asked: float = 20):
    """Worker 0's delete is asked for at `asked` while `attempt` runs; the operator sees it 0.6 s later."""
    pods = [attempt, lost_worker(job, backend, 0, asked), pod(job, "worker", 1, backend=backend)]
    obs = workers_ready(replace(obs, pods=pods), 1)
    if backend == "job":  # the Indexed Job counts the stopped sshd's index as completed
        obs = replace(obs, workers=with_status(obs.workers, succeeded=1, completedIndexes="0"))
    return step(job, obs, backend, asked + 0.6)


def worker_back(backend: str, job: dict, obs: Observed, attempt: dict, now: float):
    """The replacement worker 0 is Ready (the Job backend's worker Job was recreated first)."""
    obs = replace(obs, pods=[attempt, pod(job, "worker", 0, backend=backend), pod(job, "worker", 1, backend=backend)])
    job, obs, _ = converge(job, obs, backend, now=at(now))
    obs = workers_ready(obs, 2)
    return converge(job, obs, backend, now=at(now + 1))[:2]


def exits(job: dict, obs: Observed, backend: str, done: dict, now: float, failed: int = 0, **kw) -> Plan:
    """The launcher Job completes with `done` (a launcher pod that exited 0) in the cache."""
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", when=t(now - 1), succeeded=1, active=0,
                                             failed=failed),
                  pods=[done, *[p for p in obs.pods if p["metadata"]["labels"] != done["metadata"]["labels"]]])
    return run(job, obs, backend, now=at(now), **kw)


def report(kind: str, uid: str) -> dict:
    return {uid: {CLEAN: LauncherReport(uid), CUT: LauncherReport(uid, cut_short=PRRTE_LINE),
                  UNREADABLE: LauncherReport(uid, unreadable="500 InternalError: dial tcp: connection refused")}[kind]}


def verdict(p: Plan) -> str:
    if cond(p.status or {}, st.SUCCEEDED):
        return "Succeeded"
    failed = cond(p.status or {}, st.FAILED)
    return f"Failed/{failed['reason']}" if failed else "none"


def assert_clean_success(p: Plan) -> None:
    """Succeeded on a clean log, with no loss noted: the plain success message."""
    assert verdict(p) == "Succeeded", p.status
    assert cond(p.status, st.SUCCEEDED)["message"].endswith("successfully completed."), p.status
    assert cond(p.status, wl.WORKER_LOST) is None and not [e for e in p.events if e.type == "Warning"]


def assert_unread_success(p: Plan) -> None:
    """Succeeded with no loss seen and a log that cannot be read: said so, with a Warning Event."""
    assert verdict(p) == "Succeeded", p.status
    assert "the launcher's log could not be read" in cond(p.status, st.SUCCEEDED)["message"], p.status
    assert [e.reason for e in p.events if e.type == "Warning"] == [wl.R_LOG_UNREADABLE], p.events


def judged(job: dict, obs: Observed, backend: str, done: dict, now: float, log: str, failed: int = 0) -> Plan:
    """The exit 0 asks for `done`'s log and nothing else; planned again with the report, the verdict."""
    first = exits(job, obs, backend, done, now, failed)
    assert verdict(first) == "none" and [r.pod for r in first.read_logs] == [done["metadata"]["name"]], first
    assert first.read_logs[0].container == "launcher" and first.requeue_after is not None
    return exits(job, obs, backend, done, now + 0.2, failed, reports=report(log, done["metadata"]["uid"]))


# -- setup_loss: a worker lost before mpirun started; a loss that cut ranks short ------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("log,want", [(CLEAN, "Succeeded"), (CUT, "Failed/WorkerLostDuringRun"),
                                      (UNREADABLE, "Failed/WorkerLostDuringRun")])
def test_setup_loss_the_exit_0_after_a_loss_is_judged_by_the_launchers_log(backend, log, want):
    """Worker 0 is lost 20 s into the launcher pod's run and comes back; the MPIJob is Running again
    (Restarting cleared) and the record stays; mpirun exits 0 at 60 s. Its log decides: `sleep 40;
    mpirun ...` with the worker replaced during the sleep prints pi (Succeeded); PRRTE's lost daemon
    means ranks cut short; a log that cannot be read is never a silent success."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    job, obs, _ = lose_worker_0(backend, job, obs, a)
    assert "worker pi-worker-0 (pod pi-worker-0" in cond(job, st.RESTARTING)["message"]
    rec = cond(job, wl.WORKER_LOST)
    assert rec["status"] == "True" and rec["message"].startswith("launcher pod pi-launcher-abc0: worker pi-worker-0")
    conds = job["status"]["conditions"]  # before the True conditions: the last one is the state
    assert conds[-1]["type"] == st.RESTARTING and all(c["status"] != "True" for c in conds[:conds.index(rec)])
    job, obs = worker_back(backend, job, obs, a, now=23)
    assert st.is_true(job["status"], st.RUNNING) and cond(job, st.RESTARTING) is None
    assert wl.recorded_attempt(job["status"]) == "pi-launcher-abc0"
    p = judged(job, obs, backend, launcher(job, 0, end=60), now=61, log=log)
    assert verdict(p) == want, p.status
    if want == "Succeeded":
        assert "pi-worker-0 was lost while the launcher ran; its log shows no lost daemon" in \
            cond(p.status, st.SUCCEEDED)["message"]
        assert cond(p.status, wl.WORKER_LOST) is None
    else:
        message = cond(p.status, st.FAILED)["message"]
        assert "pi-worker-0 was lost" in message and evidence.WORKER_LOSS_ANNOTATION in message, message
        assert (PRRTE_LINE if log == CUT else "could not be read") in message, message
        assert any(e.type == "Warning" and "spec.mpiImplementation" in e.message for e in p.events)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loss_seen_together_with_the_exit_is_judged_too(backend):
    """PRRTE exits within milliseconds of the loss: the plan that sees the worker deleting sees the
    exit 0 too, before any record. The log is asked for all the same."""
    job, obs = running_state(open_mpi(), backend)
    obs = replace(obs, pods=[obs.pods[0], lost_worker(job, backend, 0, 20, ended=False), obs.pods[2]])
    p = judged(job, obs, backend, launcher(job, 0, end=20), now=21, log=CUT)
    assert verdict(p) == "Failed/WorkerLostDuringRun"


def test_a_delete_the_controller_saw_is_a_loss_though_the_replacement_is_cached():
    """The StatefulSet replaced worker 0 between two reconciles: the cache shows the new pod only,
    the delete event (Inputs.gone_workers) shows the loss."""
    job, obs = running_state(open_mpi(), "statefulset")
    old = lost_worker(job, "statefulset", 0, 20)
    new = pod(job, "worker", 0, backend="statefulset")
    obs = replace(obs, pods=[launcher(job, 0), new, obs.pods[2]])
    job, obs, _ = step(job, obs, "statefulset", 21, gone_workers=(old,))
    assert wl.recorded_attempt(job["status"]) == "pi-launcher-abc0"
    assert verdict(judged(job, obs, "statefulset", launcher(job, 0, end=40), now=41, log=CLEAN)) == "Succeeded"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_verdict_waits_for_the_pod_cache_when_the_job_counts_first(backend):
    """The launcher Job is Complete but the pod cache still shows its pod Running: wait, read nothing."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    job, obs, _ = lose_worker_0(backend, job, obs, a)
    job, obs = worker_back(backend, job, obs, a, now=23)
    obs = replace(obs, launcher=job_finished(obs.launcher, "Complete", when=t(40), succeeded=1, active=0))
    p = run(job, obs, backend, now=at(41))
    assert verdict(p) == "none" and not p.read_logs and p.requeue_after is not None


# -- retries: the record belongs to one launcher pod -------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seen_running", [True, False])
def test_a_retried_launcher_that_succeeds_on_a_clean_log_ends_succeeded_with_no_loss_noted(backend, seen_running):
    """Attempt 0 lost worker 0 and failed (mpirun non-zero); the Job's retry succeeds. Its record is
    over: the retry's exit 0 on a clean log is a plain success."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    job, obs, _ = lose_worker_0(backend, job, obs, a)
    a_failed = launcher(job, 0, end=21, code=1)
    obs = replace(obs, launcher=with_status(obs.launcher, failed=1, active=0, ready=0))
    job, obs = worker_back(backend, job, obs, a_failed, now=22)
    assert cond(job, wl.WORKER_LOST) is None, "attempt 0 failed: its record is over"
    retry = launcher(job, 1, created=33)
    if seen_running:
        obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                      pods=[a_failed, retry, *[p for p in obs.pods if p is not a_failed]])
        job, obs, _ = step(job, obs, backend, 34)
        assert st.is_true(job["status"], st.RUNNING) and cond(job, wl.WORKER_LOST) is None
    p = judged(job, obs, backend, launcher(job, 1, created=33, end=50), now=51, failed=1, log=CLEAN)
    assert_clean_success(p)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_record_left_from_a_failed_attempt_is_dropped_and_the_retrys_loss_recorded_afresh(backend):
    job, obs = running_state(open_mpi(), backend)
    job, obs, _ = lose_worker_0(backend, job, obs, launcher(job, 0))
    a_failed = launcher(job, 0, end=21, code=1)
    retry = launcher(job, 1, created=33)
    obs = replace(obs, launcher=with_status(obs.launcher, failed=1, active=1, ready=1),
                  pods=[a_failed, retry, *[pod(job, "worker", i, backend=backend) for i in range(2)]])
    job, obs, _ = converge(job, obs, backend, now=at(34))
    obs = workers_ready(obs, 2)
    job, obs, p = step(job, obs, backend, 35)
    assert p.status is not None and st.is_true(p.status, st.RUNNING) and cond(p.status, wl.WORKER_LOST) is None
    job, obs, _ = lose_worker_0(backend, job, obs, retry, asked=40)
    assert wl.recorded_attempt(job["status"]) == "pi-launcher-abc1"


# -- a launcher that waits on after its loss (rule 5) ------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("deadline,ends", [(None, "runPolicy.activeDeadlineSeconds is unset"),
                                           (240, "runPolicy.activeDeadlineSeconds (240s) ends it")])
def test_a_launcher_still_running_60s_after_its_loss_is_said_once_and_its_exit_still_judged(backend, deadline, ends):
    job = open_mpi()
    if deadline is not None:
        job["spec"]["runPolicy"]["activeDeadlineSeconds"] = deadline
    job, obs = running_state(job, backend)
    attempt = launcher(job, 0)
    job, obs, p = lose_worker_0(backend, job, obs, attempt)  # the loss recorded at 20.6
    assert cond(job, wl.WORKER_LOST)["reason"] == wl.R_WORKER_LOST
    job, obs = worker_back(backend, job, obs, attempt, now=25)
    job, obs, p = step(job, obs, backend, 50)
    assert cond(job, wl.WORKER_LOST)["reason"] == wl.R_WORKER_LOST and not [e for e in p.events if e.type == "Warning"]
    assert p.requeue_after is not None and p.requeue_after <= wl.WAITS_AFTER_S - (50 - 20.6) + 0.01, p.requeue_after
    job, obs, p = step(job, obs, backend, 81)
    record = cond(job, wl.WORKER_LOST)
    assert record["status"] == "True" and record["reason"] == wl.R_LAUNCHER_WAITS, record
    assert wl.recorded_attempt(job["status"]) == attempt["metadata"]["name"], record
    assert ends in record["message"] and f"Delete launcher pod {attempt['metadata']['name']}" in record["message"]
    assert [e.reason for e in p.events if e.type == "Warning"] == [wl.R_LAUNCHER_WAITS], p.events
    job, obs, p = step(job, obs, backend, 120)
    assert not [e for e in p.events if e.type == "Warning"], p.events  # said once
    p = judged(job, obs, backend, launcher(job, 0, end=130), now=131, log=CUT)
    assert verdict(p) == "Failed/WorkerLostDuringRun", p.status
    assert "worker pi-worker-0 was lost" in cond(p.status, st.FAILED)["message"], p.status


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_launcher_that_exits_within_60s_of_its_loss_is_not_said_to_wait(backend):
    job, obs = running_state(open_mpi(), backend)
    attempt = launcher(job, 0)
    job, obs, _ = lose_worker_0(backend, job, obs, attempt)
    job, obs = worker_back(backend, job, obs, attempt, now=25)
    p = judged(job, obs, backend, launcher(job, 0, end=60), now=61, log=CLEAN)
    assert verdict(p) == "Succeeded" and not [e for e in p.events if e.reason == wl.R_LAUNCHER_WAITS]


# -- losses that are none ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_object_created_after_the_launcher_started_is_no_loss(backend):
    """The worker Job was refused for a while (quota) and created 20 s after the launcher pod."""
    job, obs, _ = converge(mpijob(spec={"mpiImplementation": "OpenMPI", "launcherCreationPolicy": "AtStartup"}),
                           backend=backend)
    workers = copy.deepcopy(obs.workers)
    workers["metadata"]["creationTimestamp"] = t(20)
    pods = [pod(job, "worker", i, backend=backend) for i in range(2)]
    for p in pods:
        p["metadata"]["creationTimestamp"] = t(21)
    obs = workers_ready(replace(obs, workers=workers, launcher=with_status(obs.launcher, active=1, ready=1),
                                pods=[launcher(job, 0), *pods]), 2)
    job, obs, _ = converge(job, obs, backend, now=at(22))
    assert st.is_true(job["status"], st.RUNNING) and cond(job, wl.WORKER_LOST) is None
    p = judged(job, obs, backend, launcher(job, 0, end=60), now=61, log=CLEAN)
    assert_clean_success(p)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scale_up_while_running_is_no_loss(backend):
    job, obs = running_state(open_mpi(), backend)
    obs = replace(obs, pods=[launcher(job, 0), *obs.pods[1:]])
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    job, obs, _ = converge(job, obs, backend, now=at(30))
    assert cond(job, wl.WORKER_LOST) is None, job["status"]
    assert_clean_success(judged(job, obs, backend, launcher(job, 0, end=60), now=61, log=CLEAN))


def test_a_scale_down_removes_a_worker_without_a_loss():
    job, obs = running_state(open_mpi(), "statefulset")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 1
    obs = workers_ready(replace(obs, pods=[launcher(job, 0), obs.pods[1], lost_worker(job, "statefulset", 1, 30)]), 1)
    job, obs, _ = converge(job, obs, "statefulset", now=at(31))
    assert cond(job, wl.WORKER_LOST) is None and cond(job, st.RESTARTING) is None, job["status"]
    assert_clean_success(judged(job, obs, "statefulset", launcher(job, 0, end=60), now=61, log=CLEAN))


def test_other_mpis_record_nothing():
    """MPICH and Intel MPI fail on a lost host (the Job retries): no record, no read."""
    job, obs = running_state(mpijob(spec={"mpiImplementation": "MPICH"}), "statefulset")
    job, obs, _ = lose_worker_0("statefulset", job, obs, launcher(job, 0))
    assert cond(job, st.RESTARTING)["status"] == "True" and cond(job, wl.WORKER_LOST) is None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["annotation", "elastic"])
def test_elastic_the_exit_code_policy_trusts_the_exit(backend, how):
    """A launcher that recovers from losses itself (horovodrun --host-discovery-script), or an MPIJob
    annotated ExitCode: a loss sets Restarting, no record, and its exit 0 is a success."""
    if how == "annotation":
        job = open_mpi(annotations={evidence.WORKER_LOSS_ANNOTATION: evidence.EXIT_CODE})
    else:
        job = open_mpi(launcher_args=["-np", "2", "--host-discovery-script", "/etc/mpi/discover_hosts.sh",
                                      "python", "train.py"])
    job, obs = running_state(job, backend)
    job, obs, _ = lose_worker_0(backend, job, obs, launcher(job, 0))
    assert cond(job, st.RESTARTING)["status"] == "True" and cond(job, wl.WORKER_LOST) is None
    p = exits(job, obs, backend, launcher(job, 0, end=60), now=61)
    assert verdict(p) == "Succeeded" and not p.read_logs


@pytest.mark.parametrize("value,ok", [("Evidence", True), ("ExitCode", True), ("exitcode", False), ("", False)])
def test_the_worker_loss_annotation_is_validated(value, ok):
    errors = validate(open_mpi(annotations={evidence.WORKER_LOSS_ANNOTATION: value}), None)  # type: ignore[arg-type]
    paths = [e.path for e in errors]
    assert (f"metadata.annotations[{evidence.WORKER_LOSS_ANNOTATION}]" not in paths) == ok, errors


# -- heartbeat and readiness_flap: a Ready count that falls is no loss ------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_heartbeat_pods_not_ready_while_their_node_misses_heartbeats_are_no_loss(backend):
    """The node's heartbeats stop for 45 s and more: the node controller turns every pod's Ready False
    (they run on); then the kubelet is back and they are Ready again. Nothing is recorded, Restarting
    never shows, and the exit 0 after it is a plain success on its clean log."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    not_ready = [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]
    pods = [a, *[pod(job, "worker", i, backend=backend, conditions=not_ready) for i in range(2)]]
    writes = []
    for now in (60, 70, 80, 105):
        job, obs, p = step(job, workers_ready(replace(obs, pods=pods), 0), backend, now)
        writes.append(p)
        assert cond(job, st.RESTARTING) is None and cond(job, wl.WORKER_LOST) is None, job["status"]
    assert all(q.status is None or cond(q.status, st.RESTARTING) is None for q in writes)
    obs = workers_ready(replace(obs, pods=[a, *[pod(job, "worker", i, backend=backend) for i in range(2)]]), 2)
    job, obs, _ = converge(job, obs, backend, now=at(110))
    p = judged(job, obs, backend, launcher(job, 0, end=120), now=121, log=CLEAN)
    assert_clean_success(p)


@pytest.mark.parametrize("backend", BACKENDS)
def test_readiness_flap_is_no_loss(backend):
    """A readiness probe that fails every other period: the Ready count goes 2, 1, 2, 0, 2, ..."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    obs = replace(obs, pods=[a, *obs.pods[1:]])
    for i, ready in enumerate([1, 2, 0, 2, 1, 2]):
        job, obs, _ = step(job, workers_ready(obs, ready), backend, 30 + 5 * i)
        assert cond(job, wl.WORKER_LOST) is None and cond(job, st.RESTARTING) is None, job["status"]
    p = judged(job, obs, backend, launcher(job, 0, end=60), now=61, log=CLEAN)
    assert_clean_success(p)


# -- clock_skew: nothing compares times of two clocks -----------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(backend=hs.sampled_from(BACKENDS), operator_skew=hs.integers(-120, 120), kubelet_skew=hs.integers(-120, 120),
       lose=hs.booleans())
def test_clock_skew_never_changes_the_verdict(backend, operator_skew, kubelet_skew, lose):
    """The operator's clock (every `now`) and the kubelet's (the pods' startTime and finishedAt) are
    shifted by up to 2 minutes against the API server's (creation and deletion times): a healthy run
    with a worker pod created after Running is a success with no loss noted, and a run that lost a
    worker notes it, whatever the skew. (Before: a worker pod created 2 s or more after Running's
    time, the operator's clock, counted as a replacement: with the API server 5 s ahead, Failed.)"""
    def now(s: float) -> float:
        return s + operator_skew

    job, obs, _ = converge(open_mpi(), backend=backend, now=at(now(0)))
    a = launcher(job, 0, created=1)
    a["status"]["startTime"] = t(2 + kubelet_skew)
    workers = [pod(job, "worker", i, backend=backend) for i in range(2)]
    for w in workers:
        w["metadata"]["creationTimestamp"] = t(8)  # after Running (5) in the API server's clock
    obs = workers_ready(replace(obs, launcher=with_status(obs.launcher, active=1, ready=1), pods=[a, *workers]), 2)
    job, obs, _ = converge(job, obs, backend, now=at(now(5)))
    assert st.is_true(job["status"], st.RUNNING)
    if lose:
        job, obs, _ = step(job, replace(obs, pods=[a, lost_worker(job, backend, 0, 20, ended=False), workers[1]]),
                           backend, now(21))
    done = launcher(job, 0, created=1, end=40 + kubelet_skew)
    done["status"]["startTime"] = t(2 + kubelet_skew)
    p = judged(job, obs, backend, done, now=now(41), log=CLEAN)
    if lose:
        assert verdict(p) == "Succeeded" and "pi-worker-0 was lost" in cond(p.status, st.SUCCEEDED)["message"]
    else:
        assert_clean_success(p)


# -- suspend: workers a suspend stopped are no loss of the resumed run -------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ended", [11, 15])
def test_workers_a_suspend_stopped_are_no_loss_of_the_run_the_resume_starts(backend, ended):
    """Suspended at 10 (the workers' deletes asked for then), resumed at 11.3; the new launcher pod is
    created at 11 (the API server's second) while the old workers still stop, until `ended`. No
    Restarting, no record; the exit 0 is a plain success on its clean log."""
    job, obs = running_state(open_mpi(), backend)
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, _ = converge(job, obs, backend, now=at(10))
    old = [lost_worker(job, backend, i, 10, ended=ended == 11) for i in range(2)]
    for w in old:
        w["metadata"]["creationTimestamp"] = t(0)
    ready = "readyReplicas" if backend == "statefulset" else "ready"
    # (the suspend deleted the launcher Job that had run: the resume makes it afresh)
    obs = replace(obs, pods=old, workers=with_status(obs.workers, **{ready: 0}))
    if backend == "job":
        obs = replace(obs, workers=with_status(obs.workers, succeeded=2, completedIndexes="0,1"))
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, resume = step(job, obs, backend, 11.3)
    if obs.launcher is None:
        job, obs, _ = step(job, replace(obs, pods=[]), backend, 11.4)
        obs = replace(obs, pods=old)
    a = launcher(job, 1, created=11)
    obs = replace(obs, pods=[a, *old], launcher=with_status(obs.launcher, active=1, ready=1))
    job, obs, seen = step(job, obs, backend, ended + 0.5, gone_workers=tuple(old))
    obs = replace(obs, pods=[a])
    job, obs, more = converge(job, obs, backend, now=at(ended + 1))
    new = [pod(job, "worker", i, backend=backend) for i in range(2)]
    obs = workers_ready(replace(obs, pods=[a, *new]), 2)
    job, obs, last = converge(job, obs, backend, now=at(ended + 2))
    assert st.is_true(job["status"], st.RUNNING), job["status"]
    every = [resume, seen, *more, *last]
    assert not [e for q in every for e in q.events if e.reason == st.R_RESTARTING]
    assert all(cond(q.status, wl.WORKER_LOST) is None for q in every if q.status is not None)
    p = judged(job, obs, backend, launcher(job, 1, created=11, end=40), now=41, log=CLEAN)
    assert_clean_success(p)


# -- the happy path writes nothing more ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_without_a_loss_never_writes_the_record_and_reads_one_log(backend):
    """No loss: three status writes (Created, Running, Succeeded), as before; the exit 0 asks for its
    launcher pod's log once (one GET per finished launcher attempt), and the wait writes nothing."""
    job, obs, plans = converge(open_mpi(), backend=backend)
    obs = workers_ready(replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                                pods=[launcher(job, 0, created=5)] + [pod(job, "worker", i, backend=backend)
                                                                      for i in range(2)]), 2)
    job, obs, more = converge(job, obs, backend, now=at(6))
    done = launcher(job, 0, created=5, end=60)
    waiting = exits(job, obs, backend, done, now=61)
    p = exits(job, obs, backend, done, now=61.2, reports=report(CLEAN, done["metadata"]["uid"]))
    statuses = [q.status for q in [*plans, *more, waiting, p] if q.status is not None]
    assert all(cond(s, wl.WORKER_LOST) is None for s in statuses)
    assert len(statuses) == 3, "Created, Running, Succeeded"
    assert waiting.writes == 0 and [r.uid for r in waiting.read_logs] == [done["metadata"]["uid"]]
    assert not any(q.read_logs for q in [*plans, *more, p])
    assert_clean_success(p)


# -- property: every exit 0 is read; a loss counts only in its own attempt -----------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(backend=hs.sampled_from(BACKENDS), lost=hs.integers(1, 70), a_end=hs.integers(5, 30),
       backoff=hs.integers(10, 20), run_s=hs.integers(2, 30), a_exit=hs.sampled_from([0, 1]),
       log=hs.sampled_from([CLEAN, CUT, UNREADABLE]))
def test_an_exit_0_is_judged_by_its_log_and_by_a_loss_only_of_its_own_attempt(backend, lost, a_end, backoff, run_s,
                                                                             a_exit, log):
    """Attempt 0 runs [0, a_end] and exits `a_exit`; if it failed, attempt 1 is created at a_end +
    backoff, runs run_s seconds and exits 0. Worker 0's delete is asked for at `lost` (seen 0.6 s
    later) unless that is after the end. The log is read on every exit 0 (section 9.1) and a lost
    daemon in it fails the run; a loss matters only when it fell in the run of the attempt that
    exited 0: then an unreadable log fails it too, else that exit 0 is a success, said so."""
    job, obs = running_state(open_mpi(), backend)
    a = launcher(job, 0)
    if a_exit == 0:
        done, end, failed = launcher(job, 0, end=a_end), a_end, 0
        attempts = [(0, a_end, a)]
    else:
        r_start = a_end + backoff
        done, end, failed = launcher(job, 1, created=r_start, end=r_start + run_s), r_start + run_s, 1
        attempts = [(0, a_end, a), (r_start, end, launcher(job, 1, created=r_start))]
    a_failed = launcher(job, 0, end=a_end, code=1)
    if lost < end:
        running = [p for s, e, p in attempts if s < lost < e]
        if running:
            cur = running[0]
            others = [a_failed] if cur is not a else []
        else:  # between the attempts (or at an attempt's creation second): attempt 0 failed
            cur, others = a_failed, []
        obs = replace(obs, launcher=with_status(obs.launcher, failed=failed if cur is not a else 0))
        job, obs, _ = lose_worker_0(backend, job, obs, cur, asked=lost)
        obs = replace(obs, pods=[*others, *obs.pods])
        job, obs = worker_back(backend, job, obs, cur, now=lost + 3)
    start = 0 if a_exit == 0 else end - run_s
    own = start < lost < end
    p = judged(job, obs, backend, done, now=end + 1, failed=failed, log=log)
    if not own and log != CUT:
        assert_clean_success(p) if log == CLEAN else assert_unread_success(p)
        return
    assert verdict(p) == ("Succeeded" if log == CLEAN else "Failed/WorkerLostDuringRun"), p.status


# -- the pieces --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("meta,want", [
    ({}, None),
    ({"deletionTimestamp": t(50), "deletionGracePeriodSeconds": 30}, at(20)),
    ({"deletionTimestamp": t(50)}, at(50)),  # no grace period given: the timestamp
    ({"deletionTimestamp": t(50), "deletionGracePeriodSeconds": -1}, at(50)),  # nonsense: the timestamp
    ({"deletionTimestamp": t(50), "deletionGracePeriodSeconds": 0}, at(50)),
])
def test_delete_asked_at(meta, want):
    assert runs.delete_asked_at({"metadata": meta}) == want


@pytest.mark.parametrize("text,cut", [
    ("pi is approximately 3.1415926535897\n", None),
    ("Warning: Permanently added 'pi-worker-0' (ECDSA)\nWall clock time = 1.2\n", None),
    ("--------\nPRTE has lost communication with a remote daemon.\n\n  HNP daemon   : [prterun-pi-launcher-1@0,0]\n",
     "PRTE has lost communication with a remote daemon."),
    ("ORTE has lost communication with a remote daemon.\n", "ORTE has lost communication with a remote daemon."),
    ("ORTE has lost communication with its daemon located on node:\n  hostname:  pi-worker-1\n",
     "ORTE has lost communication with its daemon located on node:"),
    ("prterun noticed that process rank 1 with PID 0 on node pi-worker-0 exited on signal 9 (Killed).\n",
     "prterun noticed that process rank 1 with PID 0 on node pi-worker-0 exited on signal 9 (Killed)."),
    ("", None),
])
def test_the_launchers_log_is_scanned_for_a_lost_daemon_or_rank(text, cut):
    assert evidence.scan("u", text) == LauncherReport("u", cut_short=cut)


@pytest.mark.parametrize("annotations,args,want", [
    ({}, ["-n", "2", "/opt/pi"], evidence.EVIDENCE),
    ({}, ["--host-discovery-script", "/etc/mpi/discover_hosts.sh", "python", "t.py"], evidence.EXIT_CODE),
    ({}, ["sh", "-c", "horovodrun --host-discovery-script /etc/mpi/discover_hosts.sh python t.py"], evidence.EXIT_CODE),
    ({evidence.WORKER_LOSS_ANNOTATION: "Evidence"}, ["--host-discovery-script", "/etc/mpi/discover_hosts.sh"],
     evidence.EVIDENCE),
    ({evidence.WORKER_LOSS_ANNOTATION: "ExitCode"}, ["-n", "2", "/opt/pi"], evidence.EXIT_CODE),
    ({evidence.WORKER_LOSS_ANNOTATION: "bogus"}, ["-n", "2"], evidence.EVIDENCE),  # validation refuses it
])
def test_the_worker_loss_policy(annotations, args, want):
    assert evidence.policy(open_mpi(annotations=annotations, launcher_args=args)) == want


def test_a_record_time_is_the_operators_and_only_informative():
    """The record's lastTransitionTime is when the plan saw the loss: no verdict reads it."""
    job, obs = running_state(open_mpi(), "statefulset")
    job, obs, _ = lose_worker_0("statefulset", job, obs, launcher(job, 0), asked=20)
    rec = cond(job, wl.WORKER_LOST)
    assert st.parse_time(rec["lastTransitionTime"]) - at(20) <= timedelta(seconds=1)
