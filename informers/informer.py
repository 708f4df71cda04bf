"""SharedInformer (client-go tools/cache/shared_informer.go): a Reflector feeding an indexed Store
and a list of event handlers.

Threads: the reflector's (list/watch) only decodes and enqueues; one dispatch thread pops the
deltas in order, applies each to the Store, then calls the handlers in registration order. So a
handler sees a Store at least as new as its event, a slow handler never stalls the watch (the
delta queue is unbounded), and a handler's exception is logged and forgotten.

After a relist the dispatch thread compares the list with the Store: new keys are adds, known keys
updates, and keys that vanished are deleted with a DeletedFinalStateUnknown tombstone carrying the
last known object. A periodic resync re-delivers every cached object as on_update(obj, obj).
"""

from __future__ import annotations

import logging
import queue
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


# items of the dispatch queue
_LIST, _EVENT, _REGISTER, _RESYNC, _STOP = range(5)


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
        self._deltas: queue.SimpleQueue = queue.SimpleQueue()
        self._synced = threading.Event()
        self._started = False
        self._stopped = False
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.dispatched = 0  # deltas processed, for tests and benchmarks
        metrics.store_objects.labels(self.name).set_function(lambda: len(self.store))

    # -- public API --------------------------------------------------------------------------------
    def add_event_handler(
        self,
        on_add: Callable[[dict], None] | None = None,
        on_update: Callable[[dict, dict], None] | None = None,
        on_delete: Callable[[dict | DeletedFinalStateUnknown], None] | None = None,
    ) -> EventHandler:
        """Registers handlers. Added after start(), the handler first gets an on_add for every
        cached object (on the dispatch thread, in order with the other events)."""
        h = EventHandler(on_add, on_update, on_delete)
        with self._lock:
            if not self._started:
                self.handlers.append(h)
                return h
        self._deltas.put((_REGISTER, h))
        return h

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        self.store.add_indexers(indexers)

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        for target, what in ((self._dispatch_loop, "dispatch"), (self.reflector.run, "reflector")):
            t = threading.Thread(target=target, name=f"informer-{self.name}-{what}", daemon=True)
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
        self._deltas.put((_STOP, None))

    def dead(self) -> bool:
        """Stopped, or started and one of its threads (list/watch, dispatch, resync) gone: its cache
        no longer follows the API server (for /healthz). Not yet started is not dead."""
        return self._stopped or (self._started and not all(t.is_alive() for t in self._threads))

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

    def pending(self) -> int:
        """Deltas received but not yet dispatched."""
        return self._deltas.qsize()

    # -- reflector callbacks (reflector thread) ----------------------------------------------------
    def _on_list(self, items: list[dict], rv: str, initial: bool) -> None:
        self._deltas.put((_LIST, (items, initial)))

    def _on_event(self, typ: str, obj: dict) -> None:
        self._deltas.put((_EVENT, (typ, obj)))

    # -- dispatch thread ---------------------------------------------------------------------------
    def _resync_loop(self) -> None:
        while not self.reflector.stopped():
            time.sleep(self.resync_period)
            if self._synced.is_set() and not self.reflector.stopped():
                self._deltas.put((_RESYNC, None))

    def _dispatch_loop(self) -> None:
        while True:
            kind, payload = self._deltas.get()
            if kind == _STOP:
                return
            try:
                if kind == _EVENT:
                    self._apply_event(*payload)
                elif kind == _LIST:
                    self._apply_list(*payload)
                elif kind == _REGISTER:
                    self.handlers.append(payload)
                    for obj in self.store.list():
                        self._call(payload.on_add, obj)
                elif kind == _RESYNC:
                    for obj in self.store.list():
                        self._notify_update(obj, obj)
            except Exception:
                log.exception("%s: dispatch failed", self.name)
            self.dispatched += 1

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
