"""plan(inputs) -> Plan: the lifecycle of one MPIJob (docs/architecture.md sections 1-3), as a pure function.

Order of decisions:
1. Not ours (`runPolicy.managedBy` set to anything but `Config.controller_name`): empty Plan.
2. Being deleted (`metadata.deletionTimestamp`): the held launcher pods released (failure/hold.py),
   nothing else (the garbage collector removes children).
3. Invalid (validation.validate): status Failed/InvalidSpec + a Warning Event naming the fields; no
   children. A later valid spec clears that condition and the job proceeds.
4. A child of one of our names exists but is not controlled by this MPIJob (name clash, or a
   namesake of an older MPIJob with another uid): Failed/ResourceExists + a Warning Event; the object
   is never adopted, patched or deleted. Not an end: nothing is created, and children that run are
   left running (a suspend still stops them) until the name is free.
5. Finished (Succeeded or Failed True): nothing is created; workers are stopped per cleanPodPolicy
   (Running/All: StatefulSet replicas 0 or worker Job suspended; All also deletes leftover pods, the
   launcher's included; None: left as they are) whatever the reason of the end; an unfinished
   launcher Job (the MPIJob's own deadline ran out) is suspended; ttlSecondsAfterFinished -> delete
   the MPIJob when due, else requeue_after.
6. Suspended: nothing judged or counted (reconcilers/verdict.py); a launcher Job that has run is
   deleted, to be made afresh on the resume (afresh.stop_for_suspend), one that never started and
   the worker Job suspended (not created if missing), StatefulSet scaled to 0, Suspended=True,
   Running=False.
7. Otherwise: create missing children (the launcher at once for AtStartup, or when all workers are
   Ready for WaitForWorkersReady), repair drift, set Running/Restarting; on resume the startTime is
   reset and Jobs rendered from an older template are recreated (see diff.py).
The MPIJob-level activeDeadlineSeconds (from status.startTime) is checked too, with requeue_after.

Each policy is a module of pure functions over one JobContext (reconcilers/context.py: the
defaulted MPIJob, its backend, its observed pods sorted once) and one Draft (reconcilers/draft.py:
the new status and the writes so far): ownership.py (ours, stale, clash), outcome.py (invalid,
refused, clash condition, launcher outcome, deadline, TTL), verdict.py (what ends the job, and when
nothing is judged), children.py (Service, ConfigMap, Secret, workers, launcher), takeover.py
(upstream-shaped MPIJobs), gang/ (PodGroup, Workload). This module keeps the order of decisions and
the state dispatch.

Expressed in the Plan:
- `creates`/`patches`: children, JSON merge patches of owned fields only; of a Pod, the release of
  its finalizer once its end is recorded (a strategic merge patch, failure/hold.py).
- `deletes`: a Job to recreate (uid precondition), and under cleanPodPolicy All the leftover pods.
- `status`: the complete new status (write it to the status subresource), None when unchanged.
- `events`: only on transitions. `requeue_after`: seconds. `delete_mpijob`: TTL ran out.
"""

from __future__ import annotations

from reconcilers import (
    access,
    children,
    context,
    desired,
    diff,
    elastic,
    outcome,
    ownership,
    predecessor,
    status,
    takeover,
    verdict,
)
from reconcilers.context import JobContext
from reconcilers.defaults import with_defaults
from reconcilers.draft import Draft
from reconcilers.explain import kueue, waiting
from reconcilers.failure import afresh, hold, messages, retries, workerloss
from reconcilers.failure.ledger import Ledger
from reconcilers.gang import lifecycle as gang
from reconcilers.types import Delete, Inputs, Patch, Plan, Ref
from reconcilers.validation import validate

DEFAULT_CONTROLLER_NAMES = ("kubeflow.org/mpi-operator",)
# Kept here too: callers and tests name it as the planner's (reconcilers/children.py).
STALE_RECHECK_SECONDS = children.STALE_RECHECK_SECONDS
managed_by_us = ownership.managed_by_us  # (tests name it as the planner's)


def plan(inputs: Inputs) -> Plan:
    job = inputs.mpijob
    if not isinstance(job, dict):
        return Plan()
    if not managed_by_us(job, inputs.config.controller_name):
        return Plan()
    meta = job.get("metadata")
    if isinstance(meta, dict) and meta.get("deletionTimestamp"):
        # nothing more is judged: the launcher pods held for their record go (failure/hold.py)
        return Plan(patches=hold.release_all(inputs.observed.pods, "the MPIJob is being deleted"))
    return _run(inputs)


def _run(inputs: Inputs) -> Plan:
    job = with_defaults(inputs.mpijob)
    choice, config = context.choose_backend(inputs, job)
    draft = Draft.start(inputs.mpijob, context.job_key(job), inputs.now, inputs.settle_s)
    errors = validate(job, config)
    if errors:
        outcome.invalid(draft, errors)
        return draft.finish()
    outcome.fixed_spec(draft)
    # The operator's RBAC lacks what running an MPIJob needs: held before any child, told why; a
    # feature whose grant is missing is off, and said so (reconcilers/access.py).
    if access.held(draft, config):
        return draft.finish()
    access.features(job, draft, config)
    outcome.refused(draft, inputs.refusal)
    if not status.get_condition(draft.status, status.CREATED):
        draft.condition(status.CREATED, "True", status.R_CREATED, f"MPIJob {draft.key} is created.")
        draft.event("Normal", status.R_CREATED, f"MPIJob {draft.key} is created.")
        warning = elastic.job_backend_warning(job, draft.key, choice.backend)
        if warning:
            draft.event("Warning", elastic.R_JOB_BACKEND, warning)

    ctx = context.build(inputs, job, choice, config)
    predecessor.report(draft, list(ctx.pods.stale), ctx.namespace, ctx.now,
                       status.parse_time(job["metadata"].get("creationTimestamp")))
    outcome.name_clash(draft, ownership.clash(job, ctx.observed, ctx.workers, ctx.stale_children, ctx.key)
                       or inputs.taken)
    if ctx.stale_children and not draft.finished():
        # A previous MPIJob of this name left children that the garbage collector is removing
        # (delete and re-create under one name): wait for them, then create ours.
        draft.requeue(children.STALE_RECHECK_SECONDS)
        hold.release(ctx, draft, Ledger(), suspend=False)  # its held launcher pods: not ours to judge
        return draft.finish()

    suspend = bool(ctx.run_policy.get("suspend"))
    if not draft.finished() and not suspend:
        _start_or_resume(ctx, draft)
    # The launcher's failed attempts, told apart by cause (reconcilers/failure/retries.py); judged
    # only while not suspended: a suspend's end of an attempt is no verdict (reconcilers/verdict.py).
    accounts = retries.account(ctx, active=not draft.finished() and not suspend)
    if not suspend:
        verdict.judge(ctx, draft, accounts)

    draft.status["replicaStatuses"] = status.replica_statuses(
        ctx.launcher if ctx.owned(ctx.launcher) else None, ctx.workers if ctx.owned(ctx.workers) else None,
        list(ctx.pods.launchers), list(ctx.pods.workers))
    # every failed attempt known, the ones not announced yet (the one that ended the job) included; a
    # finished job's count never goes down as its pods go
    draft.status["replicaStatuses"]["Launcher"]["failed"] = max(
        # (while suspended, the ledger's alone: what the suspend ended is not counted, the Job's count included)
        accounts.book.failed if suspend else accounts.shown(announcing=True),
        retries.shown_before(draft.old_status) if draft.finished() else 0)

    clash_held = verdict.clash_condition(draft) is not None
    if clash_held:
        _held(ctx, draft, suspend)
    elif draft.finished():
        _finished(ctx, draft)
    elif suspend:
        _suspended(ctx, draft, accounts)
    else:
        _active(ctx, draft, accounts)
    waiting.sync(ctx, draft, active=not (clash_held or draft.finished() or suspend))  # why not running
    hold.release(ctx, draft, accounts.book, suspend)  # the launcher pods whose end is recorded
    return draft.finish()


def _start_or_resume(ctx: JobContext, draft: Draft) -> None:
    if status.is_true(draft.status, status.SUSPENDED):
        draft.condition(status.SUSPENDED, "False", status.R_RESUMED, f"MPIJob {ctx.key} is resumed.")
        draft.event("Normal", status.R_RESUMED, f"MPIJob {ctx.key} is resumed.")
        draft.status["startTime"] = status.fmt_time(ctx.now)  # resume starts afresh
    draft.status.setdefault("startTime", status.fmt_time(ctx.now))


# -- states -----------------------------------------------------------------------------------------


def _active(ctx: JobContext, draft: Draft, accounts: retries.Accounts) -> None:
    children.shared_children(ctx, draft, running=True)
    takeover.replace_lost_workers(ctx, draft)  # an upstream-started run: a lost bare worker back (section 6.3)
    if not access.off(ctx.config, "elastic-refresh"):  # no pods patch granted (reconcilers/access.py)
        elastic.refresh_launchers(ctx, draft)
    # A disrupted launcher's exit 0 is no finish; a launcher failed while its workers are made afresh
    # starts with the new ones: both in a launcher Job made afresh (afresh.remade).
    renewed = children.workers_renewed(ctx)
    waits = children.launcher_waits(ctx, accounts.new_failure)  # (renewed, or WaitForWorkersReady's hold)
    relaunching = afresh.relaunch(ctx, draft, accounts, waits)
    if gang.sync_pod_group(ctx, draft):  # else the gang cannot be formed yet (reconcilers/gang/lifecycle.py)
        children.sync_workers(ctx, draft, running=True)
        if not relaunching:
            children.sync_launcher(ctx, draft, running=True)

    count = desired.worker_replicas(ctx.job)
    workers_ready = children.workers_ready(ctx)
    # Not while the workers are made afresh: the old ones are going (the Job's Ready count lags their
    # delete) and the new ones' names are withheld until the old pods ended (section 11).
    running = ctx.launcher is not None and children.launcher_running(ctx) and workers_ready and not renewed
    # Open MPI 5's mpirun exits 0 after losing a worker: remember the loss past Running (workerloss.py).
    workerloss.record(ctx, draft)
    lst = ((ctx.launcher or {}).get("status") or {}) if ctx.owned(ctx.launcher) else {}
    # A worker pod that ended either way (a stopped sshd exits 0), is being deleted or was deleted is
    # lost while the MPIJob runs; one that a suspend stopped is not (the resume starts afresh). A
    # Ready count that falls is no loss: a node missing heartbeats, a flapping probe (section 9.1).
    lost = workerloss.lost_now(ctx, draft.status)
    job_lost = _worker_job_lost(ctx, draft) if not lost else None
    # A launcher pod that already Succeeded is not a retry, even before the Job counts it.
    # (One that a disruption ended is no finish: afresh.interruption, made afresh above.)
    launcher_done = any((p.get("status") or {}).get("phase") == "Succeeded"
                        and afresh.interruption(ctx, p, accounts.entries) is None for p in ctx.pods.launchers)
    launcher_retry = (int(lst.get("failed") or 0) > 0 and int(lst.get("succeeded") or 0) == 0 and not launcher_done
                      and not accounts.frozen)
    described = messages.lost_workers(ctx)  # each lost worker and what ended it (a disruption named)
    newest = accounts.newest
    announcing = accounts.new_failure and not launcher_done and newest is not None
    if announcing and newest is not None:
        # Every failed attempt is announced, with its cause, even when the launcher already runs
        # again (restarted in place): Running follows on the next look (docs/architecture.md 10).
        msg = messages.restarting(ctx, accounts, newest, accounts.announced().failed, described, waits)
        if newest.in_place:
            workerloss.drop(draft)  # the attempt a loss was recorded for has ended: its pod runs a new one
        draft.condition(status.RESTARTING, "True", status.R_RESTARTING, msg)
        draft.event("Warning", status.R_RESTARTING, msg)
        if running:
            draft.requeue(retries.RUNNING_AGAIN_S)
    elif running:
        msg = f"MPIJob {ctx.key} is running: the launcher and {count} worker(s) are ready."
        if draft.condition(status.RUNNING, "True", status.R_RUNNING, msg):
            draft.event("Normal", status.R_RUNNING, msg)
    elif launcher_retry and accounts.fails:
        # the newest failure, announced already: its message stays (the Job's count alone says less)
        msg = messages.restarting(ctx, accounts, accounts.fails[-1], accounts.book.failed, described,
                                  renewed)
        if draft.condition(status.RESTARTING, "True", status.R_RESTARTING, msg):
            draft.event("Warning", status.R_RESTARTING, msg)
    elif launcher_retry or lost or job_lost:
        why = ("the launcher failed " + str(lst.get("failed")) + " time(s)" if launcher_retry
               else "; ".join(described) if described else f"worker {', '.join(lost)} was lost" if lost
               else str(job_lost))
        msg = f"MPIJob {ctx.key} is restarting: {why}; the launcher Job retries (runPolicy.backoffLimit)."
        if draft.condition(status.RESTARTING, "True", status.R_RESTARTING, msg):
            draft.event("Warning", status.R_RESTARTING, msg)
    # (a Job being made afresh gets its ledger too, so that the passes until it is gone announce nothing again)
    retries.sync(ctx, draft, accounts, announcing, limit_ours=not (relaunching or takeover.upstream_shaped(ctx)))
    gang.gang_wait(ctx, draft, running)


def _worker_job_lost(ctx: JobContext, draft: Draft) -> str | None:
    """A Running MPIJob's worker Job that counts an ended index: a worker lost whose pod the cache no
    longer shows (an Indexed Job never reruns a completed index: children.workers_lost)."""
    workers = ctx.workers
    if not (status.is_true(draft.old_status, status.RUNNING) and ctx.owned(workers)
            and workers.get("kind") == "Job" and not ownership.deleting(workers)):
        return None
    return children.workers_lost(ctx, workers)


def _suspended(ctx: JobContext, draft: Draft, accounts: retries.Accounts) -> None:
    kueue.suspended(ctx, draft)  # Kueue's words when it holds the MPIJob
    if status.get_condition(draft.status, status.RUNNING) is not None:
        draft.condition(status.RUNNING, "False", status.R_SUSPENDED, f"MPIJob {ctx.key} is suspended.")
    status.remove_condition(draft.status, status.RESTARTING)
    workerloss.drop(draft)  # the launcher's pod is stopped: that attempt is over
    gang.drop_pod_group(ctx, draft, "the MPIJob is suspended; a resume creates it afresh")
    children.shared_children(ctx, draft)
    if takeover.upstream_shaped(ctx):
        takeover.suspend(ctx, draft)  # upstream's launcher Job goes: the resume is in our shape (section 6.3)
    children.sync_workers(ctx, draft, running=False)
    if takeover.upstream_shaped(ctx) or not afresh.stop_for_suspend(ctx, draft, accounts):
        children.sync_launcher(ctx, draft, running=False)


def _held(ctx: JobContext, draft: Draft, suspend: bool) -> None:
    """A name clash holds the job: nothing is created (the name is not ours), and the children that
    run are left as they are, since the clash ends nothing (a Service or PodGroup replaced under our
    name while the job runs, a launcher name taken while the workers wait for it). Only a suspend
    stops them, as it always does (Kueue's eviction). docs/architecture.md section 3."""
    if not suspend:
        return
    kueue.suspended(ctx, draft)
    gang.drop_pod_group(ctx, draft, "the MPIJob is suspended; a resume creates it afresh")
    children.sync_workers(ctx, draft, running=False)
    children.sync_launcher(ctx, draft, running=False)


def _finished(ctx: JobContext, draft: Draft) -> None:
    gang.drop_pod_group(ctx, draft, "the MPIJob has finished")
    policy = ctx.run_policy["cleanPodPolicy"]
    if policy in ("Running", "All"):
        children.sync_workers(ctx, draft, running=False)
    launcher = ctx.launcher
    if ctx.owned(launcher) and status.job_outcome(launcher) is None and not (launcher.get("spec") or {}).get("suspend"):
        # The MPIJob ended without its launcher Job (its own deadline, a name clash): stop it.
        draft.plan.patches.append(Patch(diff.ref_of(launcher), {"spec": {"suspend": True}},
                                       "the MPIJob has finished: stop the launcher"))
    if policy == "All":
        for pod in ctx.pods.launchers + ctx.pods.workers:
            meta = pod.get("metadata") or {}
            phase = (pod.get("status") or {}).get("phase")
            is_launcher = pod in ctx.pods.launchers
            if meta.get("deletionTimestamp") or (not is_launcher and phase in ("Running", "Pending", None)):
                continue  # active workers are stopped by their StatefulSet / Job
            draft.plan.deletes.append(Delete(Ref("v1", "Pod", ctx.namespace, meta.get("name", "")),
                                             uid=meta.get("uid"), reason="cleanPodPolicy All"))
    outcome.ttl(ctx, draft)
