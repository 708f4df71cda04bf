"""What each MPIJob is told of the operator's missing RBAC (docs/operations.md, "Missing RBAC"). Pure.

controller/access.py asks the API server at start-up what the operator may do and sorts what it lacks
(client/permissions.py assess). Without a grant that running any MPIJob needs, every MPIJob is held
before it has a child: Blocked=True (reason RBACMissing) and a Warning Event naming each missing verb
and the manifest that grants it, never a run that a 403 stops halfway. Without a feature's grant, the
feature is off and each MPIJob it would have served says so in its PermissionsMissing condition.
"""

from __future__ import annotations

from reconcilers import discovery, names, status
from reconcilers.draft import Draft
from reconcilers.refusal import BLOCKED
from reconcilers.types import Config, Obj

R_RBAC = "RBACMissing"  # reason of Blocked (held) and of PermissionsMissing (a feature off)
PERMISSIONS_MISSING = "PermissionsMissing"  # condition type: True while a feature this MPIJob uses is off


def off(config: Config, feature: str) -> bool:
    return any(name == feature for name, _ in config.features_off)


def held(draft: Draft, config: Config) -> bool:
    """True (and the MPIJob says why, once) when the operator lacks what running any MPIJob needs."""
    current = status.get_condition(draft.status, BLOCKED)
    if not config.permissions_missing:
        if current is not None and current.get("reason") == R_RBAC:
            status.remove_condition(draft.status, BLOCKED)  # granted since, and the operator restarted
        return False
    msg = f"MPIJob {draft.key} cannot start: {config.permissions_missing}."
    if draft.condition(BLOCKED, "True", R_RBAC, msg):
        draft.event("Warning", R_RBAC, msg)
    return True


def _touches(feature: str, job: Obj) -> bool:
    """The feature would serve this MPIJob (so it is told the feature is off)."""
    spec = job.get("spec") or {}
    if feature == "network-isolation":
        ann = (job.get("metadata") or {}).get("annotations") or {}
        return ann.get(names.NETWORK_ISOLATION_ANNOTATION) != "false"
    if feature == "launcher-log":
        return spec.get("mpiImplementation", "OpenMPI") == "OpenMPI"
    if feature == "elastic-refresh":
        return discovery.is_elastic(job)
    # attempt-record: every MPIJob's launcher pods (reconcilers/failure/hold.py); statefulset-workers:
    # nothing of one MPIJob's to tell
    return feature == "attempt-record"


def features(job: Obj, draft: Draft, config: Config) -> None:
    """PermissionsMissing=True naming each feature off that this MPIJob would use, with a Warning Event
    when that changes; removed once none is."""
    told = [msg for name, msg in config.features_off if _touches(name, job)]
    if not told:
        if status.get_condition(draft.status, PERMISSIONS_MISSING) is not None:
            status.remove_condition(draft.status, PERMISSIONS_MISSING)
        return
    msg = f"MPIJob {draft.key} runs without: " + "; ".join(told) + "; restart the operator once granted."
    if draft.condition(PERMISSIONS_MISSING, "True", R_RBAC, msg):
        draft.event("Warning", R_RBAC, msg)
