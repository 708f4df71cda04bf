"""Gang scheduling (`--gang-scheduling`): the PodGroup of an MPIJob and the pod template marks.

An MPI run needs all its pods at once. With `Config.gang_scheduler` set, each MPIJob gets a PodGroup
named after it, controlled by it, and every pod template names that scheduler and the group:

| `gang_scheduler` | PodGroup apiVersion | pod template |
|---|---|---|
| `volcano` | `scheduling.volcano.sh/v1beta1` | annotation `scheduling.k8s.io/group-name` |
| any other name | `scheduling.x-k8s.io/v1alpha1` (scheduler-plugins) | label `scheduling.x-k8s.io/pod-group` |

The spec follows the Kubeflow MPI Operator's (docs/operations.md, "Gang scheduling: the PodGroup"):
- `minMember`: `runPolicy.schedulingPolicy.minAvailable`, else workers + 1 (the launcher); with
  `launcherCreationPolicy: WaitForWorkersReady` the workers alone (see `_launcher_in_gang`);
- `minResources`: `schedulingPolicy.minResources`, else the requests (a limit where a container sets
  no request) summed over the launcher and `minMember - 1` workers, the pods that must start together;
- scheduler-plugins: `scheduleTimeoutSeconds` (`schedulingPolicy.scheduleTimeoutSeconds`, else 0);
- Volcano: `queue` (`schedulingPolicy.queue`, else the MPIJob's `scheduling.volcano.sh/queue-name`
  annotation) and `priorityClassName` (`schedulingPolicy.priorityClass`, else the launcher's, else
  the workers' `priorityClassName`).
Unlike upstream, minResources does not weigh PriorityClass values (that would need an informer on
PriorityClasses): when minMember is below launcher + workers it is the workers that are cut.

Lifecycle: created before the workers while the MPIJob runs; deleted when it is suspended (a resume
creates it afresh) and when it finishes, as upstream does, but only once no pod of the gang holds a
node, and a scheduler-plugins PodGroup marked released (RELEASED_ANNOTATION) in the same plan, just
before (reconcilers/gang/lifecycle.py); the garbage collector removes it with the MPIJob. Nothing here does I/O.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Any

from reconcilers import apilimits, names
from reconcilers.defaults import LAUNCHER, WORKER
from reconcilers.diff import merge_patch, ref_of
from reconcilers.types import Config, Obj, Patch

VOLCANO = "volcano"
# The --gang-scheduling value of Kubernetes' own Workload API (reconcilers/gang/workload_gang.py), not a
# scheduler-plugins schedulerName.
WORKLOAD = "workload"
KIND = "PodGroup"
SCHEDULER_PLUGINS_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# Set on a scheduler-plugins PodGroup (the time) just before it is deleted, its gang's pods off
# their nodes: the update that wakes the gangs waiting for their room (reconcilers/gang/lifecycle.py).
RELEASED_ANNOTATION = "mpijob-operator.dev/released"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"

# The MPIJob condition (True, so the State column of `kubectl get mpijob` shows it) while the gang
# waits, and the reasons of its Events.
WAITING_CONDITION = "WaitingForGang"
R_WAITING = "WaitingForGang"
R_GANG_SCHEDULED = "GangScheduled"
# PodGroup phases in which its pods wait to be placed together (both APIs' names).
# scheduler-plugins: Pending (not all placed), Scheduling (placed, not yet running); Volcano: Pending,
# Inqueue (admitted to its queue, not yet placed).
WAITING_PHASES = ("Pending", "Scheduling", "Inqueue")


def enabled(config: Config) -> bool:
    """A PodGroup of scheduler-plugins or Volcano (the Workload API's are workload_gang.py's)."""
    return bool(config.gang_scheduler) and config.gang_scheduler != WORKLOAD


def api_version(config: Config) -> str:
    return VOLCANO_API if config.gang_scheduler == VOLCANO else SCHEDULER_PLUGINS_API


def _policy(mpijob: Obj) -> Obj:
    rp = (mpijob.get("spec") or {}).get("runPolicy") or {}
    sp = rp.get("schedulingPolicy")
    return sp if isinstance(sp, dict) else {}


def _replica(mpijob: Obj, rtype: str) -> Obj:
    rs = ((mpijob.get("spec") or {}).get("mpiReplicaSpecs") or {}).get(rtype)
    return rs if isinstance(rs, dict) else {}


def _pod_spec(mpijob: Obj, rtype: str) -> Obj:
    return (_replica(mpijob, rtype).get("template") or {}).get("spec") or {}


def _replicas(mpijob: Obj, rtype: str, default: int) -> int:
    value = _replica(mpijob, rtype).get("replicas")
    return default if value is None else int(value)


def _launcher_in_gang(mpijob: Obj) -> bool:
    """With WaitForWorkersReady the launcher is created only once the workers run: counting it in
    the gang would hold the workers back for a pod that never comes (a deadlock by construction)."""
    return (mpijob.get("spec") or {}).get("launcherCreationPolicy") != "WaitForWorkersReady"


def min_member(mpijob: Obj) -> int:
    value = _policy(mpijob).get("minAvailable")
    if value is not None:
        return int(value)
    return _replicas(mpijob, WORKER, 0) + int(_launcher_in_gang(mpijob))


# -- quantities -----------------------------------------------------------------------------------

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("500m", "2Gi", "1e3", 4) as a number; ValueError if malformed or
    beyond what Kubernetes represents. Bounded work whatever the text (apilimits.quantity_value)."""
    return apilimits.quantity_value(value)


def format_quantity(q: Decimal) -> str:
    """A stable text for a sum: whole numbers plain or in the largest exact binary unit (memory),
    fractions in milli-units rounded up (as the API server rounds CPU)."""
    if q == q.to_integral_value():
        whole = int(q)
        for suffix, size in _BINARY:
            if whole and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    return f"{int((q * 1000).to_integral_value(rounding=ROUND_CEILING))}m"


def _container_resources(pod_spec: Obj) -> dict[str, Decimal]:
    """Requests of the pod's containers, a limit standing in for a missing request (as upstream)."""
    total: dict[str, Decimal] = {}
    for c in pod_spec.get("containers") or []:
        res = (c or {}).get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, value in merged.items():
            try:
                q = parse_quantity(value)
            except ValueError:
                continue  # the API server refuses the pod with this field named; no crash loop here
            total[name] = total.get(name, Decimal(0)) + q
    return total


def min_resources(mpijob: Obj, members: int) -> Obj | None:
    """schedulingPolicy.minResources, or the resources of the launcher and `members - 1` workers."""
    given = _policy(mpijob).get("minResources")
    if given is not None:
        return dict(given)
    if members == 0:
        return None
    launchers = _replicas(mpijob, LAUNCHER, 1) if _launcher_in_gang(mpijob) else 0
    workers = _replicas(mpijob, WORKER, 0)
    if launchers + workers > members:
        workers = max(members - launchers, 0)
    total: dict[str, Decimal] = {}
    for rtype, count in ((LAUNCHER, launchers), (WORKER, workers)):
        for name, q in _container_resources(_pod_spec(mpijob, rtype)).items():
            total[name] = total.get(name, Decimal(0)) + q * count
    return {name: format_quantity(q) for name, q in sorted(total.items())}


def priority_class(mpijob: Obj) -> str:
    return (_policy(mpijob).get("priorityClass") or _pod_spec(mpijob, LAUNCHER).get("priorityClassName")
            or _pod_spec(mpijob, WORKER).get("priorityClassName") or "")


def queue(mpijob: Obj) -> str:
    annotations = (mpijob.get("metadata") or {}).get("annotations") or {}
    return _policy(mpijob).get("queue") or annotations.get(VOLCANO_QUEUE_ANNOTATION) or ""


# -- the PodGroup ---------------------------------------------------------------------------------


def pod_group_spec(mpijob: Obj, config: Config) -> Obj:
    members = min_member(mpijob)
    spec: Obj = {"minMember": members}
    resources = min_resources(mpijob, members)
    if resources is not None:
        spec["minResources"] = resources
    if config.gang_scheduler == VOLCANO:
        for key, value in (("queue", queue(mpijob)), ("priorityClassName", priority_class(mpijob))):
            if value:
                spec[key] = value
    else:
        spec["scheduleTimeoutSeconds"] = int(_policy(mpijob).get("scheduleTimeoutSeconds") or 0)
    return spec


def pod_group(mpijob: Obj, config: Config, owner_reference: Obj) -> Obj:
    return {
        "apiVersion": api_version(config),
        "kind": KIND,
        "metadata": {
            "name": names.job_name(mpijob),
            "namespace": names.job_namespace(mpijob),
            "labels": names.job_labels(mpijob, None),
            "ownerReferences": [owner_reference],
        },
        "spec": pod_group_spec(mpijob, config),
    }


def diff_pod_group(desired: Obj, observed: Obj) -> Patch | None:
    """A merge patch of the owned fields: our labels and each spec field the operator sets. Fields it
    leaves out (an empty queue) are not looked at, so a scheduler's or webhook's default is kept."""
    patch: Obj = {}
    why: list[str] = []
    want_labels = desired["metadata"]["labels"]
    have_labels = (observed.get("metadata") or {}).get("labels") or {}
    labels = {k: v for k, v in want_labels.items() if have_labels.get(k) != v}
    if labels:
        patch["metadata"] = {"labels": labels}
        why.append("metadata.labels")
    have_spec = observed.get("spec") or {}
    spec: Obj = {}
    for key, want in desired["spec"].items():
        have = have_spec.get(key)
        if _normal(want) != _normal(have):
            spec[key] = merge_patch(have, want) if isinstance(want, dict) else want
            why.append(f"spec.{key}")
    if spec:
        patch["spec"] = spec
    return Patch(ref_of(observed), patch, "drift: " + ", ".join(why)) if patch else None


def _normal(value: Any) -> Any:
    """Quantities compare by value ("1000m" == "1" == 1), the way the scheduler reads them."""
    if isinstance(value, dict):
        try:
            return {k: parse_quantity(v) for k, v in value.items()}
        except ValueError:
            return value
    return value


# -- pod templates --------------------------------------------------------------------------------


def decorate_template(template: Obj, mpijob: Obj, config: Config) -> None:
    """Names the gang's scheduler and group on a pod template (mutated), replacing a schedulerName the
    user set, as upstream does: pods of one gang must all go to the scheduler that holds the gang."""
    if not enabled(config):
        return
    template["spec"]["schedulerName"] = config.gang_scheduler
    meta = template["metadata"]
    if config.gang_scheduler == VOLCANO:
        meta["annotations"] = {**(meta.get("annotations") or {}), VOLCANO_GROUP_ANNOTATION: names.job_name(mpijob)}
    else:
        meta["labels"] = {**(meta.get("labels") or {}), POD_GROUP_LABEL: names.job_name(mpijob)}


# -- the wait, as users see it --------------------------------------------------------------------


def phase(pod_group_obj: Obj | None) -> str:
    return str(((pod_group_obj or {}).get("status") or {}).get("phase") or "")


# What marks the scheduler's own words in the message (lifecycle.gang_wait writes them once they come).
QUOTE = "; the scheduler: "


def waiting_message(pod_group_obj: Obj | None, key: str, said: str = "") -> str | None:
    """Why the MPIJob's pods are not starting, while its PodGroup waits for room for the whole gang;
    `said`: the scheduler's words (scheduler_said), quoted when there are any."""
    ph = phase(pod_group_obj)
    if ph not in WAITING_PHASES:
        return None
    spec = (pod_group_obj or {}).get("spec") or {}
    # No pod counts in the text: each would be a status write while the gang is being placed.
    res = spec.get("minResources")
    needs = f"minMember {spec.get('minMember')}" + (
        f", minResources {', '.join(f'{k}={v}' for k, v in sorted(res.items()))}" if res else "")
    quote = f"{QUOTE}{said}" if said else ""
    return (f"MPIJob {key} waits for its gang: PodGroup {key} is {ph} ({needs}){quote}; no pod "
            "starts until the cluster has room for all of them at once.")


def scheduler_said(pod_group_obj: Obj | None, pods: list[Obj]) -> str:
    """Why the gang's scheduler cannot place it, in its words: Volcano's PodGroup condition
    Unschedulable=True; Coscheduling writes no condition on its PodGroup, only on the pods it turns
    away (PodScheduled=False, Unschedulable), the first of them by name quoted. "" until it says."""
    for c in ((pod_group_obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Unschedulable" and c.get("status") == "True":
            return f"{c.get('reason') or 'Unschedulable'}: {c.get('message') or 'no reason given'}"
    for p in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                return f"pod {(p.get('metadata') or {}).get('name')}: {c.get('message') or 'Unschedulable'}"
    return ""
