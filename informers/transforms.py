"""Transforms applied before caching, to bound the informers' memory: they drop what the
controller never reads. They return a new dict and never modify their argument."""

from __future__ import annotations


def _meta_without_managed_fields(meta: dict) -> dict:
    if "managedFields" not in meta:
        return meta
    return {k: v for k, v in meta.items() if k != "managedFields"}


def strip_managed_fields(obj: dict) -> dict:
    meta = obj.get("metadata")
    if not meta or "managedFields" not in meta:
        return obj
    out = dict(obj)
    out["metadata"] = _meta_without_managed_fields(meta)
    return out


_SPEC_KEEP = ("nodeName", "hostname", "subdomain")
# observedGeneration: whether the kubelet wrote a pod's end before or after its delete (retries.ended_by_disruption)
_STATUS_KEEP = ("phase", "conditions", "podIP", "startTime", "reason", "message", "observedGeneration")
_CONTAINER_STATUS_KEEP = ("name", "state", "lastState", "restartCount", "ready")


def slim_pod(obj: dict) -> dict:
    """A pod as the controller reads it: metadata (minus managedFields, with deletionTimestamp),
    spec.nodeName/hostname/subdomain, and status phase, conditions, podIP, startTime and the
    containers' state, lastState (how a container restarted in place last ended), restartCount and
    ready."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    out: dict = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "metadata": _meta_without_managed_fields(meta),
        "spec": {k: spec[k] for k in _SPEC_KEEP if k in spec},
    }
    st = {k: status[k] for k in _STATUS_KEEP if k in status}
    for field in ("containerStatuses", "initContainerStatuses"):
        if field in status:
            st[field] = [{k: cs[k] for k in _CONTAINER_STATUS_KEEP if k in cs} for cs in status[field] or []]
    out["status"] = st
    return out


# What a cached Secret keeps of each value: whether it is empty. The plan asks only whether the SSH
# Secret has both keys (reconcilers/plan.py, shared_children); the values (private keys) stay on
# the API server and in the pods that mount them.
SECRET_VALUE_PLACEHOLDER = "-"


def strip_secret_data(obj: dict) -> dict:
    """A Secret without its values: `data` (and `stringData`) keep their keys, each value replaced by
    "" when it was empty and SECRET_VALUE_PLACEHOLDER otherwise; metadata loses managedFields."""
    out = strip_managed_fields(obj)
    if "data" not in out and "stringData" not in out:
        return out
    out = dict(out)
    for field in ("data", "stringData"):
        data = out.get(field)
        if isinstance(data, dict):
            out[field] = {k: SECRET_VALUE_PLACEHOLDER if v else "" for k, v in data.items()}
    return out


_KUEUE_CONDITION_KEEP = ("type", "status", "reason", "message")
_KUEUE_META_KEEP = ("name", "namespace", "uid", "resourceVersion", "ownerReferences", "deletionTimestamp")


def slim_kueue_workload(obj: dict) -> dict:
    """A Kueue Workload as the controller reads it (reconcilers/explain/kueue.py): its name, owner and
    deletion, spec.queueName, and its conditions' type, status, reason and message; not the pod sets
    (a copy of every pod template: most of the object)."""
    meta = obj.get("metadata") or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    spec = obj.get("spec") or {}
    return {
        "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind", "Workload"),
        "metadata": {k: meta[k] for k in _KUEUE_META_KEEP if k in meta},
        "spec": {"queueName": spec["queueName"]} if "queueName" in spec else {},
        "status": {"conditions": [{k: c[k] for k in _KUEUE_CONDITION_KEEP if k in c}
                                  for c in conds if isinstance(c, dict)]},
    }
