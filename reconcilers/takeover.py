"""MPIJobs the upstream operator started (docs/architecture.md section 6.3), run out on that shape.

The Kubeflow MPI Operator runs workers as bare pods controlled by the MPIJob and a launcher Job
without our template hash. Such a job gets no worker Job or StatefulSet (its names would clash with
the bare pods'), no repair of its launcher (a Job's template is immutable), and its bare workers
are deleted when it ends, as upstream does. While upstream's launcher runs, a bare worker that is
gone comes back as upstream makes it (same name, same labels, the MPIJob its controller), so the
launcher's next attempt finds every host. A suspend stops the bare workers and deletes upstream's
launcher Job: a resume starts afresh, in this operator's own shape. Pure functions; nothing here
does I/O.
"""

from __future__ import annotations

from dataclasses import replace

from reconcilers import access, desired, names, ownership
from reconcilers.context import JobContext
from reconcilers.defaults import WORKER
from reconcilers.draft import Draft
from reconcilers.types import Create, Obj


def upstream_shaped(ctx: JobContext) -> bool:
    """Started by the upstream operator: bare worker pods controlled by the MPIJob, or a launcher Job
    with no template hash of ours, and no worker object."""
    if ctx.observed.workers is not None:
        return False
    if _upstream_launcher(ctx):
        return True
    return any(names.is_controlled_by(p, ctx.job) for p in ctx.pods.workers)


def _upstream_launcher(ctx: JobContext) -> bool:
    launcher = ctx.launcher
    return ctx.owned(launcher) and names.TEMPLATE_HASH_ANNOTATION not in (
        (launcher.get("metadata") or {}).get("annotations") or {})


def bare_workers_ready(ctx: JobContext) -> int:
    return sum(1 for p in ctx.pods.workers if desired.is_pod_ready(p))


def stop_bare_workers(ctx: JobContext, draft: Draft) -> None:
    """The job has ended, or is suspended: delete its bare worker pods, as upstream does."""
    why = "suspended" if ctx.run_policy.get("suspend") and not draft.finished() else "finished"
    for pod in ctx.pods.workers:
        if names.is_controlled_by(pod, ctx.job) and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            draft.delete(pod, f"the MPIJob has {why}: stop its worker" if why == "finished"
                         else f"the MPIJob is {why}: stop its worker")


def bare_worker(ctx: JobContext, index: int) -> Obj:
    """Worker pod `<name>-worker-<index>` as the upstream operator makes it: the Worker template with the
    operator's labels and replica-index (offset by one with runLauncherAsWorker), hostname its own name
    under the MPIJob's Service, the Worker restartPolicy, sshd by default, K_MPI_JOB_ROLE, the SSH
    Secret mounted, and the MPIJob as its controller."""
    job = ctx.job
    template = desired.worker_template(job, replace(ctx.config, worker_backend="job"))
    meta, spec = template.get("metadata") or {}, template["spec"]
    name = f"{names.worker_name(job)}-{index}"
    offset = 1 if (job.get("spec") or {}).get("runLauncherAsWorker") else 0
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != names.REPLICA_INDEX_OFFSET_ANNOTATION}  # a bare pod's index is its label
    spec["hostname"] = name
    spec["subdomain"] = names.service_name(job)
    spec["restartPolicy"] = (job["spec"]["mpiReplicaSpecs"][WORKER].get("restartPolicy") or "Never")
    pod_meta: Obj = {"name": name, "namespace": names.job_namespace(job),
                     "labels": {**meta["labels"], names.REPLICA_INDEX_LABEL: str(index + offset)},
                     "ownerReferences": [desired.owner_reference(job)]}
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def replace_lost_workers(ctx: JobContext, draft: Draft) -> None:
    """While upstream's launcher Job runs (not being deleted), each bare worker that is gone is created
    again, as upstream does; one that still exists, Failed or being deleted included, is left as
    upstream leaves it (its name is taken until it is gone, and its delete event plans again)."""
    if not upstream_shaped(ctx) or not _upstream_launcher(ctx) or ownership.deleting(ctx.launcher):
        return
    if access.off(ctx.config, "takeover-workers"):
        return  # no pods create granted: named at start (client/permissions.py TAKEOVER_WORKERS)
    have = {(p.get("metadata") or {}).get("name") for p in ctx.pods.workers}
    have |= {(p.get("metadata") or {}).get("name") for p in ctx.pods.stale}
    for i in range(desired.worker_replicas(ctx.job)):
        if f"{names.worker_name(ctx.job)}-{i}" not in have:
            draft.plan.creates.append(Create(bare_worker(ctx, i)))


def suspend(ctx: JobContext, draft: Draft) -> None:
    """A taken-over MPIJob suspended: its bare workers stop (children.sync_workers), and upstream's
    launcher Job, whose template cannot change, is deleted, so that the resume starts afresh in this
    operator's own shape (a worker Job or StatefulSet and a launcher Job of ours)."""
    if ctx.launcher is None:
        # Upstream's launcher Job carries only `app: <name>`, which the label-filtered informer does not
        # see until adopted: a create meets it (AlreadyExists, controlled by this MPIJob), the executor
        # adds our labels, and the next pass deletes it. Where there is none, ours is made, suspended.
        draft.plan.creates.append(Create(desired.launcher(ctx.job, ctx.config, running=False)))
    elif _upstream_launcher(ctx) and not ownership.deleting(ctx.launcher):
        draft.recreate(ctx.launcher, "suspended: the upstream operator's launcher Job gives way to this "
                                     "operator's on resume")
