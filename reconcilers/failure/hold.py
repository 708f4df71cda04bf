"""Launcher pods held until their end is recorded (docs/architecture.md section 11, "The record of
each attempt's end"). Pure: nothing here does I/O.

The verdict reads how each launcher attempt ended from its pod: its exit code and whether a
disruption ended it (`DisruptionTarget`). A drain, an eviction or the pod GC can remove that pod
before the operator has looked (the operator restarting, say), and then the verdict would rest on the
launcher Job's counts alone, which tell neither: a drained launcher's exit 0 read as a finish. The
Job controller guards its own count the same way (its finalizer `batch.kubernetes.io/job-tracking`
holds each pod until the pod's end is in the Job's status). So every launcher pod carries FINALIZER
from its creation (the launcher Job's template: the Job controller copies a template's finalizers onto
its pods), and the operator removes it once that pod's end is in a durable record:
- the ledger on the launcher Job (reconcilers/failure/ledger.py) announces its last attempt (a failure,
  counted or not), or
- the MPIJob's status shows the verdict (Succeeded or Failed), or
- nothing will be judged of it: the MPIJob is suspended (a suspend's end is no verdict), being deleted
  or gone, or the pod is not of the launcher Job that runs now (a Job made afresh takes the ledger
  with it: `hand_over`, `carry`). An exit 0 a disruption ended waits for this last one: its Job is
  made afresh on the strength of that pod (`_made_afresh_from`).
A pod whose end is recorded by this very plan is released on the next one (`RECHECK_S`): the record
first, the release after, as the Job controller does.

The release is a strategic merge patch that removes this one finalizer (`$deleteFromPrimitiveList`),
never a whole list: the Job controller removes its own at the same time. One write per launcher pod.
Without the grant to patch pods (reconcilers/access.py, feature `attempt-record`) no pod is held: the
finalizer is not put on the template, so nothing could hang.
"""

from __future__ import annotations

from reconcilers import access, names, ownership, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure.afresh import interruption
from reconcilers.failure.ledger import Ledger
from reconcilers.failure.retries import name_of, restarts, uid_of
from reconcilers.types import Config, Obj, Patch, Ref

FINALIZER = names.ATTEMPT_RECORD_FINALIZER
FEATURE = names.ATTEMPT_RECORD_FEATURE
# How soon a pod whose end this plan recorded is released (the next plan reads the record).
RECHECK_S = 1.0
# How soon a release is sent again, should it not have passed (a refusal stops nothing else: the
# executor logs it); one that passed leaves nothing to send.
RETRY_S = 10.0


def enabled(config: Config) -> bool:
    return not access.off(config, FEATURE)


def holds(pod: Obj) -> bool:
    return FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def release_patch(pod: Obj, why: str) -> Patch:
    meta = pod.get("metadata") or {}
    return Patch(Ref("v1", "Pod", meta.get("namespace", ""), meta.get("name", "")),
                 {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}},
                 f"release {FINALIZER}: {why}", strategic=True)


def release_all(pods: list[Obj] | tuple[Obj, ...], why: str) -> list[Patch]:
    """Every held pod released: the MPIJob is being deleted or gone, nothing will be judged."""
    return [release_patch(p, why) for p in pods if holds(p)]


def _ended(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _current(ctx: JobContext, pod: Obj) -> bool:
    """The pod is of the launcher Job that runs now (not one being deleted or made afresh)."""
    launcher = ctx.launcher
    if launcher is None or not ctx.owned(launcher) or ownership.deleting(launcher):
        return False
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") and r.get("uid") == uid_of(launcher) for r in refs)


def _made_afresh_from(ctx: JobContext, pod: Obj, book: Ledger) -> bool:
    """A disruption ended the pod with exit 0 (afresh.interruption): its Job completes and cannot run it
    again, and the Job made afresh is told so by this pod (afresh.interrupted_end), so it is held until
    that Job is made afresh, its end announced or not. Released once announced, it could go before its
    Job shows Complete, and that Complete would then read as the MPIJob's finish."""
    return (pod.get("status") or {}).get("phase") == "Succeeded" and interruption(ctx, pod, book.entries) is not None


def why_free(ctx: JobContext, pod: Obj, book: Ledger, judged: bool, suspend: bool) -> str | None:
    """Why the held pod may go now (its end is recorded, or will never be judged), or None."""
    if judged:
        return "the MPIJob's verdict is written"
    if suspend:
        return "the MPIJob is suspended: the attempt a suspend ended is not judged"
    if not _current(ctx, pod):
        return "its launcher Job is gone or made afresh (its ledger went with it)"
    if not _ended(pod) or _made_afresh_from(ctx, pod, book):
        return None
    run = restarts(ctx, pod)
    order = ((pod.get("metadata") or {}).get("creationTimestamp") or "", name_of(pod), run)
    if book.announced(f"{name_of(pod)}#{run}", order):
        return "its end is in the launcher Job's ledger"
    return None


def release(ctx: JobContext, draft: Draft, book: Ledger, suspend: bool) -> None:
    """Releases each held launcher pod whose end is recorded (`why_free`); a pod whose end this plan
    records (a verdict, an announced attempt) is looked at again `RECHECK_S` later."""
    pods = [p for p in (*ctx.pods.launchers, *ctx.pods.stale) if holds(p)]
    if not pods:
        return
    if any(d.ref.kind != "Pod" for d in draft.plan.deletes):
        # The executor sends patches before deletes, and a refused one stops the plan: a release never
        # stands in the way of a Job's delete (a suspend's, one made afresh); the next plan sends it.
        draft.requeue(RECHECK_S)
        return
    judged = status.is_finished(draft.old_status) and bool(draft.old_status.get("completionTime"))
    for pod in pods:
        why = why_free(ctx, pod, book, judged, suspend)
        if why is not None:
            draft.plan.patches.append(release_patch(pod, why))
            draft.requeue(RETRY_S)
        elif draft.status != draft.old_status or draft.plan.patches:
            draft.requeue(RECHECK_S)  # its end may be recorded by this plan's writes: read them next
