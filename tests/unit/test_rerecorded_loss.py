"""Issue 50 item 3, `rerecorded_loss`: a worker loss belongs to the run of the launcher container it
happened in, not to the launcher pod (reconcilers/failure/workerloss.py `run_started`,
docs/architecture.md section 9.1). After an in-place restart (the same pod, its container run again),
the loss that ended run 1 is no loss of run 2: no record, no LauncherWaitsForLostWorker 60 s into the
healthy run 2, and run 2's exit 0 with a log that cannot be read is a success on its exit code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers.failure import runs
from reconcilers.failure import workerloss as wl
from tests.unit.sim import BACKENDS, at, pod, running_state, with_status
from tests.unit.test_worker_loss import (
    UNREADABLE,
    assert_unread_success,
    cond,
    judged,
    launcher,
    lose_worker_0,
    lost_worker,
    open_mpi,
    step,
    t,
    verdict,
)


def restarted(job: dict, started: float, end: float | None = None, code: int = 0) -> dict:
    """Launcher pod 0 (created at 0) whose container failed at `started` - 1 and was restarted in place
    at `started` (run 2): running, or ended with `code` at `end`."""
    p = launcher(job, 0)
    state = {"running": {"startedAt": t(started)}} if end is None else \
        {"terminated": {"exitCode": code, "startedAt": t(started), "finishedAt": t(end)}}
    cs = {"name": "launcher", "restartCount": 1, "state": state,
          "lastState": {"terminated": {"exitCode": 1, "startedAt": t(1), "finishedAt": t(started - 1)}}}
    return with_status(p, phase="Running" if end is None else "Succeeded" if code == 0 else "Failed",
                       containerStatuses=[cs])


def _cache(job: dict, backend: str, launcher_pod: dict, stopping: bool = False) -> list[dict]:
    """The restarted launcher, worker 1 and worker 0: while `stopping`, the lost one still terminating
    (sshd not yet out); then its replacement, with the lost one still cached on the Job backend (its pod
    keeps the Job controller's tracking finalizer a while)."""
    if stopping:
        return [launcher_pod, lost_worker(job, backend, 0, 20, ended=False), pod(job, "worker", 1, backend=backend)]
    new0 = pod(job, "worker", 0, backend=backend)
    if backend == "job":
        new0["metadata"]["name"] = "pi-worker-0-new"
        new0["metadata"]["uid"] = "pod-pi-worker-0-new"
    lost = [lost_worker(job, backend, 0, 20)] if backend == "job" else []
    return [launcher_pod, *lost, new0, pod(job, "worker", 1, backend=backend)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerecorded_loss_is_not_recorded_for_the_run_restarted_in_place(backend):
    job, obs = running_state(open_mpi(), backend)
    job, obs, _ = lose_worker_0(backend, job, obs, launcher(job, 0))
    assert wl.recorded_attempt(job["status"]) == "pi-launcher-abc0"
    # mpirun lost its daemon and failed at 21; the kubelet ran the container again at 22
    events = []
    for now in (23, 24, 30, 83, 90):
        obs = replace(obs, pods=_cache(job, backend, restarted(job, 22), stopping=now < 30))
        job, obs, p = step(job, obs, backend, now)
        events += p.events
    assert cond(job, wl.WORKER_LOST) is None, job["status"]
    assert wl.R_LAUNCHER_WAITS not in [e.reason for e in events], events
    # run 2 exits 0 at 100 and its log cannot be read: no loss of run 2 was seen, so a success
    obs = replace(obs, pods=_cache(job, backend, restarted(job, 22, end=100)))
    p = judged(job, obs, backend, restarted(job, 22, end=100), now=101, log=UNREADABLE)
    assert_unread_success(p)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerecorded_loss_a_loss_of_the_restarted_run_is_its_own(backend):
    """A worker lost during run 2 is recorded for run 2, named so; its exit 0 with an unreadable log
    is then cut short, as for a first run."""
    job, obs = running_state(open_mpi(), backend)
    obs = replace(obs, pods=[restarted(job, 22), *obs.pods[1:]])
    job, obs, _ = step(job, obs, backend, 25)
    assert cond(job, wl.WORKER_LOST) is None
    job, obs, _ = lose_worker_0(backend, job, obs, restarted(job, 22), asked=40)
    assert cond(job, wl.WORKER_LOST)["message"].startswith("launcher pod pi-launcher-abc0 (run 2): worker pi-worker-0")
    assert wl.recorded_run(job["status"]) == 2
    p = judged(job, obs, backend, restarted(job, 22, end=60), now=61, log=UNREADABLE)
    assert verdict(p) == "Failed/WorkerLostDuringRun", p.status


@pytest.mark.parametrize("cs,want", [
    ({}, 0.0),  # no status yet: the pod's creation
    ({"restartCount": 0, "state": {"running": {"startedAt": "2025-01-01T12:00:05Z"}}}, 0.0),
    ({"restartCount": 1, "state": {"running": {"startedAt": "2025-01-01T12:00:05Z"}}}, 5.0),
    ({"restartCount": 2, "state": {"terminated": {"startedAt": "2025-01-01T12:00:07Z"}}}, 7.0),
    ({"restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}, None),
])
def test_rerecorded_loss_run_started(cs, want):
    job = open_mpi()
    p = launcher(job, 0)
    if cs:
        p = with_status(p, containerStatuses=[{"name": "launcher", **cs}])
    from reconcilers import context
    from reconcilers.defaults import with_defaults
    from reconcilers.types import Config, Inputs, Observed
    full = with_defaults(job)
    inputs = Inputs(job, Observed(pods=[p]), Config(), at(0))
    choice, config = context.choose_backend(inputs, full)
    ctx = context.build(inputs, full, choice, config)
    got = runs.run_started(ctx, p)
    assert got == (None if want is None else at(want))
