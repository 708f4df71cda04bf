"""SharedInformer (client-go tools/cache/shared_informer.go): a Reflector feeding an indexed Store
and a list of event handlers.

Threads: the reflector's (list/watch) applies each event to the Store, then calls the handlers in
registration order, under the dispatch lock. So a handler sees a Store at least as new as its
event, events reach the handlers in the order the server sent them, and a handler's exception is
logged and forgotten. Handlers must be quick (this operator's put a key on the work queue): a slow
one holds up the watch. client-go hands each delta to another goroutine; in Python that hand-off
(a queue put, waking another thread, the GIL passed over) was 12 % of the operator's CPU at
100 MPIJobs x 8 workers (docs/architecture.md section 7.1), so there is no dispatch thread. The
resync thread, and a handler added after start, take the same lock.

After a relist the reflector thread compares the list with the Store: new keys are adds, known keys
updates, and keys that vanished are deleted with a DeletedFinalStateUnknown tombstone carrying the
last known object. A periodic resync re-delivers every cached object as on_update(obj, obj).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from client.resources import Resource
from client.rest import RestClient
from informers import metrics
from informers.reflector import Reflector
from informers.store import (
    CONTROLLER_UID_INDEX,
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    IndexFunc,
    Store,
    controller_uid_index,
    meta_namespace_key,
    namespace_index,
)

log = logging.getLogger("informers.informer")


@dataclass
class EventHandler:
    on_add: Callable[[dict], None] | None = None
    on_update: Callable[[dict, dict], None] | None = None
    on_delete: Callable[[dict | DeletedFinalStateUnknown], None] | None = None


class SharedInformer:
    def __init__(
        self,
        client: RestClient,
        resource: Resource,
        namespace: str = "",
        label_selector: str = "",
        resync_period: float = 0,
        transform: Callable[[dict], dict] | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        name: str | None = None,
    ) -> None:
        self.client, self.resource = client, resource
        self.namespace, self.label_selector = namespace, label_selector
        self.resync_period = resync_period
        self.name = name or resource.plural
        self.store = Store({NAMESPACE_INDEX: namespace_index, CONTROLLER_UID_INDEX: controller_uid_index,
                            **(indexers or {})})
        self.handlers: list[EventHandler] = []
        self.reflector = Reflector(
            client, resource, self._on_list, self._on_event, namespace=namespace,
            label_selector=label_selector, transform=transform, name=self.name,
        )
        # Held while the Store changes and the handlers run: orders the reflector's events, a
        # resync and the replay of a late handler.
        self._dispatch = threading.Lock()
        self._synced = threading.Event()
        self._started = False
        self._stopped = False
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.dispatched = 0  # events and lists applied, for tests and benchmarks
        metrics.store_objects.labels(self.name).set_function(lambda: len(self.store))

    # -- public API --------------------------------------------------------------------------------
    def add_event_handler(
        self,
        on_add: Callable[[dict], None] | None = None,
        on_update: Callable[[dict, dict], None] | None = None,
        on_delete: Callable[[dict | DeletedFinalStateUnknown], None] | None = None,
    ) -> EventHandler:
        """Registers handlers. Added after start(), the handler first gets an on_add for every
        cached object (on the calling thread, in order with the other events)."""
        h = EventHandler(on_add, on_update, on_delete)
        with self._lock:
            if not self._started:
                self.handlers.append(h)
                return h
        with self._dispatch:
            self.handlers.append(h)
            for obj in self.store.list():
                self._call(h.on_add, obj)
        return h

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        self.store.add_indexers(indexers)

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        t = threading.Thread(target=self.reflector.run, name=f"informer-{self.name}-reflector", daemon=True)
        t.start()
        self._threads.append(t)
        if self.resync_period > 0:
            t = threading.Thread(target=self._resync_loop, name=f"informer-{self.name}-resync", daemon=True)
            t.start()
            self._threads.append(t)

    run = start

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self.reflector.stop()

    def dead(self) -> bool:
        """Stopped, or started and one of its threads (list/watch, resync) gone: its cache
        no longer follows the API server (for /healthz). Not yet started is not dead."""
        return self._stopped or (self._started and not all(t.is_alive() for t in self._threads))

    def stale_for(self, now: float | None = None) -> float:
        """Seconds its cache has not followed the API server (Reflector.stale_for): 0 before start
        and after stop (dead() says so), for /healthz."""
        with self._lock:
            running = self._started and not self._stopped
        return self.reflector.stale_for(now) if running else 0.0

    def has_synced(self) -> bool:
        """True once the first list is in the Store and its events went to the handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def last_sync_resource_version(self) -> str:
        return self.reflector.last_resource_version

    def get(self, key: str) -> dict | None:
        return self.store.get(key)

    # -- reflector callbacks (reflector thread) ----------------------------------------------------
    def _on_list(self, items: list[dict], rv: str, initial: bool) -> None:
        with self._dispatch:
            self._guarded(self._apply_list, items, initial)

    def _on_event(self, typ: str, obj: dict) -> None:
        with self._dispatch:
            self._guarded(self._apply_event, typ, obj)

    def _guarded(self, apply: Callable, *args: object) -> None:
        """One delta applied; what it raises (a bug: handlers are guarded one by one) is logged, so
        that the watch goes on."""
        try:
            apply(*args)
        except Exception:
            log.exception("%s: dispatch failed", self.name)
        self.dispatched += 1

    # -- resync thread -----------------------------------------------------------------------------
    def _resync_loop(self) -> None:
        while not self.reflector.stopped():
            time.sleep(self.resync_period)
            if self._synced.is_set() and not self.reflector.stopped():
                with self._dispatch:
                    for obj in self.store.list():
                        self._notify_update(obj, obj)

    def _call(self, fn: Callable | None, *args: object) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception:
            log.exception("%s: event handler %s raised", self.name, getattr(fn, "__qualname__", fn))

    def _notify_add(self, obj: dict) -> None:
        for h in self.handlers:
            self._call(h.on_add, obj)

    def _notify_update(self, old: dict, new: dict) -> None:
        for h in self.handlers:
            self._call(h.on_update, old, new)

    def _notify_delete(self, obj: dict | DeletedFinalStateUnknown) -> None:
        for h in self.handlers:
            self._call(h.on_delete, obj)

    def _apply_event(self, typ: str, obj: dict) -> None:
        if typ == "DELETED":
            self.store.delete(obj)
            self._notify_delete(obj)
            return
        old = self.store.add(obj)
        if old is None:
            self._notify_add(obj)
        else:
            self._notify_update(old, obj)

    def _apply_list(self, items: list[dict], initial: bool) -> None:
        listed: dict[str, dict] = {}
        for obj in items:
            listed[meta_namespace_key(obj)] = obj
        vanished = [(k, o) for k in self.store.list_keys() if k not in listed and (o := self.store.get(k))]
        changes: list[tuple[dict | None, dict]] = [(self.store.get(k), o) for k, o in listed.items()]
        self.store.replace(list(listed.values()))
        for key, old in vanished:
            self._notify_delete(DeletedFinalStateUnknown(key, old))
        for old, new in changes:
            if old is None:
                self._notify_add(new)
            else:
                self._notify_update(old, new)
        if not self._synced.is_set():
            self._synced.set()
