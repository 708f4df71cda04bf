"""Issue 50 item 6, `stuck_terminating`: a pod of the MPIJob's own earlier worker Job that never ends
(a finalizer nobody removes, a node that went away) holds the run: the workers' names stay withheld.
The MPIJob says so, naming the pod and what holds it (its finalizers, its node and whether that node
reports, since when), not "a deleted MPIJob of the same name"; and the launcher's runs restarted in
place meanwhile, which cannot find their workers, spend no retry (reconcilers/predecessor.py,
reconcilers/failure/withheld.py, docs/architecture.md section 11)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from reconcilers import predecessor
from reconcilers import status as st
from tests.unit.sim import apply_plan, at, mpijob, pod, run, running_state, workers_ready

NODE_LOST = [{"type": "Ready", "status": "False", "lastTransitionTime": "2025-01-01T12:00:45Z"}]
TAINTED = [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
            "lastTransitionTime": "2025-01-01T12:05:00Z"}]


def t(s: float) -> str:
    return st.fmt_time(at(s))


def old_worker(job: dict, *, finalizers: list | None = None, conditions: list | None = None,
               node: str | None = "kwok-node-7", born: float = 5) -> dict:
    """Worker 0's pod of the earlier worker Job (uid old-job), its delete asked at 20 with 30 s grace."""
    p = pod(job, "worker", 0, phase="Running", conditions=conditions or [])
    p["metadata"].update(creationTimestamp=t(born), deletionTimestamp=t(50), deletionGracePeriodSeconds=30)
    p["metadata"]["ownerReferences"][0]["uid"] = "old-job"
    if finalizers:
        p["metadata"]["finalizers"] = finalizers
    if node:
        p["spec"]["nodeName"] = node
    return p


@pytest.mark.parametrize(("finalizers", "conditions", "node", "want"), [
    (None, NODE_LOST, "kwok-node-7", ["on node kwok-node-7, which stopped reporting", "2025-01-01T12:00:45Z"]),
    (None, TAINTED, "kwok-node-7", ["on node kwok-node-7, which stopped reporting", "2025-01-01T12:05:00Z"]),
    (["example.com/keep"], [], "kwok-node-7", ["held by finalizer(s) example.com/keep", "finalizers\":null",
                                              "whose kubelet has not confirmed the delete"]),
    (None, [], None, ["on no node"]),
])
def test_stuck_terminating_names_the_pod_and_what_holds_it(finalizers, conditions, node, want):
    job = mpijob()
    status: dict = {}
    p = old_worker(job, finalizers=finalizers, conditions=conditions, node=node)
    events = predecessor.report_stuck(status, [p], "ns", at(50 + 121), job_created=at(0))
    (cond,) = status["conditions"]
    assert cond["reason"] == predecessor.R_OLD_WORKER_STUCK, cond
    message = cond["message"]
    assert "pod ns/pi-worker-0-xyz of this MPIJob's earlier worker Job" in message, message
    assert "deleted MPIJob" not in message and "no retry is spent" in message, message
    assert "terminating since 2025-01-01T12:00:20Z" in message, message
    for w in want:
        assert w in message, (w, message)
    (event,) = events
    assert event.type == "Warning" and "(2 min 31 s)" in event.message, event
    # no churn: a later look changes nothing and says nothing again
    assert predecessor.report_stuck(status, [p], "ns", at(50 + 300), job_created=at(0)) == []
    assert status["conditions"] == [cond]


def test_stuck_terminating_a_predecessors_pod_is_still_called_so():
    status: dict = {}
    p = old_worker(mpijob(), born=-100)  # created before this MPIJob: a deleted namesake's
    predecessor.report_stuck(status, [p], "ns", at(50 + 121), job_created=at(0))
    assert status["conditions"][0]["reason"] == predecessor.R_STUCK
    assert "of a deleted MPIJob of the same name" in status["conditions"][0]["message"]


def _launcher(job: dict, restarts: int, started: float, last_start: float, last_end: float) -> dict:
    """The launcher pod restarted in place `restarts` times, its current run started at `started`."""
    cs = {"name": "launcher", "restartCount": restarts, "state": {"running": {"startedAt": t(started)}},
          "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": t(last_start),
                                       "finishedAt": t(last_end)}}}
    p = pod(job, "launcher", 0, containerStatuses=[cs], conditions=[{"type": "Ready", "status": "True"}])
    p["metadata"]["creationTimestamp"] = t(0)
    return p


def test_stuck_terminating_in_place_runs_spend_no_retry_while_an_old_worker_pod_holds():
    """backoffLimit 1, the Job backend. Worker 0's pod deleted at 20 (its node gone: it never ends);
    mpirun fails on the loss (run 1: counted, 1 of 1). The kubelet runs the launcher again at once and
    after its back-off; every run fails (the workers' names are withheld while the old pod is there).
    Before, run 2 was the second counted failure: Failed/BackoffLimitExceeded within seconds."""
    job = mpijob(run_policy={"backoffLimit": 1})
    job["metadata"]["creationTimestamp"] = t(0)
    job, obs = running_state(job, "job")
    old_uid = obs.workers["metadata"]["uid"]
    stuck = old_worker(job, conditions=NODE_LOST)
    stuck["metadata"]["ownerReferences"][0]["uid"] = old_uid
    w1 = pod(job, "worker", 1)
    w1["metadata"]["ownerReferences"][0]["uid"] = old_uid
    launcher_pod = pod(job, "launcher", 0)
    obs = replace(obs, pods=[launcher_pod, stuck, w1])
    seen = []

    def step(now: float, launcher: dict) -> None:
        nonlocal job, obs
        pods = [launcher, stuck] + [q for q in obs.pods if q["metadata"]["labels"].get(
            "training.kubeflow.org/job-role") == "worker" and q["metadata"]["ownerReferences"][0].get("uid")
            not in (old_uid,)]
        if obs.workers is not None and obs.workers["metadata"]["uid"] != old_uid and len(pods) == 2:
            for i in range(2):  # the new worker Job's pods, Running and Ready beside the stuck one
                q = pod(job, "worker", i, conditions=[{"type": "Ready", "status": "True"}])
                q["metadata"].update(name=f"pi-worker-{i}-new", uid=f"new-{i}")
                q["metadata"]["ownerReferences"][0]["uid"] = obs.workers["metadata"]["uid"]
                pods.append(q)
        obs = replace(obs, pods=pods)
        if obs.workers is not None and obs.workers["metadata"]["uid"] != old_uid:
            obs = workers_ready(obs, 2)
        p = run(job, obs, "job", now=at(now), container_restart_rules=True)
        seen.append(p)
        job, obs = apply_plan(job, obs, p)

    step(20.5, launcher_pod)  # the loss: the worker Job goes
    step(21, launcher_pod)
    step(22, _launcher(job, 1, 21.5, 1, 21))  # run 1 failed on the loss, run 2 runs
    step(23, _launcher(job, 2, 23, 21.5, 22.5))  # run 2 failed: no worker's name resolves
    step(40, _launcher(job, 3, 33, 23, 23.5))  # run 3, after the kubelet's 10 s
    step(60, _launcher(job, 4, 53, 33, 33.5))
    step(200, _launcher(job, 4, 53, 33, 33.5))
    assert st.get_condition(job["status"], st.FAILED) is None, job["status"]
    book = json.loads(obs.launcher["metadata"]["annotations"]["mpijob-operator.dev/launcher-retries"])
    assert (book["failed"], book["counted"]) == (4, 1), book
    cond = st.get_condition(job["status"], predecessor.PREDECESSOR_CONDITION)
    assert cond["reason"] == predecessor.R_OLD_WORKER_STUCK and "pi-worker-0-xyz" in cond["message"], cond
    assert "kwok-node-7, which stopped reporting" in cond["message"], cond
    restarting = [e.message for p in seen for e in p.events if e.reason == st.R_RESTARTING]
    assert any("still terminating" in m and "not counted" in m for m in restarting), restarting


@pytest.mark.parametrize(("now", "want"), [
    (50, 120.5),  # its deletionTimestamp: reported 120 s later, looked at then (nothing else wakes the MPIJob)
    (150, 20.5),
    (171, None),  # reported already: nothing to wait for
])
def test_stuck_terminating_the_plan_looks_again_when_the_pod_would_be_stuck(now, want):
    got = predecessor.recheck_in([old_worker(mpijob())], at(now))
    assert got == (None if want is None else pytest.approx(want))
