"""The plan's part in gang scheduling (`--gang-scheduling`, reconcilers/podgroup.py for the objects).

- `sync_pod_group`: the MPIJob's PodGroup, created before its workers while it runs and repaired.
- `drop_pod_group`: deleted when the MPIJob is suspended (a resume creates it afresh) or finishes.
- `gang_wait`: WaitingForGang=True (the State column) while the PodGroup waits for room for every
  pod, and an Event when the whole gang is placed.
Nothing here does I/O.
"""

from __future__ import annotations

from reconcilers import desired, podgroup, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.types import Create


def sync_pod_group(ctx: JobContext, draft: Draft) -> None:
    if not podgroup.enabled(ctx.config):
        return
    want = podgroup.pod_group(ctx.job, ctx.config, desired.owner_reference(ctx.job))
    have = ctx.observed.pod_group
    if have is None:
        draft.plan.creates.append(Create(want))
    elif ctx.owned(have):
        patch = podgroup.diff_pod_group(want, have)
        if patch:
            draft.plan.patches.append(patch)


def drop_pod_group(ctx: JobContext, draft: Draft, reason: str) -> None:
    status.remove_condition(draft.status, podgroup.WAITING_CONDITION)
    have = ctx.observed.pod_group
    if podgroup.enabled(ctx.config) and ctx.owned(have) and not (have.get("metadata") or {}).get("deletionTimestamp"):
        draft.delete(have, reason)


def gang_wait(ctx: JobContext, draft: Draft, running: bool) -> None:
    have = ctx.observed.pod_group if ctx.owned(ctx.observed.pod_group) else None
    msg = None if running or not podgroup.enabled(ctx.config) else podgroup.waiting_message(have, ctx.key)
    if msg is not None:
        # Set when the wait begins only: the phase flips between Pending and Scheduling while pods
        # wait at the scheduler's Permit, and each new message would be one more status write.
        if not status.is_true(draft.status, podgroup.WAITING_CONDITION):
            draft.condition(podgroup.WAITING_CONDITION, "True", podgroup.R_WAITING, msg)
            draft.event("Normal", podgroup.R_WAITING, msg)
    elif status.get_condition(draft.status, podgroup.WAITING_CONDITION) is not None:
        status.remove_condition(draft.status, podgroup.WAITING_CONDITION)
        draft.event("Normal", podgroup.R_GANG_SCHEDULED,
                    f"MPIJob {ctx.key}: the whole gang is placed (PodGroup {podgroup.phase(have) or 'gone'}).")
