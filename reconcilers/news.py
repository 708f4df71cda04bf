"""Which watch events are news for an MPIJob's plan, and which only repeat what its last pass knew
(docs/architecture.md section 3.1). A pass that finds nothing to do costs the operator about a
millisecond; in a burst, most such passes came from these kinds of event:

- `status_echo`: the MPIJob's own status coming back as the operator wrote it. The pass that wrote
  it planned from everything else the caches show, and anything that changed since has an event of
  its own.
- `counts_only`: a Job or StatefulSet controller counting pods of an MPIJob that is already
  Running. The plan reads none of those counts but `ready` (`readyReplicas`), and only as a floor
  under the Ready pods it counts itself (reconcilers/children.py), whose events reconcile anyway;
  a count that falls is news (a worker lost), one that rises cannot change a Running MPIJob.
  During a bring-up (reconcilers/pace.py) the same holds of a count that cannot make the MPIJob
  Running (reconcilers/children.py): the worker object's Ready count while it stays below the
  workers wanted, and the launcher Job's while it does not move. The pods' own events reconcile
  (0.25 s later, batched); a count that may complete the bring-up stays news, so that Running is
  written as soon as either the count or the pods show it. Counted by trigger at 100 MPIJobs x 2
  workers, one pass per MPIJob (of 3.6) was such an event finding nothing.

- `patch_echo`: a child changed by exactly a merge patch the operator's last pass sent to it (the
  ConfigMap's `discover_hosts.sh`, most often). Its event often comes before the patch's answer, so
  before the resourceVersion the answer carries can be expected (controller/expectations.py `echo`);
  so the patch itself is recorded before the write, like the status for `status_echo`.

Pure: the controller asks, and still enqueues whatever is not shown to be old news.
"""

from __future__ import annotations

from typing import Any

from reconcilers import diff, names, pace, status
from reconcilers.types import Obj

# The status fields each controller keeps counting as pods move, that the plan never reads except
# the Ready count (the second item of each _COUNTS entry): a Job's, then a StatefulSet's.
_JOB_COUNTS = frozenset({"active", "ready", "terminating", "startTime"})
_STS_COUNTS = frozenset({"replicas", "readyReplicas", "availableReplicas", "currentReplicas",
                         "updatedReplicas", "observedGeneration", "currentRevision", "updateRevision"})
_COUNTS = {"Job": (_JOB_COUNTS, "ready"), "StatefulSet": (_STS_COUNTS, "readyReplicas")}


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _but(obj: Obj, *keys: str) -> dict:
    return {k: v for k, v in obj.items() if k not in keys}


def _only_status_moved(old: Obj, new: Obj) -> bool:
    """Nothing but the status (and the resourceVersion) differs from `old` to `new`."""
    return _but(old, "metadata", "status") == _but(new, "metadata", "status") and \
        _but(_dict(old.get("metadata")), "resourceVersion") == _but(_dict(new.get("metadata")), "resourceVersion")


def status_echo(old: Obj, new: Obj, sent: Obj | None) -> bool:
    """The update from `old` to `new` changed the MPIJob's status alone, to exactly `sent` (the
    status the operator's last pass wrote)."""
    return sent is not None and new.get("status") == sent and _only_status_moved(old, new)


def _counted(st: dict) -> dict:
    """`st` without the fields the controllers' first status write sets to their zero, which means
    what their absence means: a Job's empty `uncountedTerminatedPods` (no pod listed), a
    StatefulSet's `collisionCount` 0."""
    uncounted = st.get("uncountedTerminatedPods")
    if isinstance(uncounted, dict) and not any(uncounted.values()):
        st = _but(st, "uncountedTerminatedPods")
    if st.get("collisionCount") == 0 and not isinstance(st.get("collisionCount"), bool):
        st = _but(st, "collisionCount")
    return st


def _ready(st: dict, key: str) -> int:
    v = st.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _workers_wanted(mpijob: Obj) -> int | None:
    """spec.mpiReplicaSpecs.Worker.replicas as stored (any shape the CRD admits): None when it is
    not a count, or not there (a default the plan fills in is not guessed here)."""
    n = _dict(_dict(_dict(mpijob.get("spec")).get("mpiReplicaSpecs")).get("Worker")).get("replicas")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _bring_up_cannot_use(new: Obj, old_ready: int, new_ready: int, mpijob: Obj) -> bool:
    """During a bring-up: the count moved cannot make the MPIJob Running (module docstring)."""
    name = _dict(new.get("metadata")).get("name")
    if name == names.worker_name(mpijob):
        wanted = _workers_wanted(mpijob)
        return wanted is not None and new_ready < wanted
    return name == names.launcher_name(mpijob) and new.get("kind") == "Job" and new_ready == old_ready


def counts_only(old: Obj, new: Obj, mpijob: Obj | None) -> bool:
    """The update from `old` to `new` of a Job or StatefulSet only moved its pod counts, none of
    them down the Ready count, while its MPIJob is Running; or, during a bring-up, only counts that
    cannot make it Running (module docstring)."""
    kind = new.get("kind")
    if kind not in _COUNTS or old.get("kind") != kind or mpijob is None:
        return False
    counts, ready = _COUNTS[kind]
    old_st, new_st = _dict(old.get("status")), _dict(new.get("status"))
    old_ready, new_ready = _ready(old_st, ready), _ready(new_st, ready)
    if new_ready < old_ready:
        return False
    if not (_but(_counted(old_st), *counts) == _but(_counted(new_st), *counts) and _only_status_moved(old, new)):
        return False
    if status.is_true(mpijob.get("status"), status.RUNNING):
        return True
    return pace.bringing_up(mpijob) and _bring_up_cannot_use(new, old_ready, new_ready, mpijob)


# What the API server changes of an object's metadata on any write, that no patch of ours sets.
_SERVER_META = ("resourceVersion", "generation", "managedFields")


def _but_server_meta(obj: Obj) -> dict:
    return {**obj, "metadata": _but(_dict(obj.get("metadata")), *_SERVER_META)}


def patch_echo(old: Obj, new: Obj, patch: Obj | None) -> bool:
    """The update from `old` to `new` is `patch` (a merge patch the operator sent) applied to `old`,
    and nothing else: whatever else moved (a default the server filled in, a status, anyone's
    edit) makes it news."""
    if not isinstance(patch, dict) or not patch:
        return False
    return _but_server_meta(diff.apply_merge_patch(old, patch)) == _but_server_meta(new)
