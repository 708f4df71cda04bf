"""Why Kueue holds a suspended MPIJob: the Suspended condition quotes Kueue (docs/operations.md, "Why is
my MPIJob not running?"). Pure: the Workload is observed data, time is `draft.now`.

Kueue admits an MPIJob through a Workload it makes for it (kueue.x-k8s.io, owned by the MPIJob), and
keeps the MPIJob suspended until that Workload is admitted. While it is not, the Workload's
`QuotaReserved=False` message says why (which flavor, which resource is short and by how much), an
`Admitted=False` one what admission check it waits for, an `Evicted=True` one why a run was stopped.

Where it shows: the MPIJob's state is Suspended (its spec says so, and Kueue's MPIJob integration reads
the spec, not our conditions), so the Suspended condition itself carries the cause: reason
`QuotaNotReserved` (or `NotAdmitted`), message "MPIJob ns/x is suspended: Kueue has not admitted it:
Workload w (LocalQueue q): QuotaReserved=False (Pending): <Kueue's message>". The State column reads
Suspended, the Reason column the cause, `-o wide` Kueue's words (docs/architecture.md section 6.5). A
suspend that is no Kueue's (no Workload, or one Kueue has not looked at yet) reads as before
(`MPIJobSuspended`). Clients that read the condition by type see Suspended=True as upstream writes it.

Writes: the condition is written when Kueue's words change, never otherwise (a Workload event whose
conditions say the same plans no write): zero writes at steady state.
"""

from __future__ import annotations

from reconcilers import status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.types import Obj

R_QUOTA_NOT_RESERVED = "QuotaNotReserved"
R_NOT_ADMITTED = "NotAdmitted"
QUOTA_RESERVED, ADMITTED, EVICTED = "QuotaReserved", "Admitted", "Evicted"


def _condition(workload: Obj, ctype: str) -> Obj | None:
    for c in (workload.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def _said(c: Obj, default: str) -> str:
    return f"{c.get('type')}={c.get('status')} ({c.get('reason') or default}): {c.get('message') or 'no message'}"


def hold(workload: Obj | None) -> tuple[str, str] | None:
    """(reason, message) of why Kueue keeps this Workload's MPIJob suspended, or None: no Workload,
    admitted, or not looked at by Kueue yet (no condition that says why)."""
    if workload is None:
        return None
    quota, admitted, evicted = (_condition(workload, t) for t in (QUOTA_RESERVED, ADMITTED, EVICTED))
    if admitted is not None and admitted.get("status") == "True":
        return None  # admitted: Kueue resumes the MPIJob
    if quota is not None and quota.get("status") == "False":
        reason, said = R_QUOTA_NOT_RESERVED, _said(quota, "Pending")
    elif quota is not None and quota.get("status") == "True" and admitted is not None:
        reason, said = R_NOT_ADMITTED, _said(admitted, "NotAdmitted")  # quota held, admission checks pending
    else:
        return None
    if evicted is not None and evicted.get("status") == "True":
        said = f"{_said(evicted, 'Evicted')}; {said}"
    meta = workload.get("metadata") or {}
    queue = (workload.get("spec") or {}).get("queueName")
    where = f"Workload {meta.get('name')}" + (f" (LocalQueue {queue})" if queue else "")
    return reason, f"Kueue has not admitted it: {where}: {said}"


def owned_workload(workloads: list[Obj], uid: str | None) -> Obj | None:
    """The Workload Kueue made for this MPIJob (its controller ownerReference names the MPIJob's uid),
    not being deleted; Kueue makes one at a time, a replaced one goes."""
    for w in workloads:
        meta = w.get("metadata") or {}
        refs = meta.get("ownerReferences") or []
        if not meta.get("deletionTimestamp") and any(r.get("uid") == uid and r.get("controller") for r in refs):
            return w
    return None


def suspended(ctx: JobContext, draft: Draft) -> None:
    """Suspended=True, with Kueue's reason when Kueue holds it; an Event when it becomes suspended and
    when the cause (reason) changes, not for each rewording."""
    why = hold(ctx.observed.kueue_workload)
    reason, msg = (status.R_SUSPENDED, f"MPIJob {ctx.key} is suspended.") if why is None else (
        why[0], f"MPIJob {ctx.key} is suspended: {why[1]}")
    old = status.get_condition(draft.status, status.SUSPENDED) or {}
    draft.condition(status.SUSPENDED, "True", reason, msg)
    if old.get("status") != "True" or old.get("reason") != reason:
        draft.event("Normal", status.R_SUSPENDED if why is None else reason, msg)
