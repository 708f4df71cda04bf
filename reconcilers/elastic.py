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
import shlex
from typing import TYPE_CHECKING, Any

from reconcilers import desired, names
from reconcilers.draft import Draft
from reconcilers.types import Patch, Ref

if TYPE_CHECKING:  # context.py imports this module (the backend of an elastic MPIJob)
    from reconcilers.context import JobContext

REFRESH_ANNOTATION = "mpijob-operator.dev/discover-hosts"
DISCOVERY_SCRIPT = "discover_hosts.sh"
DISCOVERY_FLAG = "--host-discovery-script"  # horovodrun's


def _dict(value: Any, key: str) -> dict:
    got = value.get(key) if isinstance(value, dict) else None
    return got if isinstance(got, dict) else {}


def is_elastic(mpijob: Any) -> bool:
    """The launcher's horovodrun is given the discovery script: `--host-discovery-script` followed by
    a path naming discover_hosts.sh, as a word of its command or arguments, as
    `--host-discovery-script=<path>`, or inside a shell string (`sh -c "..."`). What it is, not a
    word in its command: `cat /etc/mpi/discover_hosts.sh; mpirun ...` is not elastic. Read before
    validation too (the backend is chosen first: reconcilers/context.py), so any shape is a no."""
    template = _dict(_dict(_dict(_dict(_dict(mpijob, "spec"), "mpiReplicaSpecs"), "Launcher"), "template"), "spec")
    containers = template.get("containers")
    for c in containers if isinstance(containers, list) else []:
        words = [w for key in ("command", "args") if isinstance(c, dict) and isinstance(c.get(key), list)
                 for w in c[key]]
        if _names_discovery(_tokens([w for w in words if isinstance(w, str)])):
            return True
    return False


def _tokens(words: list[str]) -> list[str]:
    """The words, a shell string among them split as the shell would (shlex, line by line, a comment
    dropped), or at blanks when its quoting is broken: the option and its path may sit in one
    `sh -c` argument."""
    out: list[str] = []
    for w in words:
        if not any(ch.isspace() for ch in w):
            out.append(w)
            continue
        for line in w.splitlines():
            try:
                toks = shlex.split(line)
            except ValueError:  # unbalanced quotes (or a quote spanning lines): words at blanks
                toks = line.split()
            at = next((i for i, t in enumerate(toks) if t.startswith("#")), len(toks))
            out.extend(toks[:at])
    return out


def _names_discovery(tokens: list[str]) -> bool:
    for i, tok in enumerate(tokens):
        if tok == DISCOVERY_FLAG and i + 1 < len(tokens):
            value = tokens[i + 1]
        elif tok.startswith(DISCOVERY_FLAG + "="):
            value = tok[len(DISCOVERY_FLAG) + 1:]
        else:
            continue
        if value.rstrip(";&|)").rsplit("/", 1)[-1] == DISCOVERY_SCRIPT:
            return True
    return False


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
