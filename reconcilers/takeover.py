"""MPIJobs the upstream operator started (docs/architecture.md section 6.3), run out on that shape.

The Kubeflow MPI Operator runs workers as bare pods controlled by the MPIJob and a launcher Job
without our template hash. Such a job gets no worker Job or StatefulSet (its names would clash with
the bare pods'), no repair of its launcher (a Job's template is immutable), and its bare workers
are deleted when it ends, as upstream does. Pure functions; nothing here does I/O.
"""

from __future__ import annotations

from reconcilers import desired, names
from reconcilers.context import JobContext
from reconcilers.draft import Draft


def upstream_shaped(ctx: JobContext) -> bool:
    """Started by the upstream operator: bare worker pods controlled by the MPIJob, or a launcher Job
    with no template hash of ours, and no worker object."""
    if ctx.observed.workers is not None:
        return False
    launcher = ctx.launcher
    if ctx.owned(launcher) and names.TEMPLATE_HASH_ANNOTATION not in (
            (launcher.get("metadata") or {}).get("annotations") or {}):
        return True
    return any(names.is_controlled_by(p, ctx.job) for p in ctx.pods.workers)


def bare_workers_ready(ctx: JobContext) -> int:
    return sum(1 for p in ctx.pods.workers if desired.is_pod_ready(p))


def stop_bare_workers(ctx: JobContext, draft: Draft) -> None:
    """The job has ended: delete its bare worker pods, as upstream does."""
    for pod in ctx.pods.workers:
        if names.is_controlled_by(pod, ctx.job) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            draft.delete(pod, "the MPIJob has finished: stop its worker")
