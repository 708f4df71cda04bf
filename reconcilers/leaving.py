"""The workers on their way out while an MPIJob runs (docs/architecture.md sections 4 and 11), as pure
functions: a worker Job that can no longer give every worker back (`workers_lost`), old workers
still leaving (`workers_leaving`: the Service then selects the launcher alone), when the new worker
Job may be made beside them (`made_beside_leaving`), and the workers being made afresh
(`workers_renewed`). reconcilers/children.py acts on them.
"""

from __future__ import annotations

from reconcilers import desired, names, ownership, status, takeover
from reconcilers.context import JobContext
from reconcilers.defaults import WORKER
from reconcilers.types import Obj


def workers_lost(ctx: JobContext, have: Obj) -> str | None:
    """Why a worker Job can no longer give every worker back, or None. An Indexed Job never
    reruns an index whose pod succeeded, and a stopped `sshd` exits 0: a deleted worker pod, or
    every pod of a suspended Job, ends Succeeded and its index stays completed."""
    wst = have.get("status") or {}
    if int(wst.get("succeeded") or 0) > 0 or wst.get("completedIndexes"):
        return f"worker index(es) {wst.get('completedIndexes') or wst.get('succeeded')} ended"
    for ctype in ("Complete", "Failed"):
        if status.job_condition(have, ctype) is not None:
            return f"the worker Job is {ctype}"
    done = sorted(desired.pod_hostname(p) for p in ctx.pods.workers
                  if (p.get("status") or {}).get("phase") == "Succeeded")
    if done:
        return f"worker pod(s) {', '.join(done)} ended"
    # A worker pod being deleted ends too, Succeeded as a rule (sshd exits 0): known at its delete,
    # up to a second before the kubelet reports its end (its relist), and the workers' return is what
    # a lost run waits for (docs/architecture.md section 11). An index past Worker replicas is a
    # scale-down's, not a loss.
    count = desired.worker_replicas(ctx.job)
    going = sorted(desired.pod_hostname(p) for p in ctx.pods.workers if ownership.deleting(p)
                   and (desired.worker_index(ctx.job, p) or 0) < count)
    return f"worker pod(s) {', '.join(going)} being deleted" if going else None


def _renewable(ctx: JobContext) -> bool:
    """Workers this operator makes afresh: a Worker replica spec with replicas, in our shape."""
    return isinstance(ctx.spec["mpiReplicaSpecs"].get(WORKER), dict) and desired.worker_replicas(ctx.job) > 0 \
        and not takeover.upstream_shaped(ctx)


def workers_leaving(ctx: JobContext) -> bool:
    """Old workers are on their way out while the MPIJob runs: the worker object being deleted, or to
    be deleted by this plan (its Job lost a worker), or a worker pod of an earlier set still running
    (its Job already gone: the new one is made beside it, `made_beside_leaving`). Such a pod keeps
    its name in DNS until it ends (publishNotReadyAddresses), so the Service selects the launcher
    alone meanwhile (desired.service; docs/architecture.md section 11)."""
    if not _renewable(ctx):
        return False
    have = ctx.workers
    if ownership.stale_alive(ctx.pods, names.ROLE_WORKER):
        return True
    if have is None or not ctx.owned(have):
        return False
    return ownership.deleting(have) or (have.get("kind") == "Job" and workers_lost(ctx, have) is not None)


def made_beside_leaving(ctx: JobContext, sts: bool) -> bool:
    """The new worker Job may be created while old worker pods still stop (a worker Job made afresh, or
    a deleted predecessor's): on the Job backend (its pods' names are its own, never an old pod's; a
    StatefulSet's are the old ones'), once the Service as observed selects the launcher alone
    (`workers_leaving`), so that no worker's name resolves before every old one has ended
    (docs/architecture.md section 11)."""
    if sts:
        return False
    service = ctx.observed.service
    selector = ((service or {}).get("spec") or {}).get("selector") or {}
    return ctx.owned(service) and selector.get(names.JOB_ROLE_LABEL) == names.ROLE_LAUNCHER


def launcher_held(ctx: JobContext) -> bool:
    """The launcher Job is suspended (a resume waiting for its gang or for WaitForWorkersReady): no
    launcher looks the workers up, so the Service is left as it is."""
    launcher = ctx.launcher
    return ctx.owned(launcher) and bool(((launcher or {}).get("spec") or {}).get("suspend"))


def workers_renewed(ctx: JobContext) -> bool:
    """The workers are being made afresh while the MPIJob runs (section 4): their object gone (this
    plan creates it) or leaving (`workers_leaving`). A launcher that starts meanwhile finds no
    workers' names, or (before the Service narrowed) the old ones on their way out."""
    return (ctx.workers is None and _renewable(ctx)) or workers_leaving(ctx)
