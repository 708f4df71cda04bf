"""A worker lost while a launcher attempt runs, recorded in the MPIJob's status (docs/architecture.md
section 9). Pure: time is an argument (`ctx.now`), nothing here does I/O.

Open MPI 5's mpirun (PRRTE) exits 0 after losing a worker's daemon, so its launcher Job succeeds
and cannot retry. The operator then ends the MPIJob Failed/WorkerLostDuringRun (outcome.py), but
only if it still knows of the loss when the launcher's success shows. What it saw at the time does
not last: `Running` clears `Restarting` once the replacement worker is Ready (upstream's rule),
which on the StatefulSet backend can come before PRRTE exits, and the lost pod leaves the cache.
So each loss seen while an attempt runs is recorded in the condition `WorkerLost` (True; its
`lastTransitionTime` is when the worker was lost): the status subresource outlives `Running`, the
informers' caches and an operator restart, and it is one more entry in the list upstream's
clients already decode (a condition type is a string to them; `kubectl get mpijobs` keeps showing
the strongest condition, docs/architecture.md section 6.5).

The record belongs to one launcher attempt: the launcher pod, not Failed, that had started by the
time of the loss. It is removed once no such pod is left (the attempt failed and the Job's retry
runs), so a retry that succeeds ends Succeeded. It is written only together with what a loss
writes anyway (Restarting, a recreated worker Job) or with the retry's Running: a run without a
loss never writes it. Only `mpiImplementation: OpenMPI` needs it: the other MPIs' mpirun fails on
a lost host, and the Job retries it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from reconcilers import desired, names, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.types import Obj

WORKER_LOST = "WorkerLost"  # condition type, True while the current launcher attempt has lost a worker
R_WORKER_LOST = "WorkerLostDuringAttempt"
# A worker pod created this long after Running was set is a replacement (replaced_unseen).
REPLACED_AFTER_S = timedelta(seconds=2)


def applies(ctx: JobContext) -> bool:
    return ctx.spec.get("mpiImplementation") == "OpenMPI"


def _times(pod: Obj, key: str) -> list[datetime]:
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        t = status.parse_time((((cs or {}).get("state") or {}).get("terminated") or {}).get(key))
        if t is not None:
            out.append(t)
    return out


def started(pod: Obj) -> datetime | None:
    return status.parse_time((pod.get("status") or {}).get("startTime"))


def finished(pod: Obj) -> datetime | None:
    return max(_times(pod, "finishedAt"), default=None)


def _index(ctx: JobContext, pod: Obj) -> int | None:
    prefix = names.worker_name(ctx.job) + "-"
    host = desired.pod_hostname(pod)
    return int(host[len(prefix):]) if host.startswith(prefix) and host[len(prefix):].isdigit() else None


def pod_lost_at(pod: Obj, now: datetime) -> datetime | None:
    """When a worker pod was lost: its first container's end, else (still stopping) when its delete
    was asked for. `deletionTimestamp` is that request plus the grace period (the deadline of the
    kubelet's kill), not the moment the pod went away, so the grace period is taken off."""
    meta, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
    ended = _times(pod, "finishedAt")
    if ended:
        return min(ended)
    if phase in ("Failed", "Succeeded"):
        return now
    deleting = status.parse_time(meta.get("deletionTimestamp"))
    if deleting is None:
        return None
    grace = meta.get("deletionGracePeriodSeconds")
    return min(deleting - timedelta(seconds=grace if isinstance(grace, int) else 0), now)


def resumed_at(st: Obj) -> datetime | None:
    """When the MPIJob was last resumed (its Suspended condition turned False), or None."""
    c = status.get_condition(st, status.SUSPENDED)
    return status.parse_time(c.get("lastTransitionTime")) if c and c.get("status") == "False" else None


def stopped_by_suspend(pod: Obj, resumed: datetime | None) -> bool:
    """A worker pod created before the last resume: the suspend stopped it (the Job controller
    deletes a suspended Job's pods, the StatefulSet is scaled to 0), so its end is no loss of the run
    that the resume started. Its end cannot be told apart by time: both it and the resumed launcher's
    start are stored in whole seconds, and a pod that takes a second to stop ends in the very second
    the new launcher starts (docs/architecture.md section 9). Its creation is before the resume (the
    condition's time, in the operator's clock); one created in the resume's second counts as new."""
    created = status.parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    return resumed is not None and created is not None and created < resumed


def current_workers(ctx: JobContext, st: Obj) -> list[Obj]:
    """The worker pods of the run since the last resume (all of them if never suspended)."""
    resumed = resumed_at(st)
    return [p for p in ctx.pods.workers if not stopped_by_suspend(p, resumed)]


def pod_losses(ctx: JobContext, st: Obj) -> list[tuple[datetime, str]]:
    """(when, what) for each worker pod that ended or is being deleted, earliest first. A pod a
    scale-down removes (its index at or past Worker replicas) is not lost: it was asked for; nor is
    one a suspend stopped (`st`: the MPIJob's status, for the resume's time)."""
    count = desired.worker_replicas(ctx.job)
    out = []
    for pod in current_workers(ctx, st):
        index = _index(ctx, pod)
        when = pod_lost_at(pod, ctx.now)
        if when is not None and (index is None or index < count):
            out.append((when, f"worker {desired.pod_hostname(pod)} was lost"))
    return sorted(out)


def replaced_unseen(ctx: JobContext, old_status: Obj) -> list[tuple[datetime, str]]:
    """Worker pods created while the MPIJob was Running: every worker was Ready when Running was set,
    so a worker pod (index below Worker replicas) created later replaces a lost one, even if no plan
    saw the loss (a StatefulSet can replace a pod within a reconcile's delay). A scale-up is no such
    pod: the plan that sees the new replicas sets Restarting, which ends Running. Running's time is the
    operator's clock and a pod's creation the API server's: REPLACED_AFTER_S of margin for skew."""
    running = status.get_condition(old_status, status.RUNNING) or {}
    since = status.parse_time(running.get("lastTransitionTime"))
    if running.get("status") != "True" or since is None:
        return []
    count = desired.worker_replicas(ctx.job)
    out = []
    for pod in ctx.pods.workers:
        index = _index(ctx, pod)
        created = status.parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and created - since >= REPLACED_AFTER_S and (index is None or index < count):
            out.append((created, f"worker {desired.pod_hostname(pod)} was replaced"))
    return sorted(out)


def losses(ctx: JobContext, draft: Draft, workers_ready: int) -> list[tuple[datetime, str]]:
    """Every loss the plan sees now: pods lost or replaced, and a Running MPIJob whose workers' Ready
    count fell below what it ran with (the lost pod may have left the cache already). A count that
    grew (a scale-up) is not a loss, so the bar is what the last status recorded as active."""
    out = pod_losses(ctx, draft.status) + replaced_unseen(ctx, draft.old_status)
    count = desired.worker_replicas(ctx.job)
    # The status as stored: any shape the CRD admits (it does not type replicaStatuses' values).
    replicas = draft.old_status.get("replicaStatuses")
    worker = replicas.get("Worker") if isinstance(replicas, dict) else None
    was = worker.get("active") if isinstance(worker, dict) else None
    bar = min(count, int(was)) if isinstance(was, int) else count
    if status.is_true(draft.old_status, status.RUNNING) and workers_ready < bar:
        out.append((ctx.now, f"only {workers_ready} of {bar} worker(s) are Ready"))
    return out


def attempt(ctx: JobContext, when: datetime) -> Obj | None:
    """The launcher pod (attempt) a loss at `when` belongs to: the newest not Failed that had started
    by then. None when the attempt has failed (its retry starts 10 s or more later) or none ran."""
    runs = [(t, p) for p in ctx.pods.launchers if (p.get("status") or {}).get("phase") != "Failed"
            for t in [started(p)] if t is not None and t <= when]
    return max(runs, key=lambda run: run[0])[1] if runs else None


def recorded_at(st: Obj) -> datetime | None:
    c = status.get_condition(st, WORKER_LOST)
    return status.parse_time(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def record(ctx: JobContext, draft: Draft, workers_ready: int) -> None:
    """Drops a record whose attempt is over, then records the first loss of the current attempt."""
    if not applies(ctx):
        return
    at = recorded_at(draft.status)
    if status.get_condition(draft.status, WORKER_LOST) is not None and (at is None or attempt(ctx, at) is None):
        status.remove_condition(draft.status, WORKER_LOST)
        at = None
    if at is not None:
        return  # this attempt already lost a worker: the first loss is the one that counts
    for when, what in losses(ctx, draft, workers_ready):
        pod = attempt(ctx, when)
        if pod is not None:
            name = (pod.get("metadata") or {}).get("name", "?")
            status.set_condition(draft.status, WORKER_LOST, "True", R_WORKER_LOST, (
                f"{what} while launcher pod {name} ran: Open MPI 5's mpirun exits 0 after such a loss, so if "
                "this attempt succeeds the MPIJob ends Failed/WorkerLostDuringRun; a retried launcher clears "
                "this condition"), when)
            _before_the_true_ones(draft.status)
            return


def _before_the_true_ones(st: Obj) -> None:
    """The record goes before the True conditions (where the condition-order policy puts a type it
    does not know, docs/architecture.md section 6.5): the last condition stays the MPIJob's state,
    with or without the policy."""
    conds = status.conditions_of(st)
    rec = [c for c in conds if c.get("type") == WORKER_LOST]
    rest = [c for c in conds if c.get("type") != WORKER_LOST]
    at = next((i for i, c in enumerate(rest) if c.get("status") == "True"), len(rest))
    st["conditions"] = rest[:at] + rec + rest[at:]


def drop(draft: Draft) -> None:
    status.remove_condition(draft.status, WORKER_LOST)


def lost_during(ctx: JobContext, draft: Draft, pod: Obj) -> str | None:
    """What shows that a worker was lost while launcher pod `pod` (Succeeded) ran: the record of a
    loss at or after its start, or a worker pod that ended or was deleted between its start and end."""
    start, end = started(pod), finished(pod)
    if start is None:
        return None
    at = recorded_at(draft.status)
    if at is not None and start <= at:
        return "a worker was lost (condition WorkerLost)"
    for when, what in pod_losses(ctx, draft.status):
        if start <= when and (end is None or when <= end):
            return what
    # A replacement created after the end was lost before it was created: maybe during the run.
    return next((what for when, what in replaced_unseen(ctx, draft.old_status) if start <= when), None)
