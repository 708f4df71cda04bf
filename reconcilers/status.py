"""MPIJob status: conditions, replicaStatuses, startTime, completionTime.

Conditions follow the Kubeflow MPI Operator's `setCondition` rules:
- setting a condition with the same status, reason and message is a no-op (no timestamp churn);
- a changed reason or message keeps `lastTransitionTime` (the status did not change);
- Running and Restarting exclude each other (setting one True removes the other);
- Succeeded or Failed True turn an existing Running condition False and remove Restarting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reconcilers.clone import clone
from reconcilers.types import Obj

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUSPENDED = "Suspended"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
CONDITION_TYPES = (CREATED, RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)

# reasons
R_CREATED = "MPIJobCreated"
R_RUNNING = "MPIJobRunning"
R_RESTARTING = "MPIJobRestarting"
R_SUSPENDED = "MPIJobSuspended"
R_RESUMED = "MPIJobResumed"
R_SUCCEEDED = "MPIJobSucceeded"
R_FAILED = "MPIJobFailed"
R_INVALID = "InvalidSpec"
R_RESOURCE_EXISTS = "ResourceExists"
R_DEADLINE = "DeadlineExceeded"
# Failed reason: the launcher exited 0 although a worker was lost during its run (Open MPI 5's
# mpirun does; docs/architecture.md section 9).
R_WORKER_LOST = "WorkerLostDuringRun"
# Why Restarting is set when a worker pod ended, or is not Ready, while the MPIJob runs.
WORKER_LOST_WHY = "a worker failed or was lost"


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: Any) -> datetime | None:
    if not isinstance(s, str) or not s:
        return None
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def later(t: datetime, seconds: float) -> datetime | None:
    """`t` plus `seconds`, or None when that lies beyond what a datetime holds (after year 9999): a
    moment that never comes. The CRD admits any int64 for activeDeadlineSeconds, and anyone with
    status access may write a startTime in year 9999; neither may crash a reconcile (issue 36)."""
    try:
        return t + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        return None


def conditions_of(status: Any) -> list[Obj]:
    conds = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


def get_condition(status: Any, ctype: str) -> Obj | None:
    return next((c for c in conditions_of(status) if c.get("type") == ctype), None)


def is_true(status: Any, ctype: str) -> bool:
    c = get_condition(status, ctype)
    return c is not None and c.get("status") == "True"


def is_finished(status: Any) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def set_condition(status: Obj, ctype: str, cstatus: str, reason: str, message: str, now: datetime) -> bool:
    """Sets a condition in `status` (mutated); returns True if its status changed (a transition)."""
    conds = conditions_of(status)
    ts = fmt_time(now)
    old = next((c for c in conds if c.get("type") == ctype), None)
    transition = old is None or old.get("status") != cstatus
    if old is not None and not transition and old.get("reason") == reason and old.get("message") == message:
        return False
    new = {"type": ctype, "status": cstatus, "reason": reason, "message": message,
           "lastUpdateTime": ts,
           "lastTransitionTime": ts if transition else old.get("lastTransitionTime", ts)}
    # The latest condition to become True is last (the CRD's State column shows the last one); one
    # that became False goes first; one whose status is unchanged keeps its place.
    if old is not None and not transition:
        conds[conds.index(old)] = new
    else:
        if old is not None:
            conds.remove(old)
        if cstatus == "True":
            conds.append(new)
        else:
            conds.insert(0, new)
    if cstatus == "True":
        if ctype == RUNNING:
            conds = [c for c in conds if c.get("type") != RESTARTING]
        elif ctype == RESTARTING:
            conds = [c for c in conds if c.get("type") != RUNNING]
        elif ctype in (SUCCEEDED, FAILED):
            conds = [c for c in conds if c.get("type") != RESTARTING]
            running = next((c for c in conds if c.get("type") == RUNNING and c.get("status") == "True"), None)
            if running is not None:
                conds.remove(running)
                conds.insert(0, {**running, "status": "False", "lastUpdateTime": ts, "lastTransitionTime": ts})
    status["conditions"] = conds
    return transition


def remove_condition(status: Obj, ctype: str) -> None:
    status["conditions"] = [c for c in conditions_of(status) if c.get("type") != ctype]


def before_the_true_ones(status: Obj, ctype: str, of: tuple[str, ...] | None = None) -> None:
    """Moves the condition `ctype` before the True conditions (those of the types `of`, all when None),
    where the condition-order policy puts it (docs/architecture.md section 6.5): the last condition
    stays the MPIJob's state (the State column), with or without the policy."""
    conds = conditions_of(status)
    mine = [c for c in conds if c.get("type") == ctype]
    rest = [c for c in conds if c.get("type") != ctype]
    at = next((i for i, c in enumerate(rest) if c.get("status") == "True" and (of is None or c.get("type") in of)),
              len(rest))
    status["conditions"] = rest[:at] + mine + rest[at:]


def copy_status(mpijob: Obj) -> Obj:
    status = mpijob.get("status")
    return clone(status) if isinstance(status, dict) else {}


# -- children -------------------------------------------------------------------------------------


def job_condition(job: Obj | None, ctype: str) -> Obj | None:
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if isinstance(c, dict) and c.get("type") == ctype
                 and c.get("status") == "True"), None)


def job_outcome(job: Obj | None) -> tuple[str, str, str, str | None] | None:
    """(SUCCEEDED|FAILED, reason, message, time) of a finished batch Job, or None while it runs."""
    if job is None:
        return None
    st = job.get("status") or {}
    c = job_condition(job, "Complete")
    if c is not None:
        return SUCCEEDED, R_SUCCEEDED, "", st.get("completionTime") or c.get("lastTransitionTime")
    c = job_condition(job, "Failed")
    if c is not None:
        return FAILED, c.get("reason") or R_FAILED, c.get("message") or "", c.get("lastTransitionTime")
    return None


def _phase_counts(pods: list[Obj]) -> dict[str, int]:
    out = {"active": 0, "succeeded": 0, "failed": 0}
    for p in pods:
        phase = (p.get("status") or {}).get("phase")
        if phase == "Running" and not (p.get("metadata") or {}).get("deletionTimestamp"):
            out["active"] += 1
        elif phase == "Succeeded":
            out["succeeded"] += 1
        elif phase == "Failed":
            out["failed"] += 1
    return out


def replica_statuses(launcher: Obj | None, workers: Obj | None, launcher_pods: list[Obj],
                     worker_pods: list[Obj]) -> Obj:
    lst = (launcher or {}).get("status") or {}
    lau = {"active": _phase_counts(launcher_pods)["active"] if launcher_pods else int(lst.get("ready") or 0),
           "succeeded": int(lst.get("succeeded") or 0), "failed": int(lst.get("failed") or 0)}
    if worker_pods:
        wrk = _phase_counts(worker_pods)
    else:
        wst = (workers or {}).get("status") or {}
        active = wst.get("readyReplicas") if (workers or {}).get("kind") == "StatefulSet" else wst.get("ready")
        wrk = {"active": int(active or 0), "succeeded": 0, "failed": 0}
    return {"Launcher": lau, "Worker": wrk}


def not_running_since(status: Any, suspended: bool) -> datetime | None:
    """For an active MPIJob that is not Running: since when (the last transition of its conditions,
    i.e. when it was created or last stopped running). None when it runs, ended or is suspended."""
    if suspended or is_finished(status) or is_true(status, RUNNING):
        return None
    times = [t for t in (parse_time(c.get("lastTransitionTime")) for c in conditions_of(status)) if t]
    return max(times) if times else None
