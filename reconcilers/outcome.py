"""How an MPIJob ends or is held: the conditions that say so (docs/architecture.md sections 1 and 3).

Pure functions over a JobContext (what is observed) and a Draft (what is being decided):
- `invalid`: Failed/InvalidSpec naming the fields; `fixed_spec` clears it once the spec is valid.
- `refused`: a child the API server refused (reconcilers/refusal.py): permanent -> Failed/ChildRefused
  until the spec changes; transient -> Blocked=True while it lasts.
- `name_clash`: Failed/ResourceExists while an object not ours holds one of our names (no
  completionTime, so no TTL), cleared once the name is free.
- `launcher_outcome`: Succeeded or Failed from the launcher Job's conditions; Failed/WorkerLostDuringRun
  for an Open MPI launcher that exited 0 after a worker's loss that its own log shows cut ranks
  short (reconcilers/failure/workerloss.py judges, reconcilers/failure/evidence.py reads the evidence).
- `deadline`: runPolicy.activeDeadlineSeconds from status.startTime.
- `ttl`: ttlSecondsAfterFinished from status.completionTime.
One Event per transition, never per reconcile.
"""

from __future__ import annotations

from reconcilers import namewait, ownership, refusal, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.explain import ends, facts
from reconcilers.failure import afresh, evidence, messages, workerloss
from reconcilers.refusal import Refusal

# How soon a verdict that waits on the launcher's log (or on the pod cache) is looked at again, in
# case the controller's read brings no event (the read itself requeues at once).
EVIDENCE_RECHECK_SECONDS = 2.0


def _failed_reason(draft: Draft) -> str | None:
    failed = status.get_condition(draft.status, status.FAILED)
    return failed.get("reason") if failed is not None else None


def invalid(draft: Draft, errors: list) -> None:
    fields = ", ".join(dict.fromkeys(e.path or "(root)" for e in errors))
    message = "Invalid spec: " + "; ".join(str(e) for e in errors)
    old = status.get_condition(draft.old_status, status.FAILED)
    if draft.condition(status.FAILED, "True", status.R_INVALID, message) or (old or {}).get("message") != message:
        draft.event("Warning", status.R_INVALID, f"Fix {fields}: {message}")


def fixed_spec(draft: Draft) -> None:
    if _failed_reason(draft) == status.R_INVALID:
        status.remove_condition(draft.status, status.FAILED)


def refused(draft: Draft, write: Refusal | None) -> None:
    failed = _failed_reason(draft)
    if failed == refusal.R_REFUSED and not (write and write.permanent):
        status.remove_condition(draft.status, status.FAILED)  # a new generation: try again
        draft.status.pop("completionTime", None)
    blocked = status.get_condition(draft.status, refusal.BLOCKED)
    if blocked is not None and (write is None or write.permanent or draft.finished()):
        status.remove_condition(draft.status, refusal.BLOCKED)  # the write passed, or the job has ended
    if write is None or draft.finished():
        return
    msg = refusal.describe(write)
    if write.permanent:
        draft.fail(refusal.R_REFUSED, msg)
    elif draft.condition(refusal.BLOCKED, "True", refusal.R_REFUSED, msg) and blocked is None:
        draft.event("Warning", refusal.R_REFUSED, msg)


def name_clash(draft: Draft, clash: str | None) -> None:
    if _failed_reason(draft) == status.R_RESOURCE_EXISTS and not clash:
        status.remove_condition(draft.status, status.FAILED)  # the object in the way is gone
        draft.status.pop("completionTime", None)
    # Not an end: like InvalidSpec, no completionTime (so no TTL), cleared once the name is free.
    if clash and not draft.finished() and draft.condition(status.FAILED, "True", status.R_RESOURCE_EXISTS, clash):
        draft.event("Warning", status.R_RESOURCE_EXISTS, clash)


def launcher_outcome(ctx: JobContext, draft: Draft, entries: dict) -> None:
    """`entries`: the disruptions bound to launcher attempts (retries.Accounts.entries)."""
    if not ctx.owned(ctx.launcher) or ownership.deleting(ctx.launcher):
        return  # (the operator deletes a launcher Job only to make it afresh: afresh.relaunch, a suspend)
    outcome = status.job_outcome(ctx.launcher)
    if outcome is None:
        return
    kind, reason, message, when = outcome
    if afresh.interrupted_end(ctx, entries) is not None:
        return  # an attempt a disruption ended is no verdict, whatever its exit: made afresh (afresh.relaunch)
    judged = workerloss.judge(ctx, draft) if kind == status.SUCCEEDED else workerloss.Judgement()
    if judged.wait:
        # The launcher's own report decides (reconcilers/failure/evidence.py): read its log, then plan again.
        if judged.read is not None:
            draft.plan.read_logs.append(judged.read)
        draft.awaiting_verdict = True
        draft.requeue(EVIDENCE_RECHECK_SECONDS)
        return
    if judged.cut_short:
        draft.fail(status.R_WORKER_LOST, (
            f"MPIJob {ctx.key}: the launcher exited 0, but {judged.cut_short}, so ranks did not all finish: "
            "Open MPI 5's mpirun (PRRTE) exits 0 when it loses a worker's daemon and the launcher Job cannot "
            "retry a success (spec.mpiImplementation OpenMPI; runPolicy.backoffLimit does not apply). "
            "Resubmit the MPIJob, or run Open MPI 4, MPICH or Intel MPI, whose mpirun fails and is retried; "
            "a launcher that recovers from losses itself (one that runs mpirun again after a loss, say) can set "
            f"the annotation {evidence.WORKER_LOSS_ANNOTATION}: {evidence.EXIT_CODE}."), when)
    elif kind == status.SUCCEEDED:
        msg = f"MPIJob {ctx.key} successfully completed.{judged.note}"
        if draft.condition(status.SUCCEEDED, "True", status.R_SUCCEEDED, msg):
            draft.event("Normal", status.R_SUCCEEDED, msg)
            if judged.warn:
                draft.event("Warning", workerloss.R_LOG_UNREADABLE, f"MPIJob {ctx.key}: {judged.warn}")
        draft.status.setdefault("completionTime", when or status.fmt_time(ctx.now))
        draft.status["replicaStatuses"] = {}
        workerloss.drop(draft)  # the loss, if any, cut no rank short: the launcher's log says so
    elif (permanent := messages.permanent_exit(ctx, reason, message)) is not None:
        draft.fail(*permanent, when)  # restartPolicy ExitCode: the reason names the exit code's class
    else:
        detail = last_failed_launcher_pod(ctx) if reason == "BackoffLimitExceeded" else ""
        draft.fail(reason, f"MPIJob {ctx.key} has failed: {message or reason}{detail}", when)
    not_running_if_never_ran(draft, when)


def not_running_if_never_ran(draft: Draft, when: str | None) -> None:
    if status.get_condition(draft.status, status.RUNNING) is None:
        at = when or status.fmt_time(draft.now)
        draft.status["conditions"] = [{
            "type": status.RUNNING, "status": "False", "reason": status.R_RUNNING,
            "message": "The MPIJob finished without all its pods ever running together.",
            "lastUpdateTime": at, "lastTransitionTime": at}, *status.conditions_of(draft.status)]


def last_failed_launcher_pod(ctx: JobContext) -> str:
    failed = [p for p in ctx.pods.launchers if (p.get("status") or {}).get("phase") == "Failed"]
    if not failed:
        return ""
    pod = max(failed, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")
    text = ends.end(facts.with_template(pod, ctx.job))  # reconcilers/explain/ends.py
    init = namewait.init_failure(pod)  # the hosts its init container found no address for
    return f" (last launcher {facts.where(pod)}: it {text}{'; ' + init if init and init not in text else ''})"


def deadline(ctx: JobContext, draft: Draft) -> None:
    ads = ctx.run_policy.get("activeDeadlineSeconds")
    start = status.parse_time(draft.status.get("startTime"))
    if ads is None or start is None or ctx.run_policy.get("suspend"):
        return
    due = status.later(start, ads)
    if due is None:
        return  # beyond year 9999: a deadline that never comes (not a crash, issue 36)
    if ctx.now >= due:
        draft.fail(status.R_DEADLINE, f"MPIJob {ctx.key} ran longer than runPolicy.activeDeadlineSeconds "
                   f"({ads}s); raise it if the job needs more time")
        not_running_if_never_ran(draft, None)
    else:
        draft.requeue((due - ctx.now).total_seconds())


def ttl(ctx: JobContext, draft: Draft) -> None:
    seconds = ctx.run_policy.get("ttlSecondsAfterFinished")
    done = status.parse_time(draft.status.get("completionTime"))
    if seconds is None or done is None:
        return
    due = status.later(done, seconds)
    if due is None:
        return  # beyond year 9999: never
    if ctx.now >= due:
        draft.plan.delete_mpijob = True
    else:
        draft.requeue((due - ctx.now).total_seconds())
