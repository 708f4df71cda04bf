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
    quiet: bool = False  # its event is no news (echo()): a patch or a status write, not a create


class Expectations:
    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl, self._clock = ttl, clock
        self._by_owner: dict[str, dict[ObjKey, _Pending]] = {}
        # Owners whose reconcile was put off until the cache shows their writes (deferred()): the
        # event that completes them must enqueue them again, even when it is an echo.
        self._deferred: set[str] = set()
        self._lock = threading.Lock()

    def expect_object(self, owner: str, obj_key: ObjKey, rv: str, quiet: bool = False) -> None:
        """`quiet`: the write was a patch (of a child or of the MPIJob's status), whose event only
        shows what the pass that wrote it planned; a create's event is news (the next step of a
        plan may wait for the object, e.g. a gang's PodGroup before its pods)."""
        self._put(owner, obj_key, _Pending(rv, None, self._clock(), quiet))

    def expect_gone(self, owner: str, obj_key: ObjKey, uid: str | None = None) -> None:
        self._put(owner, obj_key, _Pending(None, uid, self._clock()))

    def _put(self, owner: str, obj_key: ObjKey, p: _Pending) -> None:
        with self._lock:
            self._by_owner.setdefault(owner, {})[obj_key] = p

    def observe(self, owner: str, obj_key: ObjKey, obj: dict | None, cache_rv: str | None = None) -> None:
        """The cache now holds `obj` under obj_key (None: deleted, or not seen yet). `cache_rv`: the
        resourceVersion the cache's informer has reached (every event up to it is in the cache). A
        written object the cache no longer holds is observed once the cache is past our write: it was
        deleted after it (someone deleted the ConfigMap we had just patched), and the next pass must
        see it gone now, not after `ttl`. Before our write, its absence is older news (the delete of
        an earlier object of that name, or our create not seen yet)."""
        with self._lock:
            pending = self._by_owner.get(owner)
            p = pending.get(obj_key) if pending else None
            if p is None:
                return
            meta = (obj or {}).get("metadata") or {}
            if p.rv is None:
                done = obj is None or bool(meta.get("deletionTimestamp")) or (p.uid and meta.get("uid") != p.uid)
            elif obj is not None:
                done = rv_at_least(meta.get("resourceVersion"), p.rv)
            else:
                done = bool(cache_rv) and rv_at_least(cache_rv, p.rv)
            if done:
                del pending[obj_key]
                if not pending:
                    del self._by_owner[owner]

    def echo(self, owner: str, obj_key: ObjKey, rv: str | None) -> bool:
        """True when the cache now shows obj_key at exactly the resourceVersion one of our quiet
        writes returned (that write is observed, so it is no longer pending), and no reconcile of
        `owner` waits for it: the event brings nothing but what the pass that wrote it knew."""
        with self._lock:
            pending = self._by_owner.get(owner)
            p = pending.get(obj_key) if pending else None
            if p is None or not p.quiet or p.rv is None or not rv or p.rv != rv:
                return False
            del pending[obj_key]
            if pending:
                return owner not in self._deferred
            del self._by_owner[owner]
            if owner in self._deferred:
                self._deferred.discard(owner)
                return False
            return True

    def is_deferred(self, owner: str) -> bool:
        with self._lock:
            return owner in self._deferred

    def deferred(self, owner: str) -> None:
        """A reconcile of `owner` was put off until its writes show (see echo())."""
        with self._lock:
            self._deferred.add(owner)

    def satisfied(self, owner: str) -> bool:
        with self._lock:
            pending = self._by_owner.get(owner)
            if not pending:
                self._deferred.discard(owner)
                return True
            if all(self._clock() - p.since > self._ttl for p in pending.values()):
                del self._by_owner[owner]  # the events were lost or coalesced: read the cache anyway
                self._deferred.discard(owner)
                return True
            return False

    def pending(self, owner: str) -> list[ObjKey]:
        with self._lock:
            return list(self._by_owner.get(owner, {}))

    def forget(self, owner: str) -> None:
        with self._lock:
            self._by_owner.pop(owner, None)
            self._deferred.discard(owner)
