"""discover_hosts.sh in a running elastic launcher within seconds of a worker's start or loss
(docs/architecture.md section 9.2). Pure: nothing here does I/O.

A launcher reads discover_hosts.sh through its ConfigMap volume, which the kubelet refreshes only
when it syncs the pod: every `syncFrequency` (1 min by default) with up to 50 % jitter, so elastic
Horovod learned of a new or lost worker 60-90 s late. The kubelet also syncs a pod whenever the pod
object changes, and each sync remounts its ConfigMap volumes from the kubelet's ConfigMap cache,
which watches the ConfigMap. So once the ConfigMap (as cached) carries new hosts, the operator
stamps their digest on each running launcher pod (annotation REFRESH_ANNOTATION): one pod patch per
change of hosts, none at steady state, and only for an elastic launcher (`is_elastic`: one whose
horovodrun is given `--host-discovery-script /etc/mpi/discover_hosts.sh`).
For the same launchers the ConfigMap's discover_hosts.sh is not held by the settle window
(reconcilers/pace.py): written as the plan sees the change.
"""

from __future__ import annotations

import hashlib

from reconcilers import desired, names
from reconcilers.context import JobContext
from reconcilers.discovery import DISCOVERY_SCRIPT, is_elastic
from reconcilers.draft import Draft
from reconcilers.types import Patch, Ref

REFRESH_ANNOTATION = "mpijob-operator.dev/discover-hosts"


# The Warning Event of an elastic MPIJob that runs on the Job backend anyway (its annotation pins it).
R_JOB_BACKEND = "ElasticOnJobBackend"


def job_backend_warning(mpijob: dict, key: str, backend: str) -> str | None:
    """What an elastic MPIJob on the Job backend is told when it is created, or None. An elastic
    MPIJob gets the StatefulSet unless its annotation says otherwise (reconcilers/backend.py)."""
    if backend != "job" or not is_elastic(mpijob):
        return None
    return (f"MPIJob {key} is elastic (its launcher runs {DISCOVERY_SCRIPT}) and its annotation "
            f"{names.BACKEND_ANNOTATION}: job puts its workers in an Indexed Job: one lost worker recreates "
            "that Job, so the launcher sees every worker go at once, and horovodrun blacklists each of their "
            "hosts for good unless given --blacklist-cooldown-range. Remove the annotation (elastic MPIJobs "
            "get the StatefulSet backend, which replaces the lost worker alone) or set it to \"statefulset\"")


def hosts_digest(config_map: dict | None) -> str | None:
    data = (config_map or {}).get("data")
    script = data.get(desired.DISCOVER_HOSTS) if isinstance(data, dict) else None
    return hashlib.sha256(script.encode()).hexdigest()[:16] if isinstance(script, str) else None


# After a write of the hosts, the launcher pods are stamped by a pass this much later, from the
# ConfigMap as cached then: the kubelet, whose ConfigMap cache follows its own watch, has the new
# hosts by the time the stamp makes it sync the pod. (The ConfigMap's event, an echo of our own write,
# plans nothing: reconcilers/news.py.)
STAMP_AFTER_S = 0.5


def refresh_launchers(ctx: JobContext, draft: Draft) -> None:
    """Stamps the cached ConfigMap's hosts digest on every running launcher pod that lacks it."""
    if not is_elastic(ctx.job) or not ctx.owned(ctx.observed.config_map):
        return
    if any(p.ref.kind == "ConfigMap" for p in draft.plan.patches):
        draft.requeue(STAMP_AFTER_S)  # the hosts are written now: stamp once the cache shows them
    digest = hosts_digest(ctx.observed.config_map)
    if digest is None:
        return
    for pod in ctx.pods.launchers:
        meta = pod.get("metadata") or {}
        if not desired.is_pod_active(pod):  # Running and not being deleted
            continue
        if (meta.get("annotations") or {}).get(REFRESH_ANNOTATION) == digest:
            continue
        draft.plan.patches.append(Patch(Ref("v1", "Pod", ctx.namespace, meta.get("name", "")),
                                        {"metadata": {"annotations": {REFRESH_ANNOTATION: digest}}},
                                        "discover_hosts.sh changed: the kubelet refreshes the launcher's volume"))
