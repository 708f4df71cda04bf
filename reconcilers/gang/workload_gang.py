"""Gang scheduling through Kubernetes' own Workload API (`--gang-scheduling=workload`,
docs/architecture.md section 8): the Workload and PodGroup of an MPIJob and the pod template mark.

The API (`scheduling.k8s.io/v1beta1`, KEP-4671, beta in Kubernetes 1.37 behind the `GenericWorkload`
feature gate) needs no second scheduler: the default kube-scheduler binds the pods of a PodGroup whose
policy is `gang` all together or not at all. For an MPIJob `pi` the operator makes, both controlled by
the MPIJob:

- Workload `pi`: `spec.controllerRef` names the MPIJob; one pod group template, `mpijob`, with the
  policy `gang: {minCount}` (and the pods' `priorityClassName`, if any);
- PodGroup `pi`: the runtime instance of that template (`spec.workloadRef`), the same policy;

and every pod template (launcher and workers, both backends) carries
`spec.schedulingGroup.podGroupName: pi`. The user's `schedulerName` is kept: any kube-scheduler
profile with the gate on schedules gangs.

`minCount` is `runPolicy.schedulingPolicy.minAvailable`, else workers + 1 (the launcher), as for the
other gang modes (reconcilers/gang/podgroup.py); at least 1, the API's minimum. With
`launcherCreationPolicy: WaitForWorkersReady` the launcher is created only once every worker is Ready,
so the gang is the workers alone: the scheduler holds a gang's pods until `minCount` of them exist,
and counting a launcher that waits for the workers would hold both forever. The launcher still names
the PodGroup and is placed on its own when it comes (the quorum is already bound); a `minAvailable`
above what can start together is refused (`problems`).

Lifecycle, as the other gang modes: created before the workers while the MPIJob runs; deleted when it
is suspended (a resume creates them afresh) and when it finishes; the garbage collector removes them
with the MPIJob. The API server keeps a PodGroup (finalizer `PodGroupProtection`) until no active pod
names it, so a resume that comes before the old group is gone waits for it: new pods would join the
terminating group and keep it alive. Drift repair touches our labels and `minCount` only (the one
mutable field of the policy); the scheduler's status and the API server's defaults cause no write.

Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from reconcilers import names
from reconcilers.defaults import LAUNCHER, WORKER
from reconcilers.diff import ref_of
from reconcilers.gang import podgroup
from reconcilers.types import Config, Obj, Patch

MODE = podgroup.WORKLOAD  # the --gang-scheduling value
GROUP = "scheduling.k8s.io"
API = f"{GROUP}/v1beta1"
WORKLOAD_KIND = "Workload"
POD_GROUP_KIND = "PodGroup"
TEMPLATE = "mpijob"  # the Workload's one pod group template
# Set by the scheduler on the PodGroup: False (Unschedulable, SchedulerError) while the gang cannot be
# placed, True once it was (for good: it never goes back to False).
SCHEDULED_CONDITION = "PodGroupInitiallyScheduled"
# The MPIJob's condition while the cluster does not serve the API (reconcilers/gang/podgroup.py has the type).
R_UNAVAILABLE = "WorkloadAPIUnavailable"


def enabled(config: Config) -> bool:
    return config.gang_scheduler == MODE


def unavailable_message(missing: list[str]) -> str:
    """Why no MPIJob can start: what the operator found missing, and how to fix it."""
    return (f"the API server does not serve {API} {', '.join(missing)}, which --gang-scheduling={MODE} needs "
            "(the Workload API): turn on the GenericWorkload feature gate on the API server, controller manager "
            f"and scheduler, serve the API with --runtime-config={API}=true, then restart the operator; or run "
            f"the operator without --gang-scheduling={MODE}")


def launcher_in_gang(mpijob: Obj) -> bool:
    return (mpijob.get("spec") or {}).get("launcherCreationPolicy") != "WaitForWorkersReady"


def min_count(mpijob: Obj) -> int:
    return max(podgroup.min_member(mpijob), 1)


def _replica(mpijob: Obj, rtype: str) -> Obj:
    specs = (mpijob.get("spec") or {}).get("mpiReplicaSpecs")
    rs = specs.get(rtype) if isinstance(specs, dict) else None
    return rs if isinstance(rs, dict) else {}


def _pod_spec(mpijob: Obj, rtype: str) -> Obj:
    template = _replica(mpijob, rtype).get("template")
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def _workers(mpijob: Obj) -> int:
    rs = _replica(mpijob, WORKER)
    value = rs.get("replicas") if isinstance(rs, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def priority_class(mpijob: Obj) -> str:
    """The pods' priorityClassName (the launcher's and the workers' are the same, `problems`): the
    scheduler wants a gang's pods and its PodGroup at one priority."""
    return _pod_spec(mpijob, LAUNCHER).get("priorityClassName") or _pod_spec(mpijob, WORKER).get(
        "priorityClassName") or ""


def problems(mpijob: Obj, config: Config) -> list[tuple[str, str]]:
    """(field, message) of what makes this MPIJob no gang the scheduler can place (an MPIJob after
    defaulting); [] without this mode. The scheduler refuses a PodGroup whose pods differ in
    schedulerName or priority, and never starts a gang that waits for more pods than will exist."""
    if not enabled(config) or not isinstance(mpijob, dict):
        return []
    out = []
    specs = "spec.mpiReplicaSpecs"
    specs_obj = (mpijob.get("spec") or {}).get("mpiReplicaSpecs")
    if isinstance(specs_obj, dict) and isinstance(specs_obj.get(WORKER), dict):
        for key, what in (("schedulerName", "scheduler"), ("priorityClassName", "priority")):
            launcher, worker = _pod_spec(mpijob, LAUNCHER).get(key), _pod_spec(mpijob, WORKER).get(key)
            if (launcher or "") != (worker or ""):
                out.append((f"{specs}.{LAUNCHER}.template.spec.{key}",
                            f"is {launcher!r} but the workers' is {worker!r}: with --gang-scheduling={MODE} the "
                            f"launcher and the workers form one gang, which the scheduler places at one {what}; "
                            "set the same value on both templates"))
    rp = (mpijob.get("spec") or {}).get("runPolicy")
    sp = rp.get("schedulingPolicy") if isinstance(rp, dict) else None
    wanted = sp.get("minAvailable") if isinstance(sp, dict) else None
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        together = _workers(mpijob) + int(launcher_in_gang(mpijob))
        if wanted > together:
            why = (" (with launcherCreationPolicy WaitForWorkersReady the launcher is created once the workers "
                   "run, so it cannot be part of the gang)" if not launcher_in_gang(mpijob) else
                   " (the launcher and the workers)")
            out.append(("spec.runPolicy.schedulingPolicy.minAvailable",
                        f"is {wanted} but only {together} pod(s) of this MPIJob start together{why}: the gang "
                        f"would wait forever; set it to {together} or less, or leave it out"))
    return out


# -- the objects ----------------------------------------------------------------------------------


def _gang_policy(mpijob: Obj) -> Obj:
    return {"gang": {"minCount": min_count(mpijob)}}


def _metadata(mpijob: Obj, owner_reference: Obj) -> Obj:
    return {"name": names.job_name(mpijob), "namespace": names.job_namespace(mpijob),
            "labels": names.job_labels(mpijob, None), "ownerReferences": [owner_reference]}


def workload(mpijob: Obj, owner_reference: Obj) -> Obj:
    template: Obj = {"name": TEMPLATE, "schedulingPolicy": _gang_policy(mpijob)}
    if priority_class(mpijob):
        template["priorityClassName"] = priority_class(mpijob)
    return {
        "apiVersion": API,
        "kind": WORKLOAD_KIND,
        "metadata": _metadata(mpijob, owner_reference),
        "spec": {"controllerRef": {"apiGroup": names.API_GROUP, "kind": names.KIND, "name": names.job_name(mpijob)},
                 "podGroupTemplates": [template]},
    }


def pod_group(mpijob: Obj, owner_reference: Obj) -> Obj:
    spec: Obj = {"workloadRef": {"workloadName": names.job_name(mpijob), "templateName": TEMPLATE},
                 "schedulingPolicy": _gang_policy(mpijob)}
    if priority_class(mpijob):
        spec["priorityClassName"] = priority_class(mpijob)
    return {"apiVersion": API, "kind": POD_GROUP_KIND, "metadata": _metadata(mpijob, owner_reference),
            "spec": spec}


def _label_patch(desired: Obj, observed: Obj) -> Obj:
    have = (observed.get("metadata") or {}).get("labels") or {}
    return {k: v for k, v in desired["metadata"]["labels"].items() if have.get(k) != v}


def _have_min_count(policy: Any) -> Any:
    return ((policy or {}).get("gang") or {}).get("minCount") if isinstance(policy, dict) else None


def diff(desired: Obj, observed: Obj) -> Patch | None:
    """A merge patch of what the operator owns and the API lets change: our labels and the gang's
    minCount. The rest of the spec is immutable (priorityClassName, workloadRef, the template's name)
    or defaulted by the API server (priority, disruptionMode), so it is not looked at: a new spec
    reaches the objects when a resume creates them afresh."""
    patch: Obj = {}
    why = []
    labels = _label_patch(desired, observed)
    if labels:
        patch["metadata"] = {"labels": labels}
        why.append("metadata.labels")
    want = _have_min_count(_policy_of(desired))
    have_spec = observed.get("spec") or {}
    if observed.get("kind") == WORKLOAD_KIND:
        templates = have_spec.get("podGroupTemplates")
        ours = [t for t in templates or [] if isinstance(t, dict) and t.get("name") == TEMPLATE]
        if ours and _have_min_count(ours[0].get("schedulingPolicy")) not in (None, want):
            # A merge patch replaces a list whole: send every template back as it is, with the count set,
            # so the fields the API server filled in stay.
            fixed = [{**t, "schedulingPolicy": {**t["schedulingPolicy"], "gang": {
                **t["schedulingPolicy"]["gang"], "minCount": want}}} if t is ours[0] else t for t in templates]
            patch["spec"] = {"podGroupTemplates": fixed}
            why.append(f"spec.podGroupTemplates[{TEMPLATE}].schedulingPolicy.gang.minCount")
    elif _have_min_count(have_spec.get("schedulingPolicy")) not in (None, want):
        patch["spec"] = {"schedulingPolicy": {"gang": {"minCount": want}}}
        why.append("spec.schedulingPolicy.gang.minCount")
    return Patch(ref_of(observed), patch, "drift: " + ", ".join(why)) if patch else None


def _policy_of(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    if obj.get("kind") == WORKLOAD_KIND:
        return spec["podGroupTemplates"][0]["schedulingPolicy"]
    return spec["schedulingPolicy"]


# -- pod templates --------------------------------------------------------------------------------


def decorate_template(template: Obj, mpijob: Obj, config: Config) -> None:
    """Names the MPIJob's PodGroup on a pod template (mutated); a group the user named is replaced:
    the operator's gang is the one it creates and follows."""
    if enabled(config):
        template["spec"]["schedulingGroup"] = {"podGroupName": names.job_name(mpijob)}


# -- the wait, as users see it --------------------------------------------------------------------


def scheduled_condition(pod_group_obj: Obj | None) -> Obj | None:
    for c in ((pod_group_obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == SCHEDULED_CONDITION:
            return c
    return None


def waiting_message(pod_group_obj: Obj | None, key: str) -> str | None:
    """Why the MPIJob's pods are not starting, while the scheduler finds no room for the whole gang
    (the PodGroup's PodGroupInitiallyScheduled is False), in the scheduler's words."""
    c = scheduled_condition(pod_group_obj)
    if c is None or c.get("status") != "False":
        return None
    count = _have_min_count(((pod_group_obj or {}).get("spec") or {}).get("schedulingPolicy"))
    said = f"{c.get('reason') or 'Unschedulable'}: {c.get('message') or 'no reason given'}"
    return (f"MPIJob {key} waits for its gang: PodGroup {key} (minCount {count}) is not scheduled ({said}); "
            "no pod starts until the cluster has room for all of them at once.")
