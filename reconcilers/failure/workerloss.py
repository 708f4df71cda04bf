"""A worker lost while a launcher pod runs, and the verdict on that launcher's exit 0 (docs/architecture.md
section 9.1). Pure: nothing here does I/O or reads a clock.

Open MPI 5's mpirun (PRRTE 3.0) can exit 0 after losing a worker's daemon, with ranks cut short: the
launcher Job succeeds and cannot retry. A loss does not always cut ranks short, though: a launcher
that prepares before `mpirun` (a download, a wait for storage) loses nothing when a worker is
replaced meanwhile, and neither does one that runs `mpirun` twice with a replacement in between. So
a loss is a reason to ask for evidence, never a verdict by itself:

1. **What is a loss.** A worker pod of the current run that ended or is being deleted, or whose
   delete the controller saw (`Inputs.gone_workers`: a StatefulSet can replace a pod between two
   reconciles), at an index below Worker replicas (a scale-down is asked for). Not a Ready count
   that falls (a node missing heartbeats turns its pods' Ready False while they run on; so does a
   flapping readiness probe), and not a time compared across clocks.
2. **Whose loss.** The launcher pod that runs (phase Running) or has just exited 0 when the plan sees
   the loss: the attempt. A worker whose delete was asked for before that launcher pod was created
   (or in the same second: both are stored in whole seconds) is no loss of it (a suspend's or an
   earlier attempt's): both times are the API server's (`deletionTimestamp` minus the grace period,
   and `creationTimestamp`), one clock. Nor is a worker pod that ended without a delete (the Job
   backend keeps failed pods) once a newer pod of its hostname was created at or before that
   launcher pod: its replacement was there, so it had ended.
3. **The record.** The first loss of an attempt is written to the condition `WorkerLost` (True,
   naming the launcher pod): it must outlive `Running`, the informers' caches and an operator
   restart until the verdict. A record whose launcher pod is gone or Failed is dropped (that attempt
   is over; the Job's retry starts afresh).
4. **The verdict on an exit 0** (`judge`): the launcher's own report decides, on every exit 0
   (reconcilers/failure/evidence.py): a loss the operator saw is not the only way to lose a rank (a
   worker's node lost, its pod Running until the 300 s toleration; a worker container restarted in
   place; a delete a standby never saw). Its log's end shows a lost daemon or rank -> cut short,
   loss seen or not; shows none -> Succeeded; cannot be read -> cut short after a loss seen, on the
   side of a resubmit, else Succeeded, said so with a Warning Event (a healthy run is not failed
   because its log was rotated away).

5. **A launcher that waits on.** mpirun ends within seconds of a lost daemon whose connection
   closed; one whose worker left without a word (its network cut, then its pod evicted, as a
   partitioned node's) waits for it, and with the StatefulSet backend nothing else ends the attempt
   (the Job backend recreates every worker, whose connections do close). `WAITS_AFTER_S` after the
   loss, a launcher pod still running turns the record's
   reason to `LauncherWaitsForLostWorker`, with a Warning Event saying what ends it: the operator
   does not kill it, as a launcher still preparing before its mpirun (a loss during setup) is healthy.

Only `mpiImplementation: OpenMPI` with the worker-loss policy `Evidence` needs any of this: the other
MPIs' mpirun fails on a lost host and the Job retries it, and the policy `ExitCode` trusts the exit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconcilers import desired, ownership, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure import evidence
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import LogRead, Obj

WORKER_LOST = "WorkerLost"  # condition type, True while the current launcher attempt has lost a worker
R_WORKER_LOST = "WorkerLostDuringAttempt"
# The same record once the attempt has run on this long after the loss (rule 5 above): Open MPI's
# mpirun ends within seconds of losing a daemon that said goodbye; one that left without a word
# (its network cut, then evicted) leaves it waiting.
R_LAUNCHER_WAITS = "LauncherWaitsForLostWorker"
WAITS_AFTER_S = 60
# The record names its attempt in the message's first words (a condition has no other free field).
_ATTEMPT = re.compile(r"^launcher pod (\S+): ")


def applies(ctx: JobContext) -> bool:
    return ctx.spec.get("mpiImplementation") == "OpenMPI" and evidence.policy(ctx.job) == evidence.EVIDENCE


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _phase(pod: Obj) -> str | None:
    return (pod.get("status") or {}).get("phase")


def delete_asked_at(pod: Obj) -> datetime | None:
    """When the pod's delete was asked for, in the API server's clock: `deletionTimestamp` is that
    request plus the grace period (the deadline of the kubelet's kill)."""
    meta = _meta(pod)
    deleting = status.parse_time(meta.get("deletionTimestamp"))
    if deleting is None:
        return None
    grace = meta.get("deletionGracePeriodSeconds")
    return deleting - timedelta(seconds=grace if isinstance(grace, int) and 0 <= grace < 10**9 else 0)


def resumed_at(st: Obj) -> datetime | None:
    """When the MPIJob was last resumed (its Suspended condition turned False), or None."""
    c = status.get_condition(st, status.SUSPENDED)
    return status.parse_time(c.get("lastTransitionTime")) if c and c.get("status") == "False" else None


def stopped_by_suspend(pod: Obj, resumed: datetime | None) -> bool:
    """A worker pod created before the last resume: the suspend stopped it. Used only to keep such a
    pod from showing the resumed run as Restarting; the verdict never rests on it (two clocks: the
    resume is the operator's, the creation the API server's)."""
    created = status.parse_time(_meta(pod).get("creationTimestamp"))
    return resumed is not None and created is not None and created < resumed


def current_workers(ctx: JobContext, st: Obj) -> list[Obj]:
    """The worker pods of the run since the last resume (all of them if never suspended)."""
    resumed = resumed_at(st)
    return [p for p in ctx.pods.workers if not stopped_by_suspend(p, resumed)]


def _lost_pods(ctx: JobContext) -> list[Obj]:
    """Worker pods that ended, are being deleted, or whose delete the controller saw, at an index
    below Worker replicas (a scale-down is asked for): rule 1 above, before whose loss it is."""
    count = desired.worker_replicas(ctx.job)
    out = []
    for pod in [*ctx.pods.workers, *ctx.inputs.gone_workers]:
        gone = any(pod is g for g in ctx.inputs.gone_workers)
        index = desired.worker_index(ctx.job, pod)
        if (index is None or index < count) and (gone or ownership.ended(pod) or ownership.deleting(pod)):
            out.append(pod)
    return out


def lost_now(ctx: JobContext, st: Obj) -> list[str]:
    """The hostnames of the current run's workers lost as the plan sees them (Restarting says so)."""
    resumed = resumed_at(st)
    return sorted({desired.pod_hostname(p) for p in _lost_pods(ctx) if not stopped_by_suspend(p, resumed)})


def attempt(ctx: JobContext) -> Obj | None:
    """The launcher pod a loss seen now belongs to: the newest one that runs or has exited 0."""
    runs = [p for p in ctx.pods.launchers if _phase(p) in ("Running", "Succeeded")]
    return max(runs, key=lambda p: _meta(p).get("creationTimestamp") or "") if runs else None


def lost_workers(ctx: JobContext, launcher_pod: Obj) -> list[str]:
    """The hostnames of the workers lost during `launcher_pod`'s run (rules 1 and 2 above)."""
    return sorted({desired.pod_hostname(p) for p in _lost_during(ctx, launcher_pod)})


def _lost_during(ctx: JobContext, launcher_pod: Obj) -> list[Obj]:
    created = status.parse_time(_meta(launcher_pod).get("creationTimestamp"))
    out = []
    for pod in _lost_pods(ctx):
        asked = delete_asked_at(pod)
        if asked is not None and created is not None and asked <= created:
            # Asked before this attempt began (a suspend, an earlier attempt), or in the second of its
            # creation (both stored in whole seconds), when its mpirun cannot have started yet.
            continue
        if asked is None and created is not None and _replaced_by(ctx, pod, created):
            continue  # ended before this attempt began: its replacement was already there
        out.append(pod)
    return out


def _lost_at(pod: Obj) -> datetime | None:
    """When a lost worker went: its delete asked for, else its last container's end (None: unknown)."""
    ends = [status.parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(c, dict)]
    return delete_asked_at(pod) or max((t for t in ends if t is not None), default=None)


def _replaced_by(ctx: JobContext, ended: Obj, created: datetime) -> bool:
    """A newer pod of `ended`'s hostname was created at or before `created` (a launcher pod's
    creation): `ended` ended before that, since a worker is replaced only once it has ended (the Job
    backend keeps failed pods as long as its worker Job). Both times are the API server's, one clock,
    whole seconds; without a node clock, this is the only order of the two known (rule 2 above)."""
    host, uid = desired.pod_hostname(ended), _meta(ended).get("uid")
    born = status.parse_time(_meta(ended).get("creationTimestamp"))
    for other in ctx.pods.workers:
        when = status.parse_time(_meta(other).get("creationTimestamp"))
        if (_meta(other).get("uid") != uid and desired.pod_hostname(other) == host and when is not None
                and when <= created and (born is None or when >= born)):
            return True
    return False


def recorded_attempt(st: Obj) -> str | None:
    """The launcher pod named by the WorkerLost record, if there is one."""
    c = status.get_condition(st, WORKER_LOST)
    m = _ATTEMPT.match(str(c.get("message") or "")) if c and c.get("status") == "True" else None
    return m.group(1) if m else None


def _pod_named(ctx: JobContext, name: str) -> Obj | None:
    return next((p for p in ctx.pods.launchers if _meta(p).get("name") == name), None)


def record(ctx: JobContext, draft: Draft) -> None:
    """Drops a record whose attempt is over, then records the first loss of the current attempt."""
    if not applies(ctx):
        return
    name = recorded_attempt(draft.status)
    pod = _pod_named(ctx, name) if name else None
    if status.get_condition(draft.status, WORKER_LOST) is not None and (pod is None or _phase(pod) == "Failed"):
        status.remove_condition(draft.status, WORKER_LOST)
        name = None
    if name is not None:
        _still_waiting(ctx, draft, pod)  # this attempt already lost a worker: the first loss counts
        return
    current = attempt(ctx)
    lost = lost_workers(ctx, current) if current is not None else []
    if current is not None and lost:
        _write_record(ctx, draft, _meta(current).get("name", "?"), lost)


def _still_waiting(ctx: JobContext, draft: Draft, pod: Obj | None) -> None:
    """Rule 5 above: the record's launcher pod still runs `WAITS_AFTER_S` after the loss: said once
    (the reason changes, with a Warning Event); before that, a requeue at that mark."""
    c = status.get_condition(draft.status, WORKER_LOST) or {}
    since = status.parse_time(c.get("lastTransitionTime"))
    if pod is None or _phase(pod) != "Running" or since is None or c.get("reason") != R_WORKER_LOST:
        return
    left = WAITS_AFTER_S - (ctx.now - since).total_seconds()
    if left > 0:
        draft.requeue(left)
        return
    deadline = ctx.spec["runPolicy"].get("activeDeadlineSeconds")
    ends = (f"runPolicy.activeDeadlineSeconds ({deadline}s) ends it" if isinstance(deadline, int)
            else "nothing ends it: runPolicy.activeDeadlineSeconds is unset")
    message = str(c.get("message") or "").split(". If it exits 0", 1)[0]
    why = (f"{message}, {WAITS_AFTER_S}s ago, and the launcher still runs: Open MPI's mpirun ends within seconds "
           f"of a lost daemon, unless the worker left without a word (its network cut) and mpirun waits for it; "
           f"{ends}. Delete launcher pod {_meta(pod).get('name')} to retry now")
    status.set_condition(draft.status, WORKER_LOST, "True", R_LAUNCHER_WAITS, why, ctx.now)
    draft.event("Warning", R_LAUNCHER_WAITS, f"MPIJob {ctx.key}: {why}.")


def _write_record(ctx: JobContext, draft: Draft, pod_name: str, lost: list[str]) -> None:
    workers = ", ".join(lost)
    status.set_condition(draft.status, WORKER_LOST, "True", R_WORKER_LOST, (
        f"launcher pod {pod_name}: worker {workers} was lost while it ran. If it exits 0, its log decides: "
        "Succeeded unless it shows a lost daemon or rank (Open MPI 5's mpirun exits 0 after such a loss); "
        f"annotation {evidence.WORKER_LOSS_ANNOTATION}: ExitCode trusts the exit code alone. A retried "
        "launcher clears this condition"), ctx.now)
    _before_the_true_ones(draft.status)


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


# The Warning Event of a success whose launcher log could not be read (rule 4 above).
R_LOG_UNREADABLE = "LauncherLogUnreadable"


@dataclass(frozen=True)
class Judgement:
    """The verdict on a launcher pod's exit 0: `wait` for its log (`read`), or `cut_short` (what shows
    it) or neither (Succeeded; `note` says what was weighed, for the message, and `warn` is a Warning
    Event's message when the success rests on the exit code alone)."""

    wait: bool = False
    read: LogRead | None = None
    cut_short: str | None = None
    note: str = ""
    warn: str = ""


def _newest(pods: list[Obj]) -> Obj | None:
    return max(pods, key=lambda p: _meta(p).get("creationTimestamp") or "") if pods else None


def judge(ctx: JobContext, draft: Draft) -> Judgement:
    """The verdict on the launcher Job's success (rule 4 above): every exit 0 waits for its launcher
    pod's report, whether or not a loss was seen (a worker's node lost, a container restarted in
    place, a delete a standby never saw: none shows in the pods the operator saw)."""
    if not applies(ctx):
        return Judgement()
    pod = _newest([p for p in ctx.pods.launchers if _phase(p) == "Succeeded"])
    name = recorded_attempt(draft.status)
    if pod is None:
        if any(_phase(p) not in ("Succeeded", "Failed") for p in ctx.pods.launchers):
            return Judgement(wait=True)  # the Job counted its success before the pod cache shows it
        if name is not None:
            return Judgement(cut_short=f"a worker was lost while launcher pod {name} ran, and that pod is gone "
                                       "(its log cannot be read)")
        return _unread_success("its pod is gone")
    lost_pods = _lost_during(ctx, pod)
    lost = sorted({desired.pod_hostname(p) for p in lost_pods})
    recorded = name == _meta(pod).get("name")
    seen = bool(lost) or recorded
    uid = _meta(pod).get("uid") or ""
    report: LauncherReport | None = ctx.inputs.reports.get(uid)
    if report is None:  # read from just before the loss (the whole log without one): evidence.py read_since
        record = status.get_condition(draft.status, WORKER_LOST) if recorded else None
        since = evidence.read_since([*map(_lost_at, lost_pods), status.parse_time((record or {}).get(
            "lastTransitionTime"))]) if seen else None
        return Judgement(wait=True, read=LogRead(ctx.namespace, _meta(pod).get("name", ""), uid, _container(ctx),
                                                 since))
    what = _what_was_lost(draft.status, lost) if seen else "no worker pod was seen to end"
    if report.cut_short is not None:
        return Judgement(cut_short=f"{what} while it ran, and its log shows it cut ranks short: "
                                   f"\"{report.cut_short}\"")
    if report.unreadable is not None:
        if seen:
            return Judgement(cut_short=f"{what} while it ran, and its log could not be read ({report.unreadable})")
        return _unread_success(report.unreadable)
    if seen:
        return Judgement(note=f" ({what} while the launcher ran; its log shows no lost daemon or rank)")
    return Judgement()


def _unread_success(why: str) -> Judgement:
    """An exit 0 with no loss seen whose log cannot be read: a success on its exit code, said so (a
    healthy run is not failed because its log was rotated away or its node is gone)."""
    note = (f" (no worker loss was seen, but the launcher's log could not be read ({why}): the verdict rests on "
            "its exit code alone)")
    return Judgement(note=note, warn="the launcher exited 0 and no worker loss was seen, but its log could not be "
                                     f"read ({why}), so whether every rank finished is not known")


def _what_was_lost(st: Obj, lost: list[str]) -> str:
    if lost:
        return f"worker {', '.join(lost)} was lost"
    c = status.get_condition(st, WORKER_LOST) or {}
    m = re.search(r"worker (.+?) was lost", str(c.get("message") or ""))
    return f"worker {m.group(1)} was lost" if m else "a worker was lost"


def _container(ctx: JobContext) -> str:
    """The launcher's container that runs mpirun: the first of its template (desired.py builds the
    launcher from the same template)."""
    containers = (((ctx.spec["mpiReplicaSpecs"].get("Launcher") or {}).get("template") or {}).get("spec")
                  or {}).get("containers") or [{}]
    return str((containers[0] or {}).get("name") or "")
