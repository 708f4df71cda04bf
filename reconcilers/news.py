"""Which watch events are news for an MPIJob's plan, and which only repeat what its last pass knew
(docs/architecture.md section 3.1). A pass that finds nothing to do costs the operator about a
millisecond; of 3.5-4.7 passes per MPIJob in a burst, one or two were such, all from two kinds of
event:

- `status_echo`: the MPIJob's own status coming back as the operator wrote it. The pass that wrote
  it planned from everything else the caches show, and anything that changed since has an event of
  its own.
- `counts_only`: a Job or StatefulSet controller counting pods of an MPIJob that is already
  Running. The plan reads none of those counts but `ready` (`readyReplicas`), and only as a floor
  under the Ready pods it counts itself (reconcilers/children.py), whose events reconcile anyway;
  a count that falls is news (a worker lost), one that rises cannot change a Running MPIJob.

Pure: the controller asks, and still enqueues whatever is not shown to be old news.
"""

from __future__ import annotations

from typing import Any

from reconcilers import status
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


def _ready(st: dict, key: str) -> int:
    v = st.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def counts_only(old: Obj, new: Obj, mpijob: Obj | None) -> bool:
    """The update from `old` to `new` of a Job or StatefulSet only moved its pod counts, none of
    them down the Ready count, while its MPIJob is Running."""
    kind = new.get("kind")
    if kind not in _COUNTS or old.get("kind") != kind or mpijob is None:
        return False
    if not status.is_true(mpijob.get("status"), status.RUNNING):
        return False
    counts, ready = _COUNTS[kind]
    old_st, new_st = _dict(old.get("status")), _dict(new.get("status"))
    if _ready(new_st, ready) < _ready(old_st, ready):
        return False
    return _but(old_st, *counts) == _but(new_st, *counts) and _only_status_moved(old, new)
