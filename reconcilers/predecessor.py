"""An earlier worker pod that never goes away (pure; docs/architecture.md sections 3.2 and 11).

Two kinds of pod under this MPIJob's names are waited for: a deleted predecessor's (an MPIJob created
under the name of a deleted one waits for its pods to be gone before it creates its own: a new pod
would share their hostnames), and a pod of this MPIJob's own earlier worker Job (made afresh after a
lost worker: until that pod ends, its name would still resolve, so the Service leaves the workers'
names out and the launcher waits; leaving.workers_leaving). They are told apart by their creation,
one clock: a pod created before this MPIJob is a predecessor's.

A pod whose node is down stays Terminating for ever: its kubelet never confirms the delete; so does
one whose finalizer nobody removes. Past STUCK_SECONDS after the pod's `deletionTimestamp` (which
already includes its grace period) the MPIJob says so, with the condition PREDECESSOR_CONDITION=True
and one Warning Event naming the pod and what holds it: its finalizers, its node and that node's
state as the pod shows it (the node lifecycle controller turns the pods of a node that stopped
reporting not Ready); both go once the pod is gone.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from reconcilers import status
from reconcilers.draft import Draft
from reconcilers.types import Event, Obj

# The kubelet confirms a delete within seconds of the grace period's end; two minutes later it will not.
STUCK_SECONDS = 120.0
PREDECESSOR_CONDITION = "WaitingForPredecessor"
R_STUCK = "PredecessorPodStuck"
R_OLD_WORKER_STUCK = "OldWorkerPodStuck"  # a pod of this MPIJob's own earlier worker Job


def _stuck(stale_pods: list[Obj], now: datetime, bound_s: float) -> list[Obj]:
    out = []
    for pod in stale_pods:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        since = status.parse_time(meta.get("deletionTimestamp")) if isinstance(meta, dict) else None
        if since is not None and (now - since).total_seconds() > bound_s:
            out.append(pod)
    return sorted(out, key=lambda p: str(p["metadata"].get("name") or "?"))


def stuck_pod(stale_pods: list[Obj], now: datetime, bound_s: float | None = None) -> tuple[str, str] | None:
    """(name, deletionTimestamp) of the first predecessor's pod terminating for more than `bound_s`
    (default STUCK_SECONDS) past its deletionTimestamp, by name; None if there is none."""
    found = _stuck(stale_pods, now, STUCK_SECONDS if bound_s is None else bound_s)
    return (str(found[0]["metadata"].get("name") or "?"), found[0]["metadata"]["deletionTimestamp"]) if found else None


def recheck_in(stale_pods: list[Obj], now: datetime, bound_s: float | None = None) -> float | None:
    """Seconds until the first terminating pod not reported yet would be stuck: nothing else may wake
    the MPIJob then (an earlier worker pod that waits for ever sends no event)."""
    bound_s = STUCK_SECONDS if bound_s is None else bound_s
    due = []
    for pod in stale_pods:
        since = status.parse_time(((pod.get("metadata") or {}) if isinstance(pod, dict) else {}).get(
            "deletionTimestamp"))
        if since is not None and (now - since).total_seconds() <= bound_s:
            due.append(bound_s - (now - since).total_seconds() + 0.5)
    return min(due) if due else None


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60)} s" if seconds >= 60 else f"{int(seconds)} s"


def holds(pod: Obj, now: datetime | None = None) -> str:
    """What keeps `pod` Terminating, as the pod shows it: its finalizers, its node and whether that node
    reports (the pod's Ready turned False by the node lifecycle controller, or a taint's eviction)."""
    meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    deleting = status.parse_time(meta.get("deletionTimestamp"))
    grace = meta.get("deletionGracePeriodSeconds") if isinstance(meta.get("deletionGracePeriodSeconds"), int) else 0
    parts = []
    if deleting is not None:  # (the condition says since when; the Event, written once, how long)
        asked = status.fmt_time(deleting - timedelta(seconds=grace))
        length = f" ({_minutes((now - deleting).total_seconds() + grace)})" if now is not None else ""
        parts.append(f"terminating since {asked}{length}, deletionTimestamp {meta.get('deletionTimestamp')}, "
                     f"phase {st.get('phase') or 'unknown'}")
    finalizers = [str(f) for f in meta.get("finalizers") or []]
    if finalizers:
        parts.append(f"held by finalizer(s) {', '.join(finalizers)}")
    node = spec.get("nodeName")
    ready = next((c for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
    taint = next((c for c in st.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "DisruptionTarget"
                  and c.get("reason") == "DeletionByTaintManager"), None)
    if not node:
        parts.append("on no node")
    elif taint is not None or (ready is not None and ready.get("status") != "True" and st.get("phase") == "Running"):
        since = (taint or ready or {}).get("lastTransitionTime")
        parts.append(f"on node {node}, which stopped reporting (NotReady or gone: the pod went not Ready at {since} "
                     "and its kubelet has not confirmed the delete)")
    else:
        parts.append(f"on node {node}, whose kubelet has not confirmed the delete")
    return "; ".join(parts)


def _fix(namespace: str, pod: Obj) -> str:
    name = pod["metadata"].get("name")
    fix = f"kubectl -n {namespace} delete pod {name} --force --grace-period=0"
    if pod["metadata"].get("finalizers"):
        fix = (f"kubectl -n {namespace} patch pod {name} --type=merge -p '{{\"metadata\":{{\"finalizers\":null}}}}' "
               "(once whoever set the finalizers is done), and if its node is lost for good, " + fix)
    return fix


def _message(namespace: str, pod: Obj, now: datetime | None, own: bool) -> str:
    name = pod["metadata"].get("name")
    if own:
        return (f"waiting for pod {namespace}/{name} of this MPIJob's earlier worker Job (made afresh after a worker "
                f"was lost): until it ends its name would still resolve, so the workers' names are withheld and the "
                f"launcher does not run (no retry is spent meanwhile). It is {holds(pod, now)}. If its node is lost "
                f"for good, remove it: {_fix(namespace, pod)}")
    return (f"waiting for pod {namespace}/{name} of a deleted MPIJob of the same name: it is {holds(pod, now)}; this "
            f"MPIJob starts once it is gone. If its node is lost for good, remove it: {_fix(namespace, pod)}")


def report(draft: Draft, stale_pods: list[Obj], namespace: str, now: datetime, job_created: datetime | None) -> None:
    """`report_stuck` into the draft, and a look again when the next terminating pod would be stuck."""
    draft.plan.events += report_stuck(draft.status, stale_pods, namespace, now, job_created=job_created)
    wait = recheck_in(stale_pods, now)
    if wait is not None:
        draft.requeue(wait)


def report_stuck(job_status: Obj, stale_pods: list[Obj], namespace: str, now: datetime,
                 bound_s: float | None = None, job_created: datetime | None = None) -> list[Event]:
    """Sets or clears PREDECESSOR_CONDITION in `job_status`; the Warning Event of a newly stuck pod.
    `job_created`: this MPIJob's creationTimestamp (a stale pod created since is its own worker's)."""
    found = _stuck(stale_pods, now, STUCK_SECONDS if bound_s is None else bound_s)
    before = status.get_condition(job_status, PREDECESSOR_CONDITION)
    if not found:
        if before is not None:
            status.remove_condition(job_status, PREDECESSOR_CONDITION)
        return []
    pod = found[0]
    born = status.parse_time(pod["metadata"].get("creationTimestamp"))
    own = job_created is not None and born is not None and born >= job_created
    reason = R_OLD_WORKER_STUCK if own else R_STUCK
    message = _message(namespace, pod, None, own)
    status.set_condition(job_status, PREDECESSOR_CONDITION, "True", reason, message, now)
    if before is None or before.get("message") != message:  # one Event per pod and state, not per reconcile
        return [Event("Warning", reason, _message(namespace, pod, now, own))]
    return []
