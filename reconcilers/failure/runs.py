"""When a launcher's run began and when a worker's delete was asked for: the times a worker loss is
judged by (reconcilers/failure/workerloss.py rules 1-2, docs/architecture.md section 9.1). Pure."""

from __future__ import annotations

from datetime import datetime, timedelta

from reconcilers import status
from reconcilers.context import JobContext
from reconcilers.types import Obj


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


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


def run_of(ctx: JobContext, pod: Obj) -> int:
    """Which run of the launcher container `pod` is on, from 1: its restarts in place plus one."""
    n = _launcher_status(ctx, pod).get("restartCount")
    return n + 1 if isinstance(n, int) and n > 0 else 1


def run_started(ctx: JobContext, pod: Obj) -> datetime | None:
    """When `pod`'s current run of the launcher container began, or None while it waits to run again.
    The first run: the pod's creation (the API server's clock, as the losses' deletes). A run restarted
    in place: the container's own `startedAt` (the kubelet's clock: no other time says when an in-place
    run began; a loss that ended the run before is otherwise recorded again for this one)."""
    if run_of(ctx, pod) == 1:
        return status.parse_time(_meta(pod).get("creationTimestamp"))
    state = _launcher_status(ctx, pod).get("state") or {}
    return status.parse_time((state.get("running") or state.get("terminated") or {}).get("startedAt"))


def _launcher_status(ctx: JobContext, pod: Obj) -> Obj:
    statuses = [cs for cs in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(cs, dict)]
    want = launcher_container(ctx)
    return next((cs for cs in statuses if cs.get("name") == want), statuses[0] if statuses else {})


def launcher_container(ctx: JobContext) -> str:
    """The launcher's container that runs mpirun: the first of its template (desired.py builds the
    launcher from the same template)."""
    containers = (((ctx.spec["mpiReplicaSpecs"].get("Launcher") or {}).get("template") or {}).get("spec")
                  or {}).get("containers") or [{}]
    return str((containers[0] or {}).get("name") or "")
