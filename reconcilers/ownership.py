"""Which observed objects are this MPIJob's (docs/architecture.md sections 6.1-6.2), as pure functions.

- `our_pods`: the pods of our launcher and worker objects by role, and the *stale* ones (pods under
  our names whose controller is not the object we observe: a deleted predecessor's, being removed).
- `stale_children`: children under our names controlled by a deleted MPIJob of our name (another
  uid), which the garbage collector is removing: waited for, never a clash.
- `clash`: an object under one of our names that this MPIJob does not control and that is not a
  predecessor's: the message that says so, or None. The NetworkPolicy is not among them: its name
  held by another object costs the MPIJob its isolation, never its run (`policy_taken`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reconcilers import desired, names
from reconcilers.gang import podgroup
from reconcilers.types import Obj, Observed


@dataclass(frozen=True)
class JobPods:
    """The observed pods of one MPIJob, sorted once per plan."""

    workers: tuple[Obj, ...] = ()
    launchers: tuple[Obj, ...] = ()
    stale: tuple[Obj, ...] = ()


def owned(obj: Obj | None, mpijob: Obj) -> bool:
    return obj is not None and names.is_controlled_by(obj, mpijob)


def deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def ended(pod: Obj) -> bool:
    """The pod's containers have ended for good (Succeeded or Failed): it runs no more."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _uid_if_owned(obj: Obj | None, mpijob: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("uid") if owned(obj, mpijob) else None  # type: ignore[union-attr]


def our_pods(mpijob: Obj, observed: Observed, workers: Obj | None) -> JobPods:
    """`workers`: the worker object of the MPIJob's backend (reconcilers/backend.py)."""
    # name -> (role, uid of the owner we observe and control, or None): looked up once, not per pod
    owners = {names.launcher_name(mpijob): (names.ROLE_LAUNCHER, _uid_if_owned(observed.launcher, mpijob)),
              names.worker_name(mpijob): (names.ROLE_WORKER, _uid_if_owned(workers, mpijob))}
    worker_pods: list[Obj] = []
    launcher_pods: list[Obj] = []
    stale: list[Obj] = []
    name = names.job_name(mpijob)
    for pod in observed.pods or []:
        if not isinstance(pod, dict):
            continue
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(names.JOB_NAME_LABEL) != name:
            continue
        refs = meta.get("ownerReferences") or []
        ref = next((r for r in refs if isinstance(r, dict) and r.get("controller")), {})
        role, owner_uid = owners.get(ref.get("name"), (None, None))
        if ref.get("name") not in owners and names.is_controlled_by(pod, mpijob):
            # a bare worker pod of the upstream operator (reconcilers/takeover.py): controlled by the MPIJob
            if labels.get(names.JOB_ROLE_LABEL) == names.ROLE_WORKER:
                worker_pods.append(pod)
            continue
        if role is None or labels.get(names.JOB_ROLE_LABEL) != role:
            continue
        if ref.get("uid") and ref.get("uid") != owner_uid:
            stale.append(pod)
            continue
        (worker_pods if role == names.ROLE_WORKER else launcher_pods).append(pod)
    return JobPods(tuple(worker_pods), tuple(launcher_pods), tuple(stale))


def stale_alive(pods: JobPods, role: str) -> bool:
    """A stale pod of `role` still runs (a predecessor's, or one of a worker Job made afresh): a new
    one would share its hostname."""
    return any(desired.pod_role(p) == role and not ended(p) for p in pods.stale)


def _children(observed: Observed) -> Iterable[Obj | None]:
    return (observed.service, observed.config_map, observed.secret, observed.launcher, observed.workers,
            observed.other_workers, observed.pod_group, observed.workload, observed.network_policy)


def stale_children(mpijob: Obj, observed: Observed) -> tuple[Obj, ...]:
    """Children under our names controlled by an MPIJob of our name with another uid: a deleted
    predecessor's, which the garbage collector removes (names are unique, so that one is gone)."""
    uid = (mpijob.get("metadata") or {}).get("uid")
    out = []
    for obj in _children(observed):
        ref = names.controller_ref(obj) if obj is not None else None
        if ref is not None and ref.get("name") == names.job_name(mpijob) and uid and ref.get("uid") \
                and ref["uid"] != uid:
            out.append(obj)
    return tuple(out)


def clash(mpijob: Obj, observed: Observed, workers: Obj | None, stale: tuple[Obj, ...], key: str) -> str | None:
    """The message for the first object under our names that is neither ours nor a predecessor's."""
    stale_ids = [id(o) for o in stale]
    namespace = names.job_namespace(mpijob)
    for obj, kind in ((observed.service, "Service"), (observed.config_map, "ConfigMap"),
                      (observed.secret, "Secret"), (observed.launcher, "Job"), (workers, None),
                      (observed.pod_group, podgroup.KIND), (observed.workload, "Workload")):
        if obj is not None and not owned(obj, mpijob) and id(obj) not in stale_ids:
            kind = kind or obj.get("kind", "object")
            name = (obj.get("metadata") or {}).get("name", "?")
            return (f"{kind} {namespace}/{name} already exists and is not controlled by MPIJob {key}; "
                    "delete or rename that object, or give the MPIJob another name")
    return None


def policy_taken(mpijob: Obj, observed: Observed, stale: tuple[Obj, ...]) -> bool:
    """The NetworkPolicy's name is held, as cached, by an object that is neither this MPIJob's nor a
    predecessor's (one without our labels is found by the create instead: Inputs.policy_taken)."""
    obj = observed.network_policy
    return obj is not None and not owned(obj, mpijob) and not any(obj is o for o in stale)


def managed_by_us(mpijob: Any, controller_name: str) -> bool:
    """`runPolicy.managedBy` unset, empty, not a string, or this controller's name: the MPIJob is ours."""
    spec = mpijob.get("spec") if isinstance(mpijob, dict) else None
    rp = spec.get("runPolicy") if isinstance(spec, dict) else None
    mb = rp.get("managedBy") if isinstance(rp, dict) else None
    return mb is None or mb == "" or mb == controller_name or not isinstance(mb, str)
