"""InformerFactory: one SharedInformer per (resource, namespace, label selector), started and
waited for together (client-go SharedInformerFactory)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from client.resources import Resource
from client.rest import RestClient
from informers.informer import SharedInformer


class InformerFactory:
    def __init__(self, client: RestClient, namespace: str = "", resync_period: float = 0) -> None:
        self.client, self.namespace, self.resync_period = client, namespace, resync_period
        self._informers: dict[tuple[Resource, str, str], SharedInformer] = {}
        self._lock = threading.Lock()
        self._started = False

    def informer_for(self, resource: Resource, label_selector: str = "",
                     transform: Callable[[dict], dict] | None = None,
                     resync_period: float | None = None) -> SharedInformer:
        """The shared informer of this resource (and selector); created on first use. The
        transform and resync_period (default: the factory's) of the first caller are the ones used."""
        key = (resource, self.namespace, label_selector)
        with self._lock:
            inf = self._informers.get(key)
            if inf is None:
                name = resource.plural if not label_selector else f"{resource.plural}[{label_selector}]"
                inf = SharedInformer(self.client, resource, namespace=self.namespace,
                                     label_selector=label_selector,
                                     resync_period=self.resync_period if resync_period is None else resync_period,
                                     transform=transform, name=name)
                inf.reflector.on_reconnect = self._reconnected
                self._informers[key] = inf
                if self._started:
                    inf.start()
            return inf

    def start(self) -> None:
        """Starts every informer made so far (and those made later, as they are made)."""
        with self._lock:
            self._started = True
            informers = list(self._informers.values())
        for inf in informers:
            inf.start()

    def wait_for_cache_sync(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(inf.wait_for_sync(max(0.0, deadline - time.monotonic())) for inf in self.informers())

    def stop(self) -> None:
        for inf in self.informers():
            inf.stop()

    def _reconnected(self) -> None:
        """One informer reached the API server again: the others need not sleep off their backoff."""
        for inf in self.informers():
            inf.reflector.retry_now()

    def informers(self) -> list[SharedInformer]:
        with self._lock:
            return list(self._informers.values())
