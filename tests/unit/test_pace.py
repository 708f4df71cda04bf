"""The settle window (reconcilers/pace.py): minor writes held while pods move, carried by any other write."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from reconcilers import desired as dz
from reconcilers import pace as pc
from reconcilers import status as st
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed, Plan
from tests.unit.sim import BACKENDS, NOW, KeyGen, apply_plan, converge, mpijob, pod, with_status, workers_ready


@pytest.mark.parametrize("pace,now,want", [
    (None, 100.0, 0.0),  # nothing known of the pods: write now
    (pc.Pace(), 100.0, 0.0),
    (pc.Pace(last_pod_event=100.0), 100.0, 2.0),  # a pod just moved: the whole quiet period
    (pc.Pace(last_pod_event=99.5), 100.0, 1.5),
    (pc.Pace(last_pod_event=98.0), 100.0, 0.0),  # quiet for 2 s
    (pc.Pace(last_pod_event=90.0), 100.0, 0.0),
    (pc.Pace(last_pod_event=100.0, held_since=95.0), 100.0, 2.0),  # held 5 s: the cap is 5 s away
    (pc.Pace(last_pod_event=100.0, held_since=91.0), 100.0, 1.0),  # the cap comes before the quiet
    (pc.Pace(last_pod_event=100.0, held_since=90.0), 100.0, 0.0),  # held 10 s: write, pods or not
    (pc.Pace(last_pod_event=100.0, held_since=80.0), 100.0, 0.0),
])
def test_settle_remaining(pace, now, want):
    assert pc.settle_remaining(pace, now) == pytest.approx(want)


@pytest.mark.parametrize("pace,now,want", [
    (None, 100.0, 0.0),  # nothing known of the pods: write now
    (pc.Pace(last_pod_event=100.0), 100.0, 30.0),  # a hold begins: the whole bring-up cap
    (pc.Pace(last_pod_event=90.0), 100.0, 30.0),  # quiet pods do not end a bring-up hold
    (pc.Pace(last_pod_event=80.0, held_since=75.0), 100.0, 5.0),
    (pc.Pace(last_pod_event=99.0, held_since=70.0), 100.0, 0.0),  # held 30 s: write
    (pc.Pace(last_pod_event=99.0, held_since=60.0), 100.0, 0.0),
])
def test_settle_remaining_bringing_up(pace, now, want):
    assert pc.settle_remaining(pace, now, bringing_up=True) == pytest.approx(want)


def _conds(*true: str, false: tuple[str, ...] = ()) -> dict:
    return {"status": {"conditions": [{"type": t, "status": "True"} for t in true]
                       + [{"type": t, "status": "False"} for t in false]}}


@pytest.mark.parametrize("job,want", [
    ({}, True),  # nothing written yet
    ({"status": "garbage", "spec": []}, True),
    (_conds("Created"), True),
    (_conds("Created", false=("Running",)), True),  # Running=False: restarting, or not yet
    (_conds("Created", "Restarting", false=("Running",)), True),
    (_conds("Created", "Running"), False),
    (_conds("Created", "Succeeded"), False),
    (_conds("Created", "Failed"), False),
    ({**_conds("Created"), "spec": {"runPolicy": {"suspend": True}}}, False),  # Kueue reads active counts
    ({**_conds("Created"), "spec": {"runPolicy": {"suspend": False}}}, True),
])
def test_bringing_up(job, want):
    assert pc.bringing_up(job) is want


COUNTS = {"Launcher": {"active": 0}, "Worker": {"active": 1}}
COND = [{"type": "Created", "status": "True"}]


@pytest.mark.parametrize("old,new,want", [
    ({}, {}, False),  # no change is not a minor change
    ({"replicaStatuses": COUNTS}, {"replicaStatuses": COUNTS}, False),
    ({}, {"replicaStatuses": COUNTS}, True),
    ({"conditions": COND, "replicaStatuses": {}}, {"conditions": COND, "replicaStatuses": COUNTS}, True),
    ({"conditions": COND}, {"conditions": [*COND, {"type": "Running", "status": "True"}]}, False),
    ({"replicaStatuses": {}}, {"replicaStatuses": COUNTS, "startTime": "2025-01-01T12:00:00Z"}, False),
    ({"completionTime": "x", "replicaStatuses": COUNTS}, {"replicaStatuses": COUNTS}, False),
])
def test_status_minor_only(old, new, want):
    assert pc.status_minor_only(old, new) is want


def _plan(job: dict, obs: Observed, backend: str, settle_s: float, gone_workers: tuple = ()) -> Plan:
    return plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen(), settle_s=settle_s,
                       gone_workers=gone_workers))


def _writes(p: Plan) -> Counter:
    c: Counter = Counter()
    c.update(f"create {x.obj['kind']}" for x in p.creates)
    c.update(f"patch {x.ref.kind}" for x in p.patches)
    c.update(f"delete {x.ref.kind}" for x in p.deletes)
    c.update(["patch MPIJob/status"] * (p.status is not None))
    c.update(f"event {e.reason}" for e in p.events)
    return c


def _bring_up(workers: int, backend: str, settle_s: float) -> tuple[Counter, dict, Observed]:
    """Created, then each worker pod starting in turn (a pod event each, so settle_s > 0 while they
    move), then the launcher pod: the writes of every plan on the way, summed."""
    job, obs, plans = converge(mpijob(workers=workers), backend=backend)
    total = sum((_writes(p) for p in plans), Counter())
    launcher = pod(job, "launcher")
    steps = [[pod(job, "worker", i, backend=backend) for i in range(k + 1)] for k in range(workers)]
    for k, pods in enumerate(steps):
        obs = replace(workers_ready(obs, k + 1), pods=pods)
        if k == workers - 1:  # the launcher last: its Job's ready count makes the MPIJob Running
            obs = replace(obs, pods=[launcher, *pods], launcher=with_status(obs.launcher, active=1, ready=1))
        p = _plan(job, obs, backend, settle_s)
        total += _writes(p)
        job, obs = apply_plan(job, obs, p)
    return total, job, obs


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bring_up_writes_the_same_whatever_the_worker_count(backend):
    seen = {w: _bring_up(w, backend, settle_s=1.0)[0] for w in (1, 2, 8, 64)}
    assert seen[2] == seen[8] == seen[64] == seen[1], seen
    # the children, Created and Running (each a status write and an Event), discover_hosts.sh once
    assert seen[2]["patch MPIJob/status"] == 2 and seen[2]["patch ConfigMap"] == 1, seen[2]
    assert seen[2]["event MPIJobCreated"] == 1 and seen[2]["event MPIJobRunning"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_running_write_carries_the_final_counts_and_hosts(backend):
    _, job, obs = _bring_up(8, backend, settle_s=1.0)
    assert st.is_true(job["status"], st.RUNNING)
    assert job["status"]["replicaStatuses"]["Worker"]["active"] == 8
    assert job["status"]["replicaStatuses"]["Launcher"]["active"] == 1
    assert obs.config_map["data"][dz.DISCOVER_HOSTS].count("echo ") == 8
    again = _plan(job, obs, backend, settle_s=0.0)
    assert again.writes == 0 and not again.events and not again.held


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_a_settle_window_each_pod_is_written(backend):
    """settle_s 0 (no pod moved lately, or the hold reached its cap): counts go out as they change."""
    few = _bring_up(2, backend, settle_s=0.0)[0]
    many = _bring_up(8, backend, settle_s=0.0)[0]
    assert many["patch ConfigMap"] == 8 and few["patch ConfigMap"] == 2
    assert many["patch MPIJob/status"] > few["patch MPIJob/status"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_minor_change_alone_is_held_then_written(backend):
    job, obs, _ = converge(mpijob(workers=4), backend=backend)
    obs = replace(workers_ready(obs, 1), pods=[pod(job, "worker", 0, backend=backend)])
    held = _plan(job, obs, backend, settle_s=1.5)
    assert held.held and held.writes == 0 and not held.events and held.requeue_after == pytest.approx(1.5)
    due = _plan(job, obs, backend, settle_s=0.0)
    assert not due.held and due.status is not None and [x.ref.kind for x in due.patches] == ["ConfigMap"]
    assert due.status["replicaStatuses"]["Worker"]["active"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lost_worker_is_never_held(backend):
    """Restarting is a condition: written at once, with the counts, whatever the pods are doing."""
    _, job, obs = _bring_up(2, backend, settle_s=1.0)
    gone = tuple(x for x in obs.pods if "worker-1" in x["metadata"]["name"])  # its delete event, seen
    obs = replace(workers_ready(obs, 1), pods=[x for x in obs.pods if "worker-1" not in x["metadata"]["name"]])
    p = _plan(job, obs, backend, settle_s=2.0, gone_workers=gone)
    assert not p.held and st.is_true(p.status, st.RESTARTING)
    assert p.status["replicaStatuses"]["Worker"]["active"] == 1
    assert [x.ref.kind for x in p.patches] == ["ConfigMap"]


def test_a_hostfile_change_is_not_held():
    """Only discover_hosts.sh follows pods; a ConfigMap whose hostfile differs is repaired at once."""
    job, obs, _ = converge(mpijob(workers=2))
    cm = obs.config_map
    obs = replace(obs, config_map={**cm, "data": {**cm["data"], "hostfile": "tampered\n"}})
    p = _plan(job, obs, "job", settle_s=2.0)
    assert not p.held and [x.ref.kind for x in p.patches] == ["ConfigMap"]
