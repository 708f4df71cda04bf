"""The plan's part in gang scheduling (`--gang-scheduling`): reconcilers/gang/podgroup.py for the
PodGroup of scheduler-plugins and Volcano, reconcilers/gang/workload_gang.py for the Workload and PodGroup
of Kubernetes' own Workload API.

- `sync_pod_group`: the MPIJob's gang objects, created before its workers while it runs and
  repaired; says whether the MPIJob's pods may be created now.
- `drop_pod_group`: deleted when the MPIJob is suspended (a resume creates them afresh) or finishes;
  a scheduler-plugins or Volcano PodGroup once no pod of the gang holds a node, the scheduler-plugins
  one marked released first (`_release`).
- `gang_wait`: WaitingForGang=True (the State column) while the gang waits for room for every pod
  (or, with the Workload API, while the cluster does not serve it), and an Event when the whole gang
  is placed.
Nothing here does I/O.
"""

from __future__ import annotations

from reconcilers import children, desired, diff, ownership, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.gang import podgroup, workload_gang
from reconcilers.types import Create, Obj, Patch


def sync_pod_group(ctx: JobContext, draft: Draft) -> bool:
    """The gang's objects created or repaired; False while no pod of the MPIJob may be created."""
    if workload_gang.enabled(ctx.config):
        return _sync_workload_gang(ctx, draft)
    if not podgroup.enabled(ctx.config):
        return True
    want = podgroup.pod_group(ctx.job, ctx.config, desired.owner_reference(ctx.job))
    have = ctx.observed.pod_group
    if have is None:
        draft.plan.creates.append(Create(want))
    elif not ctx.owned(have):
        pass  # a clash, reported by the plan
    elif ownership.deleting(have):
        return _wait_until_gone(ctx, draft)
    elif status.is_true(draft.old_status, status.SUSPENDED) and not _any_alive(ctx):
        # Resumed before the run that a suspend stopped released its group (its pods still held
        # nodes): that group is made afresh, as its scheduler's controller may have written a final
        # phase (Finished, Failed) it never changes again. (Once pods of this run exist, the group
        # is theirs: a status write of the resume that failed must not take it away.)
        _release(draft, have, "the MPIJob is resumed: its PodGroup is made afresh")
        draft.requeue(children.STALE_RECHECK_SECONDS)  # no pod of this run yet: wait until it is gone
        return False
    else:
        patch = podgroup.diff_pod_group(want, have)
        if patch:
            draft.plan.patches.append(patch)
    return True


def _wait_until_gone(ctx: JobContext, draft: Draft) -> bool:
    """While the group of the run before a suspend is being deleted, pods made now would join it:
    False (wait; its delete event plans again) unless this run's pods already exist (someone deleted
    the group mid-run), which go on as they are."""
    if _any_alive(ctx):
        return True
    draft.requeue(children.STALE_RECHECK_SECONDS)
    return False


def _any_alive(ctx: JobContext) -> bool:
    """A pod of this run: not ended, not being deleted (those of a run a suspend stopped are)."""
    return any(_alive(p) for p in ctx.pods.launchers + ctx.pods.workers)


def _sync_workload_gang(ctx: JobContext, draft: Draft) -> bool:
    if ctx.config.gang_unavailable:
        return False  # no gang can be formed: gang_wait says why, and no pod starts without one
    owner = desired.owner_reference(ctx.job)
    may_start = True
    for want, have in ((workload_gang.workload(ctx.job, owner), ctx.observed.workload),
                       (workload_gang.pod_group(ctx.job, owner), ctx.observed.pod_group)):
        if have is None:
            draft.plan.creates.append(Create(want))
        elif not ctx.owned(have):
            continue  # a clash, reported by the plan
        elif ownership.deleting(have):
            # The group of the run before a suspend, kept by the API server while pods of that run
            # still stop (its PodGroupProtection finalizer): see _wait_until_gone.
            may_start = _wait_until_gone(ctx, draft) and may_start
        else:
            patch = workload_gang.diff(want, have)
            if patch:
                draft.plan.patches.append(patch)
    return may_start


def _alive(pod: Obj) -> bool:
    return not ownership.ended(pod) and not ownership.deleting(pod)


def drop_pod_group(ctx: JobContext, draft: Draft, reason: str) -> None:
    status.remove_condition(draft.status, podgroup.WAITING_CONDITION)
    if workload_gang.enabled(ctx.config):
        objs = (ctx.observed.pod_group, ctx.observed.workload)
    elif podgroup.enabled(ctx.config):
        if any(_on_node(p) for p in ctx.pods.launchers + ctx.pods.workers):
            return  # each of these pods' end is an event of this MPIJob's, planned again then
        objs = (ctx.observed.pod_group,)
    else:
        objs = ()
    for have in objs:
        if ctx.owned(have) and not ownership.deleting(have):
            _release(draft, have, reason)


def _release(draft: Draft, have: Obj, reason: str) -> None:
    """The PodGroup deleted; a scheduler-plugins one marked released first, in the same plan (the
    executor sends patches before deletes).

    Why: Coscheduling puts the pods of a gang it turned away back in line on pod adds and PodGroup
    adds and updates only, not on pod or PodGroup deletions. This update is what tells a gang that
    waits for this one's room to try again; without it that gang waits for the scheduler's periodic
    retry (docs/development.md, "Gang scheduling, proven": 19-32 s, once more than 120 s)."""
    if have.get("apiVersion") == podgroup.SCHEDULER_PLUGINS_API:
        # Marked each time it is deleted, even if marked before: a mark left by a delete that failed,
        # on a group a resume then kept, must not make the next release silent.
        mark = {"metadata": {"annotations": {podgroup.RELEASED_ANNOTATION: status.fmt_time(draft.now)}}}
        draft.plan.patches.append(Patch(diff.ref_of(have), mark, f"mark released: {reason}"))
    draft.delete(have, reason)


def _on_node(pod: Obj) -> bool:
    """Bound to a node and holding it: not ended (a deleted pod holds it until it ends or is gone).
    The scheduler drops an ended pod from its cache as if it were deleted."""
    return bool((pod.get("spec") or {}).get("nodeName")) and not ownership.ended(pod)


def gang_wait(ctx: JobContext, draft: Draft, running: bool) -> None:
    have = ctx.observed.pod_group if ctx.owned(ctx.observed.pod_group) else None
    etype, reason, msg, placed = "Normal", podgroup.R_WAITING, None, ""
    if workload_gang.enabled(ctx.config):
        if ctx.config.gang_unavailable:
            etype, reason = "Warning", workload_gang.R_UNAVAILABLE
            msg = f"MPIJob {ctx.key} cannot start: {ctx.config.gang_unavailable}."
        elif not running:
            msg = workload_gang.waiting_message(have, ctx.key)
        placed = "scheduled" if have is not None else "gone"
    elif podgroup.enabled(ctx.config):
        said = podgroup.scheduler_said(have, [p for p in ctx.pods.launchers + ctx.pods.workers if _alive(p)])
        msg = None if running else podgroup.waiting_message(have, ctx.key, said)
        placed = podgroup.phase(have) or "gone"
    current = status.get_condition(draft.status, podgroup.WAITING_CONDITION)
    if msg is not None:
        # Set when the wait begins, and once more when the scheduler's words first come (quoted): the
        # phase flips between Pending and Scheduling while pods wait at the scheduler's Permit, and
        # the scheduler rewrites its message each attempt; each new message would be one more write.
        begins = not status.is_true(draft.status, podgroup.WAITING_CONDITION) or (current or {}).get("reason") != reason
        if begins or (podgroup.QUOTE in msg and podgroup.QUOTE not in str((current or {}).get("message"))):
            draft.condition(podgroup.WAITING_CONDITION, "True", reason, msg)
        if begins:
            draft.event(etype, reason, msg)
    elif current is not None:
        status.remove_condition(draft.status, podgroup.WAITING_CONDITION)
        draft.event("Normal", podgroup.R_GANG_SCHEDULED,
                    f"MPIJob {ctx.key}: the whole gang is placed (PodGroup {placed}).")
