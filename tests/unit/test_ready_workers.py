"""Workers Ready: the worker object's count, or its Ready pods' when higher (the Job controller
writes `ready` a second or more after the pods: reconcilers/children.py ready_workers)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import children, context, status
from reconcilers.defaults import with_defaults
from reconcilers.types import Config, Inputs
from tests.unit import sim

READY = [{"type": "Ready", "status": "True"}]
NOT_READY = [{"type": "Ready", "status": "False"}]


def worker(job: dict, backend: str, index: int, conditions: list, deleting: bool = False,
           phase: str = "Running") -> dict:
    p = sim.pod(job, "worker", index, phase=phase, backend=backend, conditions=conditions)
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    return p


@pytest.mark.parametrize("backend", ["job", "statefulset"])
@pytest.mark.parametrize("object_ready,pods,want", [
    (0, [], 0),
    (2, [], 2),                                    # the object's count alone, as before
    (0, [READY, READY], 2),                        # the pods are ahead of the object's count
    (1, [READY, READY], 2),
    (2, [READY, NOT_READY], 2),                    # the object is ahead of the pods' events
    (0, [READY, NOT_READY], 1),
    (0, [READY, (READY, "deleting")], 1),          # a pod being deleted is not Ready
    (0, [READY, (READY, "Succeeded")], 1),         # nor one that ended (a stopped sshd exits 0)
    (0, [READY, (READY, "Pending")], 1),
])
def test_ready_workers(backend, object_ready, pods, want):
    job, obs, _ = sim.converge(sim.mpijob(), backend=backend)
    obs = sim.workers_ready(obs, object_ready)
    made = []
    for i, spec in enumerate(pods):
        conds, how = spec if isinstance(spec, tuple) else (spec, "")
        made.append(worker(job, backend, i, conds, deleting=how == "deleting",
                           phase=how if how in ("Succeeded", "Pending") else "Running"))
    obs = replace(obs, pods=made)
    inputs = Inputs(job, obs, Config(worker_backend=backend), sim.NOW, sim.KeyGen())
    full = with_defaults(job)
    choice, config = context.choose_backend(inputs, full)
    ctx = context.build(inputs, full, choice, config)
    assert children.ready_workers(ctx) == want


@pytest.mark.parametrize("backend", ["job", "statefulset"])
def test_running_as_soon_as_the_pods_are_ready_before_the_object_counts_them(backend):
    job, obs, _ = sim.converge(sim.mpijob(), backend=backend)
    obs = replace(obs, launcher=sim.with_status(obs.launcher, active=1),
                  pods=[sim.pod(job, "launcher")] + [worker(job, backend, i, READY) for i in range(2)])
    p = sim.run(job, obs, backend)
    assert status.is_true(p.status, status.RUNNING), p.status
