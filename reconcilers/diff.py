"""Desired vs observed, on the fields the operator owns only, as JSON merge patches (RFC 7386).

Owned fields (everything else, such as API defaults, Kueue's injected nodeSelector, other
controllers' labels and annotations, is never looked at, so never fought over):

| object | owned fields |
|---|---|
| every child | `metadata.labels` keys the operator sets (job-name, job-role, operator-name) |
| ConfigMap | `data.hostfile`, `data.discover_hosts.sh` |
| Service | `spec.selector` (exactly: the launcher's alone while the workers leave), `spec.publishNotReadyAddresses` |
| Secret | nothing beyond the labels: the key pair is made once and never rewritten |
| StatefulSet | `spec.replicas`; `spec.template` (replaced whole) + the template-hash annotation, only |
|             | while no worker pod runs (stopped or resuming), so a running MPI job is never rolled |
| worker Job | `spec.suspend`; `spec.parallelism` and `spec.completions` (elastic Indexed Job, |
|            | only when both were equal) |
| launcher Job | `spec.suspend` |
| NetworkPolicy | `spec.podSelector`, `spec.policyTypes`, `spec.ingress`, each exactly (reconcilers/netpol.py) |

Pod templates of Jobs are immutable once they have started, so they are never patched. Changes made
to the MPIJob's templates while it is suspended (Kueue's admission injects nodeSelector,
tolerations, labels...) reach the children this way (chosen over patching the mutable scheduling
fields of a suspended Job, which needs the Job's `status.startTime` cleared through the status
subresource first and misses any other template change):
- workers and launcher Jobs are not created while the MPIJob is suspended;
- an existing Job that is suspended while the MPIJob resumes, and whose template-hash annotation
  differs from the desired template's, is deleted (`recreate_on_resume`) and created afresh from
  the current template on the next reconcile. A suspended Job has no running pods, so nothing is lost.
Templates are compared through the template-hash annotation (hash of the template as the operator
rendered it), not against the API server's defaulted copy.
"""

from __future__ import annotations

from typing import Any

from reconcilers import names
from reconcilers.types import Obj, Patch, Ref


def ref_of(obj: Obj) -> Ref:
    meta = obj.get("metadata") or {}
    return Ref(obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _put(patch: Obj, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        patch = patch.setdefault(key, {})
    patch[path[-1]] = value


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns `old` into `new` (keys gone from `new` become null)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: Obj = {k: None for k in old if k not in new}
    for k, v in new.items():
        if k not in old:
            patch[k] = v
        elif old[k] != v:
            patch[k] = merge_patch(old[k], v)
    return patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as an RFC 7386 JSON merge patch (null removes a key); the
    inverse of merge_patch. Shares unchanged subtrees with `target`, which it never modifies."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out


def template_hash_of(obj: Obj | None) -> str | None:
    return _get(obj, "metadata", "annotations", names.TEMPLATE_HASH_ANNOTATION)


class _Differ:
    def __init__(self, desired: Obj, observed: Obj) -> None:
        self.desired, self.observed = desired, observed
        self.patch: Obj = {}
        self.why: list[str] = []

    def field(self, *path: str) -> None:
        want, have = _get(self.desired, *path), _get(self.observed, *path)
        if want != have:
            _put(self.patch, path, want)
            self.why.append(f"{'.'.join(path)} {_short(have)} -> {_short(want)}")

    def map_keys(self, *path: str, exact: bool = False) -> None:
        """The keys of the desired map; with `exact`, other keys are removed too."""
        want = _get(self.desired, *path) or {}
        have = _get(self.observed, *path)
        have = have if isinstance(have, dict) else {}
        changed: Obj = {k: v for k, v in want.items() if have.get(k) != v}
        if exact:
            changed.update({k: None for k in have if k not in want})
        if changed:
            _put(self.patch, path, changed)
            self.why.append(f"{'.'.join(path)}: {', '.join(sorted(changed))}")

    def exact(self, *path: str) -> None:
        """The desired value, exactly: a map key that the desired value lacks is removed too (a merge
        patch alone would keep it, and the next diff would find it again)."""
        want, have = _get(self.desired, *path), _get(self.observed, *path)
        if want != have:
            _put(self.patch, path, merge_patch(have, want))
            self.why.append(f"{'.'.join(path)} {_short(have)} -> {_short(want)}")

    def result(self) -> Patch | None:
        if not self.patch:
            return None
        return Patch(ref_of(self.observed) if self.observed.get("kind") else ref_of(self.desired),
                     self.patch, "drift: " + "; ".join(self.why))


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def diff(desired: Obj, observed: Obj, *, template_mutable: bool = False) -> Patch | None:
    """The merge patch that brings `observed` to `desired` on the owned fields, or None.
    `template_mutable`: a StatefulSet with no running pods, whose template may be replaced."""
    d = _Differ(desired, observed)
    d.map_keys("metadata", "labels")
    kind = desired.get("kind")
    if kind == "ConfigMap":
        d.map_keys("data")
    elif kind == "Service":
        d.map_keys("spec", "selector", exact=True)
        d.field("spec", "publishNotReadyAddresses")
    elif kind == "StatefulSet":
        d.field("spec", "replicas")
        if template_mutable and template_hash_of(desired) != template_hash_of(observed):
            d.map_keys("metadata", "annotations")
            # The template replaced whole: a key the MPIJob's template lost (a nodeSelector key of a
            # former Kueue flavor) is removed too, where a plain merge patch would keep it.
            _put(d.patch, ("spec", "template"),
                 merge_patch(_get(observed, "spec", "template") or {}, desired["spec"]["template"]))
            d.why.append("spec.template changed while no worker runs")
    elif kind == "NetworkPolicy":
        for key in ("podSelector", "policyTypes", "ingress"):
            d.exact("spec", key)
    elif kind == "Job":
        d.field("spec", "suspend")
        want, have = _get(desired, "spec", "parallelism"), _get(observed, "spec", "parallelism")
        if want is not None and want != have:
            # Elastic Indexed Job: completions may change only together with an equal parallelism.
            if _get(observed, "spec", "completions") == have:
                d.field("spec", "completions")
            d.field("spec", "parallelism")
    return d.result()


def recreate_on_resume(desired: Obj, observed: Obj) -> bool:
    """A suspended Job that is to run again, rendered from another template: delete and recreate."""
    return (
        observed.get("kind") == "Job"
        and _get(observed, "spec", "suspend") is True
        and _get(desired, "spec", "suspend") is False
        and template_hash_of(desired) != template_hash_of(observed)
    )
