"""The launcher's retry ledger under what a third review found (issue 41, items 3, 4, 8, 9, 10;
reconcilers/failure/retries.py, docs/architecture.md section 11): every failed attempt announced once
whatever their number (`many_attempts`), a disruption excusing the one failure it causes
(`pending_replacement`), a Job limit that is a real net in both pod restart modes (`safety_net`), the
count kept by the ledger, not the cache (`ledger_count`), and a drained launcher's exit 0 taken for
no finish (`drained`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from reconcilers import status as st
from reconcilers.defaults import with_defaults
from reconcilers.failure import ledger
from reconcilers.failure import restartpolicy as rp
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import Config
from tests.unit.sim import BACKENDS, apply_plan, job_finished, pod, run, running_state
from tests.unit.test_retries import (
    DT,
    READY,
    cond,
    events,
    failed_launcher,
    job_with,
    launcher_patch,
    with_pods,
    workers,
)


def stamped(p: dict, second: int) -> dict:
    """A launcher pod made at 12:MM:SS of the test's day (pods are made one after the other)."""
    p["metadata"]["creationTimestamp"] = f"2025-01-01T12:{second // 60:02d}:{second % 60:02d}Z"
    return p


def book_of(obs) -> ledger.Ledger:
    return ledger.read(obs.launcher)


def writes(p) -> int:
    return len(p.patches) + len(p.creates) + len(p.deletes) + (p.status is not None) + len(p.events)


def two_counted_failures(job: dict, obs, backend: str) -> tuple[dict, object]:
    """Two launcher pods failed one after the other, each announced and counted."""
    a, b = stamped(failed_launcher(job, 0, code=1), 0), stamped(failed_launcher(job, 1, code=1), 30)
    for pods in ([a], [a, b]):
        job, obs = apply_plan(job, obs, run(job, with_pods(obs, [*pods, *workers(job, backend)], failed=len(pods)),
                                            backend))
    assert (book_of(obs).failed, book_of(obs).counted) == (2, 2)
    return job, obs


# -- many_attempts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_attempts_each_announced_once_and_the_ledger_stays_small(backend):
    """backoffLimit 80 and 75 failed launcher pods, seen five at a time: each failure is announced once
    (one Restarting Event per pass that sees new ones, none after), the count is 75, and the ledger's
    size does not grow with the attempts. On the old ledger (the latest 50 kept) the oldest fell out and
    were announced again on every pass: 55 -> 60 -> 65, forever."""
    job, obs = running_state(job_with(backoff=80), backend)
    pods: list[dict] = []
    sizes = []
    for batch in range(15):
        pods += [stamped(failed_launcher(job, 5 * batch + i, code=1), 5 * batch + i) for i in range(5)]
        obs = with_pods(obs, [*pods, *workers(job, backend)], failed=len(pods))
        p = run(job, obs, backend)
        assert [e for e in events(p) if e[0] == st.R_RESTARTING], (batch, events(p))
        job, obs = apply_plan(job, obs, p)
        sizes.append(len(obs.launcher["metadata"]["annotations"][ledger.LEDGER]))
    assert book_of(obs).failed == 75 and book_of(obs).counted == 75
    assert max(sizes) < 200, sizes
    p = run(job, obs, backend)  # nothing new: Running again, once, and then nothing written, nothing said
    assert st.R_RESTARTING not in [e[0] for e in events(p)] and not p.patches, (p.patches, p.events)
    job, obs = apply_plan(job, obs, p)
    for _ in range(3):
        p = run(job, obs, backend)
        assert writes(p) == 0, (p.patches, p.status, p.events)
    assert cond(job, st.FAILED) is None


def test_many_attempts_made_in_one_second_are_each_announced():
    """Two launcher pods made in the same second (a disrupted one is replaced at once), the newer named
    before the older: the newer one's failure is news, whatever the order of their random names."""
    job, obs = running_state(job_with(backoff=3), "job")
    a = stamped(failed_launcher(job, 9, code=143, disrupted=True), 5)  # pi-launcher-abc9, evicted
    obs = with_pods(obs, [a, *workers(job, "job")], failed=0)
    job, obs = apply_plan(job, obs, run(job, obs, "job"))
    b = stamped(failed_launcher(job, 1, code=1), 5)  # pi-launcher-abc1, the same second
    p = run(job, with_pods(obs, [a, b, *workers(job, "job")], failed=1), "job")
    assert "pod pi-launcher-abc1) failed: exit code 1; counted, 1 of 3" in cond(p.status, st.RESTARTING)["message"]


def test_many_attempts_ledger_of_the_earlier_version_reads_on():
    """A ledger written by the previous release ({failed, seen, notCounted}) keeps its count: its
    not-counted attempts are off the count, and the attempts it lists are not announced again."""
    old = json.dumps({"failed": 3, "seen": ["pi-launcher-abc0#0", "pi-launcher-abc1#0", "pi-launcher-abc2#0"],
                      "notCounted": {"pi-launcher-abc1#0": {"worker": "pi-worker-1", "uid": "u", "why": "w"}}})
    book = ledger.parse(old)
    assert (book.failed, book.counted) == (3, 2)
    job, obs = running_state(job_with(backoff=3), "job")
    obs = replace(obs, launcher={**obs.launcher, "metadata": {**obs.launcher["metadata"],
                                                               "annotations": {ledger.LEDGER: old}}})
    pods = [failed_launcher(job, i, code=1) for i in range(3)]
    p = run(job, with_pods(obs, [*pods, *workers(job, "job")], failed=3), "job")
    assert st.R_RESTARTING not in [e[0] for e in events(p)], events(p)


# -- pending_replacement --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["statefulset"])
def test_pending_replacement_excuses_one_failure_and_the_budget_ends_the_run(backend):
    """backoffLimit 2, worker 1 evicted and its replacement never scheduled (Pending): the failure the
    eviction caused is not counted, each later one is, and the third counted failure ends the run
    BackoffLimitExceeded; the launcher Job's own limit stays 2 + 1 not counted + the net (4). On the
    old binding every failure until the worker ran Ready again was free: 8 failures, 0 counted, the
    Job's limit 11, never Failed. (The Job backend makes its launcher Job afresh with the workers,
    once; the failures after are its own: tests/unit/test_relaunch_workers.py.)"""
    job, obs = running_state(job_with(backoff=2), backend)
    evicted = workers(job, backend, disrupted=1)
    pending = pod(job, "worker", 1, phase="Pending", backend=backend)
    pending["metadata"]["uid"] = "pod-replacement-1"
    pods = [stamped(failed_launcher(job, 0, code=205), 0)]
    obs = with_pods(obs, [*pods, *evicted], failed=1)
    p = run(job, obs, backend)
    assert "not counted, 0 of 2 retries" in cond(p.status, st.RESTARTING)["message"]
    job, obs = apply_plan(job, obs, p)
    for i in range(1, 8):
        pods.append(stamped(failed_launcher(job, i, code=1), 20 * i))
        obs = with_pods(obs, [*pods, evicted[0], pending], failed=len(pods))
        p = run(job, obs, backend)
        job, obs = apply_plan(job, obs, p)
        if cond(job, st.FAILED) is not None:
            break
    failed = cond(job, st.FAILED)
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded", job["status"]
    assert i == 3 and "failed 3 time(s)" in failed["message"] and "(1 failure(s) not counted)" in failed["message"]
    assert obs.launcher["spec"]["backoffLimit"] <= 2 + 1 + rp.NET


def test_pending_replacement_binds_the_running_attempt_once():
    """The eviction seen while the launcher runs binds that attempt; seen again on every later pass (the
    evicted pod stays in the cache), it binds nothing more."""
    job, obs = running_state(job_with(backoff=1), "job")
    from tests.unit.test_retries import running_launcher

    obs = with_pods(obs, [running_launcher(job), *workers(job, "job", disrupted=0)])
    job, obs = apply_plan(job, obs, run(job, obs, "job"))
    assert list(book_of(obs).entries) == ["pi-launcher-abc0#0"]
    second = stamped(running_launcher(job, 1), 30)
    first = stamped(failed_launcher(job, 0, code=205), 0)
    obs = with_pods(obs, [first, second, *workers(job, "job", disrupted=0)], failed=1)
    job, obs = apply_plan(job, obs, run(job, obs, "job"))
    assert list(book_of(obs).entries) == ["pi-launcher-abc0#0"], book_of(obs)


# -- ledger_count ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_ledger_count_survives_failed_pods_removed(backend):
    """backoffLimit 2: two counted failures announced, then their pods removed (a user, the pod GC): the
    third failure still exceeds the budget. Counted from the cache, the count fell to 1 and the run
    went on."""
    job, obs = running_state(job_with(backoff=2), backend)
    job, obs = two_counted_failures(job, obs, backend)
    c = stamped(failed_launcher(job, 2, code=1), 60)
    p = run(job, with_pods(obs, [c, *workers(job, backend)], failed=1), backend)
    failed = cond(p.status, st.FAILED)
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded" and "failed 3 time(s)" in failed[
        "message"], p.status
    assert p.status["replicaStatuses"]["Launcher"]["failed"] == 3


# -- safety_net -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("restart_policy", "limit"), [("Never", 3 + 1), ("OnFailure", 3 + 2)])
def test_safety_net_is_one_failure_wide_in_both_pod_modes(restart_policy, limit):
    """With the operator away the Job controller stops the launcher one counted failure after the
    operator would have: it fails a Job of Never pods at `failed > backoffLimit` and one of OnFailure
    pods at `restarts >= backoffLimit`, so the OnFailure Job's limit is one higher. On the old limit
    (+1 for both) an OnFailure launcher failed at the operator's own count: no net, and no room for a
    disruption not bound yet."""
    job = with_defaults(job_with(restart_policy, backoff=3))
    lau = __import__("reconcilers.desired", fromlist=["launcher"]).launcher(
        job, Config(container_restart_rules=False, worker_backend="job"))
    assert lau["spec"]["template"]["spec"]["restartPolicy"] == restart_policy
    assert lau["spec"]["backoffLimit"] == limit
    # the Job controller's own rule, applied to the operator's last allowed count (3) plus one
    fails_at = (lambda n: n >= limit) if restart_policy == "OnFailure" else (lambda n: n > limit)
    assert not fails_at(3 + 1) and fails_at(3 + 2)


def test_safety_net_a_disruption_raises_the_on_failure_limit_by_one():
    job, obs = running_state(job_with("OnFailure", backoff=1), "job")
    obs = replace(obs, launcher={**obs.launcher, "spec": {**obs.launcher["spec"], "template": {
        **obs.launcher["spec"]["template"], "spec": {**obs.launcher["spec"]["template"]["spec"],
                                                     "restartPolicy": "OnFailure"}}}})
    obs = with_pods(obs, [failed_launcher(job, code=143, disrupted=True), *workers(job, "job")], failed=1)
    assert launcher_patch(run(job, obs, "job"))["spec"]["backoffLimit"] == 1 + 1 + rp.NET_ON_FAILURE


# -- drained --------------------------------------------------------------------------------------------------


def drained_launcher(job: dict) -> dict:
    """The launcher pod a drain evicted, whose mpirun exited 0 on SIGTERM."""
    return stamped(pod(job, "launcher", 0, phase="Succeeded", conditions=[DT, READY], containerStatuses=[{
        "name": "launcher", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]), 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_drained_launcher_exit_0_is_no_finish_and_runs_again(backend):
    """backoffLimit 0, a drain: the launcher pod carries DisruptionTarget and exited 0, its Job
    completed. Not Succeeded, not Failed: Restarting says the attempt is not counted; the launcher Job
    is deleted (Foreground) with its ledger carried on the ConfigMap; once it is gone a new launcher
    Job is created carrying that ledger, and it runs to Succeeded."""
    job, obs = running_state(job_with(backoff=0), backend)
    obs = replace(obs, pods=[drained_launcher(job), *workers(job, backend, disrupted=1)],
                  launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0))
    p = run(job, obs, backend)
    assert cond(p.status, st.SUCCEEDED) is None and cond(p.status, st.FAILED) is None, p.status
    msg = cond(p.status, st.RESTARTING)["message"]
    assert "launcher pod pi-launcher-abc0 was disrupted (EvictionByEvictionAPI" in msg and "not counted" in msg, msg
    assert msg.endswith("the launcher Job is made afresh."), msg
    # (on the Job backend the worker Job is made afresh too: its worker 1 is being deleted)
    deletes = [(d.ref.kind, d.ref.name, d.propagation) for d in p.deletes]
    assert deletes == [("Job", "pi-launcher", "Foreground")] + ([("Job", "pi-worker", "Background")] if backend == "job"
                                                                 else []), deletes
    carried = next(x.patch for x in p.patches if x.ref.kind == "ConfigMap")
    book = ledger.parse(carried["metadata"]["annotations"][ledger.LEDGER])
    assert (book.failed, book.counted) == (1, 0)
    # Foreground: the pod goes first, the Job (still Complete) after: it decides nothing meanwhile
    going = {**obs.launcher, "metadata": {**obs.launcher["metadata"], "deletionTimestamp": "2025-01-01T12:01:00Z"}}
    g = run(job, replace(obs, launcher=going, pods=list(workers(job, backend))), backend)
    assert cond(g.status or job["status"], st.SUCCEEDED) is None and not g.creates, g.status
    job, obs = apply_plan(job, obs, p)
    assert obs.launcher is None
    # the launcher Job is gone: a new one, with the carried ledger and a limit that leaves that attempt out
    p = run(job, replace(obs, pods=list(workers(job, backend))), backend)
    (new,) = [c.obj for c in p.creates if c.obj["kind"] == "Job" and c.obj["metadata"]["name"] == "pi-launcher"]
    assert ledger.read(new).failed == 1 and new["spec"]["backoffLimit"] == 0 + rp.NET  # the Job ignores it
    job, obs = apply_plan(job, obs, p)
    done = stamped(pod(job, "launcher", 1, phase="Succeeded", containerStatuses=[{
        "name": "launcher", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]), 90)
    obs = replace(obs, pods=[done, *workers(job, backend)],
                  launcher=job_finished(obs.launcher, "Complete", succeeded=1, active=0, ready=0))
    p = run(job, obs, backend)  # Open MPI's exit 0 waits for its log (docs/architecture.md 9.1)
    assert [r.pod for r in p.read_logs] == ["pi-launcher-abc1"] and cond(p.status or {}, st.SUCCEEDED) is None
    p = run(job, obs, backend, reports={done["metadata"]["uid"]: LauncherReport(done["metadata"]["uid"])})
    assert cond(p.status, st.SUCCEEDED) is not None, p.status


def test_drained_launcher_that_failed_is_retried_by_its_job():
    """The same drain where mpirun exited 143: the Job's podFailurePolicy ignores it, a new pod runs;
    the operator recreates nothing."""
    job, obs = running_state(job_with(backoff=0), "job")
    obs = with_pods(obs, [failed_launcher(job, code=143, disrupted=True), *workers(job, "job")], failed=0)
    p = run(job, obs, "job")
    assert not p.deletes and cond(p.status, st.FAILED) is None
    assert cond(p.status, st.RESTARTING)["message"].endswith("the launcher Job starts a new pod.")


@pytest.mark.parametrize("backend", BACKENDS)
def test_ledger_count_carried_when_a_resume_makes_the_launcher_afresh(backend):
    """Kueue injects a nodeSelector into a suspended MPIJob that had used 2 of its retries: the resume
    recreates the launcher Job from the new template, and the new Job carries the count (it started
    from 0 before issue 41: a preempted MPIJob got its whole budget back)."""
    from tests.unit.sim import at, converge

    job, obs = running_state(job_with(backoff=3), backend)
    job, obs = two_counted_failures(job, obs, backend)
    job["spec"]["runPolicy"]["suspend"] = True
    job, obs, stopped = converge(job, replace(obs, pods=[]), backend, now=at(100))
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {"flavor": "a100"}
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs, plans = converge(job, obs, backend, now=at(200), rounds=5)
    # (the suspend deleted the launcher Job that had run: afresh.stop_for_suspend)
    assert "pi-launcher" in [d.ref.name for p in stopped + plans for d in p.deletes]
    assert obs.launcher["spec"]["template"]["spec"]["nodeSelector"] == {"flavor": "a100"}
    assert (book_of(obs).failed, book_of(obs).counted) == (2, 2)

