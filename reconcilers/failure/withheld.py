"""Launcher runs that began while an earlier set of workers was still leaving: not counted
(docs/architecture.md section 11, "Old workers that do not leave"). Pure.

On the Job backend a lost worker makes the worker Job afresh, and while a pod of the earlier Job has
not ended its name would still resolve (a terminating pod keeps its record), so the Service selects
the launcher alone and the new workers' names are withheld (leaving.workers_leaving). A launcher
restarted in place meanwhile (the kubelet runs it again at once) cannot find its workers: its failure
is the old pod's, not the program's. When that pod never ends (a finalizer nobody removes, a node that
went away) the kubelet's restarts would spend every retry of `runPolicy.backoffLimit` while nothing
can succeed. So a run of the launcher container restarted in place that began after an earlier
worker pod's delete was asked for, and failed while that pod is still there, is not counted; the
condition WaitingForPredecessor names the pod and what holds it (reconcilers/predecessor.py). A
launcher pod that fails meanwhile makes its Job afresh, held until the pod is gone (retries.remade,
children.launcher_waits). Its start is the kubelet's `startedAt`, the delete the API server's: the
one order of the two known (runs.run_started).
"""

from __future__ import annotations

from datetime import datetime

from reconcilers import names, ownership, status
from reconcilers.context import JobContext
from reconcilers.failure.runs import delete_asked_at
from reconcilers.types import Obj

_WHY_MAX = 200


def leaving(ctx: JobContext) -> list[Obj]:
    """Worker pods of an earlier worker Job (or a deleted predecessor's) that have not ended, by name."""
    out = [p for p in ctx.pods.stale if (p.get("metadata") or {}).get("labels", {}).get(names.JOB_ROLE_LABEL)
           == names.ROLE_WORKER and not ownership.ended(p)]
    return sorted(out, key=lambda p: (p.get("metadata") or {}).get("name") or "")


def _run_start(cs: Obj, k: int) -> datetime | None:
    """When run `k` (from 0) of the container began, where the kubelet still says: the run that ended
    now (terminated, or waiting out its back-off with its end in lastState) or the one before it."""
    runs = cs.get("restartCount") if isinstance(cs.get("restartCount"), int) else 0
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated") or {}
    now = state.get("terminated") or (last if "waiting" in state else {})
    end = now if k == runs else last if k == runs - 1 and "waiting" not in state else {}
    return status.parse_time(end.get("startedAt"))


def excuse(ctx: JobContext, entries: dict[str, Obj], news: list[tuple[str, Obj]]) -> dict[str, Obj]:
    """`entries` (attempt -> why not counted) with each new in-place failure of `news` ((attempt, its
    container's status)) whose run began after an earlier worker pod still there was deleted."""
    going = leaving(ctx)
    if not going:
        return entries
    out = dict(entries)
    for attempt, cs in news:
        k = int(attempt.rsplit("#", 1)[1]) if "#" in attempt else 0
        started = _run_start(cs, k) if k > 0 else None
        if started is None or attempt in out:
            continue
        old = next((p for p in going if (asked := delete_asked_at(p)) is not None and asked <= started), None)
        if old is not None:
            name = (old.get("metadata") or {}).get("name")
            out[attempt] = {"worker": name, "uid": (old.get("metadata") or {}).get("uid"), "why": (
                f"it ran while worker pod {name} of an earlier worker Job was still terminating (the workers' "
                "names are withheld until it ends)")[:_WHY_MAX]}
    return out
