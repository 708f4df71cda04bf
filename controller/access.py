"""What the operator may do, asked of the API server once at start-up (docs/operations.md, "Missing RBAC").

A ClusterRole that lacks a verb the operator sends (upstream v0.8.2's, kept by a user who only swapped
the image) used to show as nothing: an informer whose list is refused never syncs, no MPIJob is
reconciled, and /healthz fails ten minutes later. Instead, one SelfSubjectAccessReview per grant of
client/permissions.py (any authenticated user may ask), then client/permissions.assess sorts what is
missing: the operator refuses to start without what it needs to speak to MPIJobs at all, turns off a
feature whose grant is missing, and holds every MPIJob (each told why) without the rest. RBAC read
once: granted later, it takes effect at the operator's next start.
"""

from __future__ import annotations

import threading

from client import permissions as perm
from client.errors import ApiError
from client.rest import RestClient
from controller import logs

log = logs.get("access")
PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _review_body(t: perm.Triple, namespace: str | None) -> dict:
    group, resource, verb = t
    resource, _, sub = resource.partition("/")
    attrs = {"group": group, "resource": resource, "verb": verb}
    if sub:
        attrs["subresource"] = sub
    if namespace:
        attrs["namespace"] = namespace  # unset: in every namespace, as a cluster-wide list asks
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}


def allowed(client: RestClient, t: perm.Triple, namespace: str | None, stop: threading.Event) -> bool:
    """The API server's answer for one grant; True when it cannot be asked (a cluster that refuses
    SelfSubjectAccessReviews: the requests themselves will say)."""
    while not stop.is_set():
        try:
            answer = client.request("POST", PATH, body=_review_body(t, namespace), timeout=10)
            return bool((answer.get("status") or {}).get("allowed"))
        except ApiError as e:
            if e.status in (403, 404):
                log.warning("cannot ask the API server what the operator may do; assuming every grant",
                            error=f"{e.status} {e.reason}")
                return True
            log.warning("access review failed; retrying", error=f"{e.status} {e.reason}")
        except Exception as e:
            log.warning("API server unreachable; retrying", error=str(e))
        stop.wait(2)
    return True


def missing(client: RestClient, grants: set[perm.Triple], namespace: str, lease: set[perm.Triple],
            lease_namespace: str, stop: threading.Event) -> set[perm.Triple]:
    """The grants the API server refuses this process: `grants` in `namespace` ("" : all), `lease` (leader
    election's) in `lease_namespace`."""
    out = set()
    for t in sorted(grants | lease):
        ns = lease_namespace if t in lease else (namespace or None)
        if not allowed(client, t, ns, stop):
            out.add(t)
    return out


def _manifest(namespace: str) -> str:
    """The manifest that grants the operator's RBAC: with --namespace, the namespaced Role's, or the ClusterRole's."""
    return f"{perm.MANIFEST_NAMESPACED} or {perm.MANIFEST}" if namespace else perm.MANIFEST


def report(a: perm.Assessment, namespace: str) -> None:
    """The start-up log lines: every missing grant, what the operator does about it, and the manifest."""
    manifest = _manifest(namespace)
    if not a.missing:
        log.info("RBAC: every grant the operator sends is granted")
        return
    if a.refuse:
        what = perm.spell_all(a.refuse)
        log.error("RBAC: the operator may not " + what + ", without which it cannot tell any MPIJob anything: "
                  "not starting. Every missing grant: " + perm.spell_all(a.missing) + f". Apply {manifest}"
                  + (f" and {perm.LEASE_MANIFEST}" if any(t[1] == "leases" for t in a.refuse) else "")
                  + ", then start the operator again")
        return
    for f, lacks in a.off:
        log.warning(f"RBAC: the operator may not {perm.spell_all(lacks)}: feature {f.name} off: {f.without}. "
                    f"Grant it with {manifest} and restart the operator")
    if a.blocked:
        log.error(f"RBAC: the operator may not {perm.spell_all(a.blocked)}: no MPIJob starts; each one says so "
                  f"in its Blocked condition. Grant them with {manifest} and restart the operator")


def message(a: perm.Assessment, namespace: str) -> str:
    """Why no MPIJob can start (for each one's Blocked condition), or ""."""
    if not a.blocked:
        return ""
    manifest = _manifest(namespace)
    return (f"the operator's RBAC lacks {perm.spell_all(a.blocked)}, which running an MPIJob needs; "
            f"apply {manifest} and restart the operator")


def features_off(a: perm.Assessment, namespace: str) -> tuple[tuple[str, str], ...]:
    """(feature, what each affected MPIJob is told) of every feature turned off."""
    manifest = _manifest(namespace)
    return tuple((f.name, f"{f.without}: the operator's RBAC lacks {perm.spell_all(lacks)} ({manifest})")
                 for f, lacks in a.off)


def health_detail(a: perm.Assessment) -> str:
    """For /healthz: healthy, but with what is off or held."""
    parts = [f"{f.name} off (missing {perm.spell_all(lacks)})" for f, lacks in a.off]
    if a.blocked:
        parts.append(f"MPIJobs held (missing {perm.spell_all(a.blocked)})")
    return "; ".join(parts)
