"""A deleted predecessor's pod that never goes away (pure; docs/architecture.md section 3.2).

An MPIJob created under the name of a deleted one waits for its predecessor's pods to be gone before
it creates its own (a new pod would share their hostnames). A pod whose node is down stays
Terminating for ever: its kubelet never confirms the delete. Past STUCK_SECONDS after the pod's
`deletionTimestamp` (which already includes its grace period) the MPIJob says so, with the condition
PREDECESSOR_CONDITION=True and one Warning Event naming the pod; both go once the pod is gone.
"""

from __future__ import annotations

from datetime import datetime

from reconcilers import status
from reconcilers.types import Event, Obj

# The kubelet confirms a delete within seconds of the grace period's end; two minutes later it will not.
STUCK_SECONDS = 120.0
PREDECESSOR_CONDITION = "WaitingForPredecessor"
R_STUCK = "PredecessorPodStuck"


def stuck_pod(stale_pods: list[Obj], now: datetime, bound_s: float | None = None) -> tuple[str, str] | None:
    """(name, deletionTimestamp) of the first predecessor's pod terminating for more than `bound_s`
    (default STUCK_SECONDS) past its deletionTimestamp, by name; None if there is none."""
    bound_s = STUCK_SECONDS if bound_s is None else bound_s
    stuck = []
    for pod in stale_pods:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        since = status.parse_time(meta.get("deletionTimestamp")) if isinstance(meta, dict) else None
        if since is not None and (now - since).total_seconds() > bound_s:
            stuck.append((str(meta.get("name") or "?"), meta["deletionTimestamp"]))
    return min(stuck) if stuck else None


def report_stuck(job_status: Obj, stale_pods: list[Obj], namespace: str, now: datetime,
                 bound_s: float | None = None) -> list[Event]:
    """Sets or clears PREDECESSOR_CONDITION in `job_status`; the Warning Event of a new or changed one."""
    found = stuck_pod(stale_pods, now, bound_s)
    before = status.get_condition(job_status, PREDECESSOR_CONDITION)
    if found is None:
        if before is not None:
            status.remove_condition(job_status, PREDECESSOR_CONDITION)
        return []
    name, since = found
    message = (f"waiting for pod {namespace}/{name} of a deleted MPIJob of the same name: it has been "
               f"terminating since {since} (its node may be down); this MPIJob starts once it is gone. If its "
               f"node is lost for good, remove it: kubectl -n {namespace} delete pod {name} --force --grace-period=0")
    status.set_condition(job_status, PREDECESSOR_CONDITION, "True", R_STUCK, message, now)
    if before is None or before.get("message") != message:  # one Event per pod, not per reconcile
        return [Event("Warning", R_STUCK, message)]
    return []
