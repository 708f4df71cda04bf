"""The Job backend after a lost worker (docs/architecture.md sections 4 and 11): the worker Job made
afresh as soon as a worker pod is being deleted, and the failed launcher made afresh with the new
workers (afresh.remade) instead of after its Job's backoff, its failure counted once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import children, context, status
from reconcilers.defaults import with_defaults
from reconcilers.failure import afresh, ledger, retries
from reconcilers.types import Config, Inputs
from tests.unit.sim import NOW, KeyGen, apply_plan, run, running_state, with_status
from tests.unit.test_retries import cond, failed_launcher, handed_over, job_with, running_launcher, workers

LAUNCHER_AT = "2025-01-01T12:00:05Z"


def ctx_of(job, obs, backend="job"):
    inputs = Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen())
    full = with_defaults(job)
    choice, config = context.choose_backend(inputs, full)
    return context.build(inputs, full, choice, config)


def at(p: dict, stamp: str) -> dict:
    p["metadata"]["creationTimestamp"] = stamp
    return p


def deleting(p: dict) -> dict:
    p["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:40Z"
    return p


def lost_at(i: int, how: str, job: dict) -> list[dict]:
    ws = workers(job, "job")
    if how == "deleting":
        deleting(ws[i])
    elif how == "succeeded":
        ws[i]["status"]["phase"] = "Succeeded"
    return ws


@pytest.mark.parametrize(("how", "index", "replicas", "want"), [
    ("none", 0, 2, None),
    ("succeeded", 1, 2, "worker pod(s) pi-worker-1 ended"),
    ("deleting", 0, 2, "worker pod(s) pi-worker-0 being deleted"),  # known at its delete, before its end
    ("deleting", 1, 1, None),  # a scale-down's pod (index past Worker replicas), no loss
])
def test_workers_lost(how, index, replicas, want):
    job, obs = running_state(job_with(), "job")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
    obs = replace(obs, pods=lost_at(index, how, job))
    ctx = ctx_of(job, obs)
    assert children.workers_lost(ctx, ctx.workers) == want


@pytest.mark.parametrize(("case", "renewed", "workers_at", "want"), [
    ("failed", True, "", "pi-launcher-abc0"),
    ("failed", False, "", None),  # the workers stay: the Job's own retry (its backoff paces a crash loop)
    ("failed", False, "2025-01-01T12:00:09Z", "pi-launcher-abc0"),  # it ran with workers made afresh since
    ("failed", False, LAUNCHER_AT, None),  # made in the same second as the workers: not older
    ("announced", False, "2025-01-01T12:00:09Z", None),  # old news (a resume made the workers afresh)
    ("failed-and-retried", True, "", None),  # the Job already made its next pod
    ("permanent", True, "", None),  # ExitCode 3: the MPIJob fails, nothing runs again
    ("running", True, "", None),
])
def test_remade(case, renewed, workers_at, want):
    job, obs = running_state(job_with("ExitCode" if case == "permanent" else None), "job")
    launchers = {"failed": [failed_launcher(job, code=205)], "permanent": [failed_launcher(job, code=3)],
                 "announced": [failed_launcher(job, code=205)],
                 "failed-and-retried": [failed_launcher(job, code=205), running_launcher(job, 1)],
                 "running": [running_launcher(job)]}[case]
    workers_obj = {**obs.workers, "metadata": {**obs.workers["metadata"], "creationTimestamp": workers_at}}
    obs = replace(obs, pods=[at(p, LAUNCHER_AT) for p in launchers] + workers(job, "job"), workers=workers_obj)
    if case == "announced":
        book = ledger.Ledger(1, 1, last_at=LAUNCHER_AT, last_runs=(("pi-launcher-abc0", 0),))
        obs = replace(obs, launcher={**obs.launcher, "metadata": {
            **obs.launcher["metadata"], "annotations": {ledger.LEDGER: book.to_json()}}})
    ctx = ctx_of(job, obs)
    assert afresh.remade(ctx, renewed, retries.account(ctx, active=True)) == want


def test_worker_deleted_mid_run_the_launcher_job_is_made_afresh_with_the_workers_counted_once():
    """backoffLimit 3, the Job backend. Worker 0's pod deleted while the launcher runs, and mpirun
    failing on it: the worker Job (Background) and the launcher Job (Foreground) are deleted at once; the
    failure is announced once, counted (1 of 3), its ledger handed over. While the worker Job is
    still being deleted no launcher Job is made; once it is gone, the plan makes the worker Job and
    the launcher Job together (as on a first start, launcherCreationPolicy AtStartup), the latter
    carrying the count. A later failure of the new launcher is its own: counted, retried by its Job."""
    job, obs = running_state(job_with(backoff=3), "job")
    job["spec"]["launcherCreationPolicy"] = "AtStartup"
    obs = replace(obs, pods=[failed_launcher(job, code=205), *lost_at(0, "deleting", job)],
                  launcher=with_status(obs.launcher, active=0, ready=0, failed=1))
    p = run(job, obs, "job")
    assert sorted((d.ref.name, d.propagation) for d in p.deletes) == [
        ("pi-launcher", "Foreground"), ("pi-worker", "Background")]
    msg = cond(p.status, status.RESTARTING)["message"]
    assert "exit code 205" in msg and "counted, 1 of 3 retries" in msg, msg
    assert msg.endswith("the launcher Job is made afresh."), msg
    book = handed_over(p)
    assert (book.failed, book.counted) == (1, 1), book
    # both Jobs on their way out (Foreground: their pods first): nothing is announced again
    j2, going = apply_plan(job, obs, replace(p, deletes=[]))
    going = replace(going, launcher=deleting(going.launcher), workers=deleting(going.workers))
    again = run(j2, going, "job")
    assert not again.events and not again.creates, (again.events, again.creates)
    job, obs = apply_plan(job, obs, p)
    assert obs.launcher is None and obs.workers is None

    # the old workers still going: no launcher Job yet, whatever launcherCreationPolicy says
    old_workers = deleting(running_state(job_with(backoff=3), "job")[1].workers)
    held = run(job, replace(obs, workers=old_workers, pods=workers(job, "job")), "job")
    assert not held.creates and not held.events, (held.creates, held.events)

    # both gone: made together, the count carried, nothing announced again
    p = run(job, replace(obs, pods=[]), "job")
    made = {c.obj["metadata"]["name"]: c.obj for c in p.creates if c.obj["kind"] == "Job"}
    assert list(made) == ["pi-worker", "pi-launcher"], list(made)
    carried = ledger.read(made["pi-launcher"])
    assert (carried.failed, carried.counted) == (1, 1), carried
    assert not p.events, p.events
    job, obs = apply_plan(job, obs, p)

    # the new launcher fails on its own (after the workers were made): counted, the Job retries it
    obs.workers["metadata"]["creationTimestamp"] = "2025-01-01T12:01:00Z"
    new = at(failed_launcher(job, 5, code=1), "2025-01-01T12:01:00Z")
    obs = replace(obs, pods=[new, *workers(job, "job")], launcher=with_status(obs.launcher, active=0, failed=1))
    p = run(job, obs, "job")
    assert not p.deletes, p.deletes
    msg = cond(p.status, status.RESTARTING)["message"]
    assert "launcher attempt 2" in msg and "counted, 2 of 3 retries" in msg, msg
    assert msg.endswith("the launcher Job starts a new pod."), msg
