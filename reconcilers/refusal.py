"""A child the API server refused to write, as plain data, and what the plan makes of it (pure).

The controller remembers the last refusal per MPIJob (with the MPIJob's metadata.generation) and
passes it in `Inputs.refusal`. Two kinds, by HTTP status (README, "What bad input gets"):
- permanent (400, 413, 422): no retry can change the answer while the spec stays the same, so the
  MPIJob ends Failed/ChildRefused; a new generation (the spec edited) clears it;
- transient (403 quota, 409, 429, 5xx, anything else): retried with backoff, shown meanwhile as the
  condition Blocked=True, removed once the write passes.
Each transition gives one Warning Event that quotes the server's message and names the MPIJob field.
"""

from __future__ import annotations

import re

from reconcilers.defaults import LAUNCHER, WORKER
from reconcilers.names import NETWORK_INGRESS_FROM_ANNOTATION

# Refusal and Cause are plain data of the planner's Inputs (reconcilers/types.py); named here too,
# where the controller and the tests look for them.
from reconcilers.types import Cause, Plan, Refusal

R_REFUSED = "ChildRefused"  # reason of Failed (permanent) and Blocked (transient)
BLOCKED = "Blocked"  # condition type, True while a transient refusal lasts
_MAX_CAUSES = 5


def causes_of(body: object) -> tuple[Cause, ...]:
    """details.causes[] of a Status body, as Causes (what is not a well-formed cause is skipped)."""
    details = body.get("details") if isinstance(body, dict) else None
    raw = details.get("causes") if isinstance(details, dict) else None
    out = []
    for c in raw if isinstance(raw, list) else []:
        if isinstance(c, dict) and (c.get("field") or c.get("message")):
            out.append(Cause(str(c.get("field") or ""), str(c.get("message") or c.get("reason") or "")))
    return tuple(out)


def _role(name: str) -> str | None:
    if name.endswith("-launcher"):
        return LAUNCHER
    if name.endswith("-worker"):
        return WORKER
    return None


def mpijob_field(kind: str, name: str, field: str) -> str:
    """The MPIJob field a child's field comes from: the pod template of a launcher/worker object is
    the replica spec's template; the ConfigMap's size comes from the worker count; the NetworkPolicy's
    peers from the annotation that names them (reconcilers/netpol.py)."""
    role = _role(name)
    m = re.match(r"^spec\.template\.(.*)$", field or "")
    if role and kind in ("Job", "StatefulSet") and m:
        return f"spec.mpiReplicaSpecs.{role}.template.{m.group(1)}"
    if role and kind in ("Job", "StatefulSet"):
        return f"spec.mpiReplicaSpecs.{role}"
    if kind == "ConfigMap":
        return f"spec.mpiReplicaSpecs.{WORKER}.replicas"
    if kind == "NetworkPolicy":  # its only input from the user: the peers of this annotation
        return f"metadata.annotations[{NETWORK_INGRESS_FROM_ANNOTATION}]"
    return "spec"


def fields(r: Refusal) -> list[str]:
    """The MPIJob fields a refusal names (one per cause, or the likeliest one)."""
    named = [mpijob_field(r.kind, r.name, c.field) for c in r.causes[:_MAX_CAUSES] if c.field]
    return list(dict.fromkeys(named)) or [mpijob_field(r.kind, r.name, "")]


def describe(r: Refusal) -> str:
    """One line: what was refused, the server's words, and the MPIJob field(s) to change."""
    head = f"the API server refused {r.kind} {r.name} ({r.code} {r.reason or 'error'}): {r.message}"
    if r.permanent:
        return f"{head}; fix {', '.join(fields(r))} (retrying cannot help)"
    return f"{head}; retrying with backoff (it passes once the cause goes: quota raised, conflict gone)"


def same(a: Refusal | None, b: Refusal | None) -> bool:
    """The same refusal again (log and report it once, not per retry): the same child refused with
    the same code and reason. Not its wording, which moves between retries (a quota's message counts
    the pods used: `used: pods=3`, then `used: pods=2`). Blocked keeps the words it was shown with
    (README, "What bad input gets")."""
    return a is not None and b is not None and (a.code, a.reason, a.kind, a.name) == (
        b.code, b.reason, b.kind, b.name)


def report(plan: Plan, r: Refusal) -> Plan:
    """What to write in the pass that shows a refusal not shown yet. Transient: the status (Blocked)
    and its Event only; the refused write waits for the backoff. Permanent: the whole plan of the
    now Failed MPIJob, which stops its workers."""
    if r.permanent:
        return plan
    return Plan(status=plan.status, events=plan.events)
