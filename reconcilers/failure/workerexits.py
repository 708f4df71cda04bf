"""Workers that exit by themselves, paced and bounded (docs/architecture.md section 4, "Workers that
exit by themselves"). Pure: nothing here does I/O or reads a clock.

On the Job backend an Indexed Job never runs an index again once its pod succeeded, so a worker
that ended is lost and the operator makes the worker Job afresh (children.sync_workers). A worker
whose command ends by itself (`sshd` without `-D`, a script that returns) ends again in the Job
made afresh: unbounded, the operator deleted and recreated the worker Job every second, forever
(4 writes a second). So, as the Job controller paces the pods of a failing Job (10 s, doubling, at
most 6 minutes: its backoff), the operator paces and counts these:

- **An exit by itself.** A worker pod of the current worker Job that Succeeded with no delete asked
  for and no `DisruptionTarget`, at an index below Worker replicas (one that failed is the Job
  controller's to replace, paced by its own backoff: the worker Job never fails). A deleted
  worker ends too (a stopped sshd exits 0), but its pod is being deleted; a disruption's loss is
  retried free (section 11). Those are made afresh at once, as before.
- **The record.** The condition `WorkerExited` (True), in the status: it outlives the worker Job it
  names, the informers' caches and an operator restart. Its message names the worker, its pod, its
  exit and the count; its `lastUpdateTime` is when that exit was counted (a condition has no other
  free field; each count changes the message, so `set_condition` stamps it then).
- **The pace.** The n-th exit makes the worker Job afresh `delay(n)` after it was counted: 10 s,
  doubling, at most 360 s.
- **The bound.** `runPolicy.backoffLimit` (6 by default, the Job API's): the retries a user gives
  the MPIJob, as the launcher's failures count against it (section 11), though counted apart (a
  worker that keeps exiting is the same mistake whatever the launcher does; with
  WaitForWorkersReady the launcher never even starts). The exit past it ends the MPIJob
  `Failed`/`WorkerBackoffLimitExceeded`, the message naming the worker, its pod and its exit, with a
  Warning Event. A suspend ends the count (the resume starts afresh).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from reconcilers import desired, ownership, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.types import Obj

WORKER_EXITED = "WorkerExited"  # condition type and reason, and the Warning Event's reason
R_LIMIT = "WorkerBackoffLimitExceeded"
BASE_S = 10.0  # the Job controller's first backoff
MAX_S = 360.0  # and its most, 6 minutes
_RECORD = re.compile(r"^worker \S+ \(pod (\S+)\) exited by itself .*?: exit (\d+) of ")


def delay(n: int) -> float:
    """Seconds from the n-th exit (n >= 1) to the worker Job made afresh: 10, 20, 40, ... at most 360."""
    return min(MAX_S, BASE_S * 2 ** min(max(n, 1) - 1, 16))


def _disrupted(pod: Obj) -> bool:
    return any(isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def exits(ctx: JobContext) -> list[Obj]:
    """The current worker Job's pods that exited by themselves, by hostname (module docstring)."""
    workers = ctx.workers
    if workers is None or workers.get("kind") != "Job" or not ctx.owned(workers):
        return []
    count = desired.worker_replicas(ctx.job)
    out = [p for p in ctx.pods.workers if (p.get("status") or {}).get("phase") == "Succeeded"
           and not ownership.deleting(p) and not _disrupted(p) and (desired.worker_index(ctx.job, p) or 0) < count]
    return sorted(out, key=lambda p: (desired.pod_hostname(p), (p.get("metadata") or {}).get("name") or ""))


def exit_text(pod: Obj) -> str:
    """`exit code 0, Completed` from the pod's first container, else its phase."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    term = ((statuses[0] or {}).get("state") or {}).get("terminated") or {}
    code, reason = term.get("exitCode"), term.get("reason")
    if not isinstance(code, int):
        return str((pod.get("status") or {}).get("phase") or "ended")
    return f"exit code {code}" + (f", {reason}" if reason else "")


def recorded(st: Obj) -> tuple[int, str, datetime | None]:
    """(exits counted, the pod of the last one, when it was counted) from the record; (0, "", None)."""
    c = status.get_condition(st, WORKER_EXITED)
    m = _RECORD.match(str(c.get("message") or "")) if c and c.get("status") == "True" else None
    if not m:
        return 0, "", None
    return int(m.group(2)), m.group(1), status.parse_time(c.get("lastUpdateTime") or c.get("lastTransitionTime"))


def _name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "?")


def _limit(ctx: JobContext) -> int:
    v = ctx.run_policy.get("backoffLimit")
    return v if isinstance(v, int) and v > 0 else 0


def pace(ctx: JobContext, draft: Draft) -> float | None:
    """Seconds to wait before the worker Job lost to an exit by itself is made afresh, or None to make
    it afresh now (no such exit: a delete, a disruption). A new exit is counted (the record and a
    Warning Event); one past the limit is the verdict's (`verdict`), never paced here."""
    found = exits(ctx)
    if not found:
        return None
    n, pod_name, when = recorded(draft.status)
    if pod_name not in {_name(p) for p in found}:
        n, when = n + 1, ctx.now
        if n > _limit(ctx):
            return None  # (the verdict ends the MPIJob in this very plan)
        pod = found[0]
        message = (f"worker {desired.pod_hostname(pod)} (pod {_name(pod)}) exited by itself ({exit_text(pod)}): "
                   f"exit {n} of at most {_limit(ctx)} (runPolicy.backoffLimit); the worker Job is made afresh "
                   f"{delay(n):.0f}s after it. A worker's command must keep running until the launcher ends "
                   "(sshd -D, not a script that returns)")
        status.set_condition(draft.status, WORKER_EXITED, "True", WORKER_EXITED, message, ctx.now)
        status.before_the_true_ones(draft.status, WORKER_EXITED)
        draft.event("Warning", WORKER_EXITED, f"MPIJob {ctx.key}: {message}.")
    left = ((when or ctx.now) + timedelta(seconds=delay(n)) - ctx.now).total_seconds()
    return left if left > 0 else None


def verdict(ctx: JobContext) -> tuple[str, str] | None:
    """(reason, message) of the MPIJob's failure when a worker exited by itself once more than
    runPolicy.backoffLimit allows, else None. From the status as observed and the pods: the count is
    the record's, the new exit the pods'."""
    if ctx.run_policy.get("suspend"):
        return None
    found = exits(ctx)
    n, pod_name, _ = recorded(ctx.job.get("status") or {})
    if not found or pod_name in {_name(p) for p in found} or n + 1 <= _limit(ctx):
        return None
    pod = found[0]
    return R_LIMIT, (f"MPIJob {ctx.key} has failed: worker {desired.pod_hostname(pod)} (pod {_name(pod)}) exited by "
                     f"itself ({exit_text(pod)}), {n + 1} time(s), more than runPolicy.backoffLimit "
                     f"({_limit(ctx)}) allows. A worker's command must keep running until the launcher ends "
                     "(sshd -D, not a script that returns)")


def drop(draft: Draft) -> None:
    """A suspend ends the count: the resume starts afresh."""
    status.remove_condition(draft.status, WORKER_EXITED)
