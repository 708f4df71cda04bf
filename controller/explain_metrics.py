"""The metrics of issue 51 (docs/operations.md, "Metrics"), counted from the Events a plan sent:
failures by cause, waits by reason, and the time to Running, first and after a restart."""

from __future__ import annotations

from datetime import datetime

from controller import metrics
from reconcilers import status
from reconcilers.explain import causes, pods, waiting
from reconcilers.types import Event, Obj

WAIT_REASONS = frozenset((pods.R_UNSCHEDULABLE, pods.R_IMAGE, pods.R_CONFIG, pods.R_CRASH_LOOP, pods.R_NOT_STARTED,
                          pods.R_NOT_READY, waiting.R_WAITING_FOR_WORKERS))


def record(mpijob: Obj, events: list[Event], now: datetime) -> None:
    """`events`: those a plan for `mpijob` (as it was before the plan) sent."""
    old = mpijob.get("status") or {}
    for ev in events:
        if ev.type == "Warning" and ev.reason in (status.R_RESTARTING, status.R_FAILED):
            metrics.failures.labels(causes.classify(ev.message)).inc()
        elif ev.type == "Warning" and ev.reason in WAIT_REASONS:
            metrics.waits.labels(ev.reason).inc()
        elif ev.reason == status.R_RUNNING:
            _running(mpijob, old, now)


def _running(mpijob: Obj, old: Obj, now: datetime) -> None:
    restarting = status.get_condition(old, status.RESTARTING)
    if restarting is not None and restarting.get("status") == "True":
        since = status.parse_time(restarting.get("lastTransitionTime"))
        if since is not None:
            metrics.restart_to_running.observe(max((now - since).total_seconds(), 0.0))
    elif status.get_condition(old, status.RUNNING) is None:  # never ran (a resume is no creation)
        created = status.parse_time((mpijob.get("metadata") or {}).get("creationTimestamp"))
        if created is not None:
            metrics.creation_to_running.observe(max((now - created).total_seconds(), 0.0))
