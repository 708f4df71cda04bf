"""A thread-safe indexed object store (client-go tools/cache thread_safe_store.go + index.go)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

IndexFunc = Callable[[dict], list[str]]

NAMESPACE_INDEX = "namespace"
CONTROLLER_UID_INDEX = "controller-uid"


@dataclass
class DeletedFinalStateUnknown:
    """An object deleted while the watch was down: `obj` is the last state the cache knew."""

    key: str
    obj: dict


def meta_namespace_key(obj: dict | DeletedFinalStateUnknown) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go MetaNamespaceKeyFunc)."""
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    if isinstance(obj, str):
        return obj
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise KeyError("object has no metadata.name")
    ns = meta.get("namespace")
    return f"{ns}/{name}" if ns else name


def split_key(key: str) -> tuple[str, str]:
    """(namespace, name); namespace "" for cluster-scoped keys."""
    parts = key.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise ValueError(f"unexpected key format: {key!r}")


def namespace_index(obj: dict) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def controller_uid_index(obj: dict) -> list[str]:
    """The uid of the owner reference with controller=true, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return [ref["uid"]]
    return []


def label_index(label_key: str) -> IndexFunc:
    """An index on the value of one label."""

    def index(obj: dict) -> list[str]:
        v = ((obj.get("metadata") or {}).get("labels") or {}).get(label_key)
        return [v] if v is not None else []

    index.__name__ = f"label_index[{label_key}]"
    return index


class Store:
    def __init__(self, indexers: dict[str, IndexFunc] | None = None,
                 key_func: Callable[[dict], str] = meta_namespace_key) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, dict] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self.key_func = key_func
        if indexers:
            self.add_indexers(indexers)

    # -- indices -----------------------------------------------------------------------------------
    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Adds indexers; existing objects are indexed at once (client-go refuses after start; we allow).
        Registering the same function under the same name again is a no-op; another one is an error."""
        with self._lock:
            for name, fn in indexers.items():
                if name in self._indexers and self._indexers[name] is not fn:
                    raise ValueError(f"indexer {name!r} already exists")
            for name, fn in indexers.items():
                if name in self._indexers:
                    continue
                self._indexers[name] = fn
                index: dict[str, set[str]] = {}
                self._indices[name] = index
                for key, obj in self._items.items():
                    for v in fn(obj):
                        index.setdefault(v, set()).add(key)

    def _update_indices(self, old: dict | None, new: dict | None, key: str) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            old_values = fn(old) if old is not None else []
            new_values = fn(new) if new is not None else []
            if old_values == new_values:
                continue
            for v in old_values:
                keys = index.get(v)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[v]
            for v in new_values:
                index.setdefault(v, set()).add(key)

    # -- writes ------------------------------------------------------------------------------------
    def add(self, obj: dict) -> dict | None:
        """Adds or replaces; returns the previous object under the key."""
        key = self.key_func(obj)
        with self._lock:
            old = self._items.get(key)
            self._items[key] = obj
            self._update_indices(old, obj, key)
            return old

    update = add

    def delete(self, obj: dict | DeletedFinalStateUnknown | str) -> dict | None:
        """Removes by the object's key; returns what was stored (None if nothing)."""
        key = obj if isinstance(obj, str) else self.key_func(obj)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._update_indices(old, None, key)
            return old

    def replace(self, objs: Iterable[dict]) -> None:
        """Replaces the whole content and rebuilds the indices."""
        items = {self.key_func(o): o for o in objs}
        with self._lock:
            self._items = items
            self._indices = {name: {} for name in self._indexers}
            for key, obj in items.items():
                self._update_indices(None, obj, key)

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._items.get(key)

    def get_by_key(self, key: str) -> dict | None:
        return self.get(key)

    def list(self) -> list[dict]:
        with self._lock:
            return list(self._items.values())

    def list_keys(self) -> list[str]:
        with self._lock:
            return list(self._items.keys())

    def by_index(self, index_name: str, value: str) -> list[dict]:
        with self._lock:
            if index_name not in self._indexers:
                raise KeyError(f"index {index_name!r} does not exist")
            keys = self._indices[index_name].get(value, ())
            return [self._items[k] for k in keys]

    def index_keys(self, index_name: str, value: str) -> list[str]:
        with self._lock:
            if index_name not in self._indexers:
                raise KeyError(f"index {index_name!r} does not exist")
            return list(self._indices[index_name].get(value, ()))

    def list_index_func_values(self, index_name: str) -> list[str]:
        with self._lock:
            return list(self._indices.get(index_name, {}).keys())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items
