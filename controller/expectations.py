"""Expectations: the writes of a reconcile that the informer caches have not shown yet.

After the executor creates, patches or deletes an object it records what the cache must show
(the object at the resourceVersion the write returned, or its disappearance). Until every one is
observed, or `ttl` passes, the MPIJob's next reconcile would read a stale cache, so the
controller waits for the informer event instead (which enqueues the MPIJob again). This is what
keeps a stale cache from planning a create twice, or a status transition and its Event twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

ObjKey = tuple[str, str, str]  # (resource plural, namespace, name)


def rv_at_least(seen: str | None, wanted: str) -> bool:
    """resourceVersions are opaque, but etcd's are increasing integers; anything else counts as seen."""
    try:
        return int(seen or 0) >= int(wanted)
    except ValueError:
        return True


@dataclass
class _Pending:
    rv: str | None  # None: waiting for the object to be gone
    uid: str | None
    since: float


class Expectations:
    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl, self._clock = ttl, clock
        self._by_owner: dict[str, dict[ObjKey, _Pending]] = {}
        self._lock = threading.Lock()

    def expect_object(self, owner: str, obj_key: ObjKey, rv: str) -> None:
        self._put(owner, obj_key, _Pending(rv, None, self._clock()))

    def expect_gone(self, owner: str, obj_key: ObjKey, uid: str | None = None) -> None:
        self._put(owner, obj_key, _Pending(None, uid, self._clock()))

    def _put(self, owner: str, obj_key: ObjKey, p: _Pending) -> None:
        with self._lock:
            self._by_owner.setdefault(owner, {})[obj_key] = p

    def observe(self, owner: str, obj_key: ObjKey, obj: dict | None) -> None:
        """The cache now holds `obj` under obj_key (None: deleted)."""
        with self._lock:
            pending = self._by_owner.get(owner)
            p = pending.get(obj_key) if pending else None
            if p is None:
                return
            meta = (obj or {}).get("metadata") or {}
            if p.rv is None:
                done = obj is None or bool(meta.get("deletionTimestamp")) or (p.uid and meta.get("uid") != p.uid)
            else:
                done = obj is not None and rv_at_least(meta.get("resourceVersion"), p.rv)
            if done:
                del pending[obj_key]
                if not pending:
                    del self._by_owner[owner]

    def satisfied(self, owner: str) -> bool:
        with self._lock:
            pending = self._by_owner.get(owner)
            if not pending:
                return True
            if all(self._clock() - p.since > self._ttl for p in pending.values()):
                del self._by_owner[owner]  # the events were lost or coalesced: read the cache anyway
                return True
            return False

    def pending(self, owner: str) -> list[ObjKey]:
        with self._lock:
            return list(self._by_owner.get(owner, {}))

    def forget(self, owner: str) -> None:
        with self._lock:
            self._by_owner.pop(owner, None)
