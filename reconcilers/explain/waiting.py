"""Why an MPIJob is not running: the condition `Waiting` (docs/operations.md, "Why is my MPIJob not
running?"). Pure: time is `ctx.now`.

While an MPIJob is active (not suspended, not finished, not held by a name clash) and not Running,
`Waiting=True` says the first thing that holds it, quoting the component that knows and naming the
pod: a pod the scheduler cannot place (all of them named), an image the kubelet cannot pull, a
container it cannot create (a missing Secret or ConfigMap), a worker in CrashLoopBackOff; then, once
they have lasted `SLOW_AFTER_S`, what nobody reported: containers not started (a volume that cannot
be mounted), a worker not Ready, the launcher held by WaitForWorkersReady. It is removed once the
MPIJob runs, ends or is suspended; the gang's own condition `WaitingForGang`
(reconcilers/gang/lifecycle.py) speaks while it holds.

Writes: a job that starts normally never gets the condition (no component reports a cause, and no
pod is slow for `SLOW_AFTER_S`), so `make bench`'s writes per MPIJob do not grow. A cause is written
once: the message stays as written while the same cause holds the same pods (its `subject`), even
when the component rewords it (the kubelet alternates ErrImagePull and ImagePullBackOff, the
scheduler recounts nodes); no time or counter in it changes between looks.

State column: the last condition is the MPIJob's state (docs/architecture.md section 6.5). `Waiting`
goes after Created and WaitingForGang and before the stronger ones (Blocked, Running, Restarting,
Suspended, Succeeded, Failed), as the condition-order policy orders it (manifests/admission/): an
MPIJob held reads `Waiting` with its reason beside it (the CRD's Reason column; -o wide: the
message), one that restarts still reads `Restarting`. It is a type of its own: clients that read
Created/Running/Restarting/Suspended/Succeeded/Failed by type see them as upstream writes them.
"""

from __future__ import annotations

from reconcilers import children, desired, names, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.explain import facts, pods
from reconcilers.explain.pods import Hold
from reconcilers.gang import podgroup
from reconcilers.types import Obj

WAITING = "Waiting"
R_WAITING_FOR_WORKERS = "WaitingForWorkers"
# What nobody reports (a pod slow to start, a worker not Ready) is said after this long: a normal
# start on a busy cluster takes seconds to tens of seconds, and saying it then would be a write more
# per MPIJob for nothing (docs/architecture.md section 7).
SLOW_AFTER_S = 90.0
# The True conditions that outrank Waiting as the MPIJob's state (the condition-order policy's order,
# manifests/admission/): Waiting goes before them, after Created and WaitingForGang.
STRONGER = ("Blocked", status.RUNNING, status.RESTARTING, status.SUSPENDED, status.SUCCEEDED, status.FAILED)
# Pods named in one message at most (the scheduler's word is the same for all of them).
NAMED_MAX = 5


def sync(ctx: JobContext, draft: Draft, active: bool) -> None:
    """Sets, keeps or removes `Waiting` in the draft's status."""
    running = status.is_true(draft.status, status.RUNNING)
    gang = status.is_true(draft.status, podgroup.WAITING_CONDITION)
    hold, due = first_hold(ctx, draft.status) if active and not running and not gang else (None, None)
    if due is not None:
        draft.requeue(due)
    if hold is None:
        status.remove_condition(draft.status, WAITING)
        return
    old = status.get_condition(draft.status, WAITING)
    if old is not None and same_cause(old, hold):
        return
    message = f"{hold.subject}; {hold.detail}" if hold.detail else hold.subject
    draft.condition(WAITING, "True", hold.reason, message)
    status.before_the_true_ones(draft.status, WAITING, STRONGER)
    draft.event("Warning", hold.reason, f"MPIJob {ctx.key} is not running: {message}")


def same_cause(old: Obj, hold: Hold) -> bool:
    """The condition already says this cause (same reason, same subject): kept as written, unless it
    quotes a back-off and the component's own words are now there."""
    msg = str(old.get("message") or "")
    if old.get("status") != "True" or old.get("reason") != hold.reason or not msg.startswith(hold.subject):
        return False
    return hold.backoff or not _quotes_backoff(msg)


def _quotes_backoff(message: str) -> bool:
    return any(f"the kubelet: {r}" in message for r in pods.BACKOFF_REASONS)


def first_hold(ctx: JobContext, st: Obj) -> tuple[Hold | None, float | None]:
    """(the first thing that holds the MPIJob, or None; seconds until a slow cause is due, or None)."""
    candidates = [p for p in [*ctx.pods.workers, *ctx.pods.launchers] if not (p.get("metadata") or {}).get(
        "deletionTimestamp")]
    live = [facts.with_template(p, ctx.job) for p in candidates]  # images, limits, volumes: the cache has none
    reported = [(p, h) for p in live if (h := pods.hold(p)) is not None]
    unschedulable = [p for p, h in reported if h.reason == pods.R_UNSCHEDULABLE]
    if unschedulable:
        return _unschedulable(unschedulable, pods.hold(unschedulable[0])), None
    if reported:
        return reported[0][1], None
    due: float | None = None
    slow = [(h, status.parse_time(h.since)) for p in live if (h := pods.slow(p)) is not None]
    waits = _waits_for_workers(ctx, st)
    if waits is not None:
        slow.append((waits, status.parse_time(st.get("startTime"))))
    for h, since in slow:
        if since is None:
            continue  # since when is not known: never said (a pod always has its creation time)
        left = SLOW_AFTER_S - (ctx.now - since).total_seconds()
        if left <= 0:
            return h, None
        due = left if due is None else min(due, left)
    return None, due


def _unschedulable(stuck: list[Obj], first: Hold | None) -> Hold:
    """All the pods the scheduler cannot place, named, with its words for the first of them."""
    if len(stuck) == 1 and first is not None:
        return first
    named = sorted(facts.pod_name(p) for p in stuck)
    more = f" and {len(named) - NAMED_MAX} more" if len(named) > NAMED_MAX else ""
    return Hold(pods.R_UNSCHEDULABLE, f"pods {', '.join(named[:NAMED_MAX])}{more} cannot be scheduled",
                first.detail if first is not None else "")


def _waits_for_workers(ctx: JobContext, st: Obj) -> Hold | None:
    """The launcher held back by launcherCreationPolicy WaitForWorkersReady: the workers not Ready."""
    if (ctx.spec.get("launcherCreationPolicy") != "WaitForWorkersReady" or ctx.launcher is not None
            or children.workers_ready(ctx)):  # (the launcher's own gate: it is being created now)
        return None
    count = desired.worker_replicas(ctx.job)
    ready = {desired.pod_hostname(p) for p in ctx.pods.workers if desired.is_pod_ready(p)}
    prefix = f"{names.worker_name(ctx.job)}-"
    waiting = [f"{prefix}{i}" for i in range(count) if f"{prefix}{i}" not in ready]
    if not waiting:
        return None
    more = f" and {len(waiting) - NAMED_MAX} more" if len(waiting) > NAMED_MAX else ""
    return Hold(R_WAITING_FOR_WORKERS,
                f"the launcher is created once every worker is Ready (launcherCreationPolicy: WaitForWorkersReady); "
                f"not Ready: {', '.join(waiting[:NAMED_MAX])}{more}")

