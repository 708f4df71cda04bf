"""Issue 50 item 5, `worker_exit_loop`: on the Job backend a worker whose command ends by itself
(`sshd` without `-D`, a script that returns) made the operator delete and recreate the worker Job
every second, forever, uncounted. Now each exit is counted in the status (condition WorkerExited,
no memory: every plan here starts from the status and the cluster alone, as after an operator
restart), the worker Job is made afresh 10 s, 20 s, 40 s ... (at most 360 s) after each, and the exit
past runPolicy.backoffLimit ends the MPIJob Failed with a message and a Warning Event naming the
worker, its pod and its exit (reconcilers/failure/workerexits.py, docs/architecture.md section 4)."""

from __future__ import annotations

import copy
import itertools
from dataclasses import replace

import pytest

from reconcilers import status as st
from reconcilers.failure import workerexits
from reconcilers.types import Observed
from tests.unit.sim import apply_plan, at, mpijob, pod, run, with_status


@pytest.mark.parametrize(("n", "want"), [(1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 320), (7, 360),
                                         (30, 360), (0, 10)])
def test_worker_exit_loop_delay_doubles_from_10s_to_6_minutes(n, want):
    assert workerexits.delay(n) == want


def _world(job: dict, obs, now: float, born: dict) -> object:
    """What the Job controller and the kubelet do: a worker Job's pods start when it is made and
    their command ends by itself 1 s later (exit 0, Completed: the index completes)."""
    w = obs.workers
    if w is None:
        return obs
    uid = w["metadata"]["uid"]
    born.setdefault(uid, now)
    done = now - born[uid] >= 1.0
    pods = [p for p in obs.pods if p["metadata"]["labels"].get("training.kubeflow.org/job-role") != "worker"]
    for i in range(2):
        p = pod(job, "worker", i, phase="Succeeded" if done else "Running")
        p["metadata"].update(name=f"pi-worker-{i}-{uid}", uid=f"pod-{i}-{uid}")
        p["metadata"]["ownerReferences"][0]["uid"] = uid
        if done:
            p["status"]["containerStatuses"] = [{"name": "worker", "state": {"terminated": {
                "exitCode": 0, "reason": "Completed"}}}]
        pods.append(p)
    ws = {"succeeded": 2, "completedIndexes": "0-1", "ready": 0} if done else {"ready": 2, "active": 2}
    return replace(obs, pods=pods, workers=with_status(w, **ws))


def simulate(backoff: int, until: float, tick: float = 0.5):
    """WaitForWorkersReady (the launcher never starts: nothing else ends the loop), the Job backend.
    A plan every `tick` seconds (the pods' events and the requeues come at least that often).
    Returns (writes per plan time, the worker Jobs' creation times, the last plan, the job, events)."""
    job = mpijob(run_policy={"backoffLimit": backoff}, spec={"launcherCreationPolicy": "WaitForWorkersReady"})
    obs, born, writes, made, events = Observed(), {}, [], [], []
    now, p = 0.0, None
    while now <= until:
        obs = _world(job, obs, now, born)
        p = run(copy.deepcopy(job), obs, "job", now=at(now))
        writes.append((now, p.writes))
        events += p.events
        made += [now for c in p.creates if c.obj["metadata"]["name"] == "pi-worker"]
        job, obs = apply_plan(job, obs, p)
        if st.is_finished(job.get("status") or {}):
            break
        now += tick
    return writes, made, p, job, events


def test_worker_exit_loop_is_paced_counted_and_ended():
    writes, made, _, job, events = simulate(backoff=3, until=600)
    # made at 0, then 10 s, 20 s, 40 s after each exit (its command ends a second after its Job is made;
    # a tick or two to see the Job and to create it after the delete)
    gaps = [round(b - a, 1) for a, b in itertools.pairwise(made)]
    assert len(made) == 4 and [g - 1 for g in gaps] == pytest.approx([10, 20, 40], abs=1.0), made
    failed = st.get_condition(job["status"], st.FAILED)
    assert failed["reason"] == workerexits.R_LIMIT, failed
    assert "worker pi-worker-0 (pod pi-worker-0-" in failed["message"], failed
    assert "exit code 0, Completed" in failed["message"] and "4 time(s)" in failed["message"], failed
    assert "runPolicy.backoffLimit (3)" in failed["message"], failed
    assert [e for e in events if e.type == "Warning" and workerexits.R_LIMIT in e.message], events
    assert len([e for e in events if e.reason == workerexits.WORKER_EXITED]) == 3, events
    # bounded writes: never a write a second; the whole loop cost a few dozen
    assert sum(w for _, w in writes) < 40, sum(w for _, w in writes)


def test_worker_exit_loop_backoff_limit_0_fails_at_the_first_exit():
    _, made, _, job, _ = simulate(backoff=0, until=60)
    assert len(made) == 1
    assert st.get_condition(job["status"], st.FAILED)["reason"] == workerexits.R_LIMIT


def test_worker_exit_loop_writes_per_second():
    """The loop's writes over its first 60 s, a plan every 0.5 s: before, the worker Job was deleted
    and made again every second or so, forever (the issue counted 4 writes a second on the cluster);
    now the record, the paced delete and create, the Service's two patches and the status per exit:
    4.6 writes a second before (this simulation on main's code), 0.5 now, and fewer as the pace
    doubles."""
    writes, *_ = simulate(backoff=6, until=60)
    per_second = sum(w for t, w in writes if t < 60) / 60
    assert per_second <= 0.5, per_second
