"""The Reflector (client-go tools/cache/reflector.go): list, then watch from the last
resourceVersion, and keep doing so.

- The first list asks for resourceVersion=0 (served from the API server's watch cache), paged by
  500; later lists ask for a consistent read (resourceVersion unset).
- The watch sends allowWatchBookmarks and a random timeoutSeconds of 5-10 minutes. When the server
  ends it normally, the reflector watches again from the last resourceVersion, without a list.
- 410 Gone / Expired / "too old resource version" (an HTTP 410, or an ERROR event in the stream)
  makes it relist; the consumer then computes adds, updates and tombstones.
- Connection errors (refused, reset, a read timeout of ~80 s on a dead stream) back off from 0.8 s
  doubling to 30 s with jitter, then watch again from the last resourceVersion. The backoff is
  reset only by a watch that proves good: one that delivers a real event (not an ERROR) or lasts
  MIN_GOOD_WATCH_SECONDS without an error; never by a list, which proves nothing about the watch
  that follows it. A watch that the server (or a proxy) answers and closes at once with no
  event is a failure, as in client-go ("very short watch"): it backs off, growing, instead of
  re-opening in a hot loop. A reflector back online calls
  `on_reconnect`: the factory then wakes its other reflectors still sleeping off connection errors
  (`retry_now`), so that no cache stays behind for a backoff once the network is back.
- Other API errors (403, 500...) back off, then relist. A watch refused at once (RBAC that allows
  list but not watch, a proxy answering 400 or 405), by its HTTP status or by an ERROR event, so
  relists after 0.8 s, 1.6 s, ... up to 30 s, as client-go's reflector does, not every second.
- A Retry-After (429, 5xx) is a floor under the backoff, not a replacement for it: the server's
  ask (client.errors clamps it to at most a minute) is honoured, and a server that asks for 1 s
  every time still sees the delays grow.
- `stale_for(now)`: how long the cache has not been following the API server (no watch open and
  no list since), for /healthz (docs/architecture.md section 3.2).

It talks to its consumer through two callbacks, called on its own thread:
`on_list(items, resource_version, initial)` and `on_event(type, obj)`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from client.errors import CONNECTION_ERRORS, ApiError
from client.resources import Resource
from client.rest import RestClient, WatchStream
from informers import metrics

log = logging.getLogger("informers.reflector")

PAGE_SIZE = 500
READ_TIMEOUT = 80.0  # bookmarks come about once a minute: a silent stream this long is dead
MIN_WATCH_TIMEOUT = 300.0
# A watch that ends sooner than this without one event was not a watch: a failure, backed off.
MIN_GOOD_WATCH_SECONDS = 1.0


class Backoff:
    """Exponential backoff with jitter: initial, doubling, capped at max_delay; jitter adds up to
    `jitter` times the delay (client-go wait.Backoff with Jitter=1.0)."""

    def __init__(self, initial: float = 0.8, max_delay: float = 30.0, factor: float = 2.0,
                 jitter: float = 1.0) -> None:
        self.initial, self.max_delay, self.factor, self.jitter = initial, max_delay, factor, jitter
        self._next = initial

    def next(self) -> float:
        d = self._next
        self._next = min(self._next * self.factor, self.max_delay)
        return min(d + random.random() * self.jitter * d, self.max_delay)

    def reset(self) -> None:
        self._next = self.initial


def is_expired(e: ApiError) -> bool:
    return e.status == 410 or e.reason in ("Expired", "Gone") or "too old resource version" in e.message


class _Expired(Exception):
    pass


class _WatchFailed(Exception):
    """A watch ended with an API error other than Expired: relist after a backoff."""


class _ClosedAtOnce(Exception):
    """The server ended a watch at once without an event: back off (growing), then watch again."""


class _Throttled(Exception):
    """429 or 5xx on starting a watch: back off (Retry-After when given), then watch again."""

    def __init__(self, err: ApiError) -> None:
        super().__init__(str(err))
        self.retry_after = err.retry_after


class Reflector:
    def __init__(
        self,
        client: RestClient,
        resource: Resource,
        on_list: Callable[[list[dict], str, bool], None],
        on_event: Callable[[str, dict], None],
        namespace: str = "",
        label_selector: str = "",
        transform: Callable[[dict], dict] | None = None,
        name: str | None = None,
        read_timeout: float = READ_TIMEOUT,
        backoff: Backoff | None = None,
    ) -> None:
        self.client, self.resource = client, resource
        self.on_list, self.on_event = on_list, on_event
        self.namespace, self.label_selector = namespace, label_selector
        self.transform = transform
        self.name = name or resource.plural
        self.read_timeout = read_timeout
        self.backoff = backoff or Backoff()
        self.last_resource_version = ""
        self.last_rv_time = time.monotonic()
        # When the cache last followed the API server: a list that succeeded, a watch that opened or
        # ended (stale_for). Counted from the start of run(), so a first list that never succeeds shows.
        self._last_ok = time.monotonic()
        self.lists = 0
        self.watches = 0
        self.current_stream: WatchStream | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends a backoff sleep early (retry_now, stop)
        self._offline = False  # the last attempt failed on the connection
        self.on_reconnect: Callable[[], None] | None = None
        self._lock = threading.Lock()
        # informer_events_total's child per event type, looked up once: labels() takes a lock and
        # builds a key on every call, and it ran for every watch event (docs/architecture.md 7.1).
        self._event_counters: dict[str, Any] = {}
        metrics.last_resource_version_age.labels(self.name).set_function(
            lambda: time.monotonic() - self.last_rv_time
        )

    # -- control -----------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.disconnect()

    def retry_now(self) -> None:
        """Another reflector got through to the API server: end a connection-error backoff now."""
        if self._offline:
            self._wake.set()

    def stale_for(self, now: float | None = None) -> float:
        """Seconds the cache has not followed the API server: 0 while a watch is open, else the time
        since the last list that succeeded or watch that was open (for /healthz)."""
        with self._lock:
            if self.current_stream is not None:
                return 0.0
            last = self._last_ok
        return max(0.0, (time.monotonic() if now is None else now) - last)

    def _followed(self) -> None:
        self._last_ok = time.monotonic()

    def _online(self) -> None:
        """The API server answered. The backoff is not reset here: only a watch that proved good
        resets it (_watch), so that a list that succeeds before a watch refused at once does not
        make every relist come 0.8-1.6 s after the last, forever (issue 36)."""
        if self._offline:
            self._offline = False
            if self.on_reconnect is not None:
                self.on_reconnect()

    def stopped(self) -> bool:
        return self._stop.is_set()

    def disconnect(self) -> None:
        """Cuts the current watch connection (as a network failure would)."""
        with self._lock:
            stream = self.current_stream
        if stream is not None:
            stream.shutdown()

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        need_list = True
        self._followed()  # staleness counts from the start, not from the reflector's creation
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                # a normal close: watch again from the last resourceVersion
            except _Expired as e:
                log.info("%s: resourceVersion %s expired (%s); relisting", self.name,
                         self.last_resource_version, e)
                metrics.watch_errors_total.labels(self.name, "expired").inc()
                need_list = True
            except _ClosedAtOnce as e:
                metrics.watch_errors_total.labels(self.name, "closed").inc()
                delay = self.backoff.next()
                log.warning("%s: %s; watching again in %.1fs", self.name, e, delay)
                self._sleep(delay)
            except _Throttled as e:
                metrics.watch_errors_total.labels(self.name, "throttled").inc()
                delay = self._delay(e.retry_after)
                log.warning("%s: watch refused (%s); watching again in %.1fs", self.name, e, delay)
                self._sleep(delay)
            except _WatchFailed as e:
                metrics.watch_errors_total.labels(self.name, "api").inc()
                log.warning("%s: watch failed: %s; relisting after backoff", self.name, e)
                need_list = True
                self._sleep(self.backoff.next())
            except ApiError as e:  # a failed list
                metrics.watch_errors_total.labels(self.name, "list").inc()
                log.warning("%s: list failed: %s", self.name, e)
                self._sleep(self._delay(e.retry_after))
            except CONNECTION_ERRORS as e:
                if self._stop.is_set():
                    break
                metrics.watch_errors_total.labels(self.name, "connection").inc()
                self._offline = True
                delay = self.backoff.next()
                log.warning("%s: connection error (%s: %s); retrying in %.1fs", self.name, type(e).__name__,
                            e, delay)
                self._sleep(delay)
            except Exception:
                if self._stop.is_set():
                    break
                log.exception("%s: unexpected error in list/watch; relisting after backoff", self.name)
                metrics.watch_errors_total.labels(self.name, "unexpected").inc()
                need_list = True
                self._sleep(self.backoff.next())

    def _delay(self, retry_after: float | None) -> float:
        """The next backoff, at least the server's Retry-After (already clamped to (0, 60] s)."""
        return max(retry_after or 0.0, self.backoff.next())

    def _count_event(self, typ: str) -> None:
        counter = self._event_counters.get(typ)
        if counter is None:
            counter = self._event_counters[typ] = metrics.events_total.labels(self.name, typ)
        counter.inc()

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _set_rv(self, rv: str) -> None:
        if rv:
            self.last_resource_version = rv
            self.last_rv_time = time.monotonic()

    def _query(self) -> dict:
        q: dict = {}
        if self.label_selector:
            q["labelSelector"] = self.label_selector
        return q

    def _prepare(self, obj: dict) -> dict:
        if "kind" not in obj:
            obj["kind"] = self.resource.kind
            obj["apiVersion"] = self.resource.api_version
        return self.transform(obj) if self.transform else obj

    def _list(self) -> None:
        initial = self.lists == 0
        path = self.resource.path(self.namespace or None)
        items: list[dict] = []
        rv0 = "0" if initial else ""
        cont = ""
        while True:
            q = self._query()
            q["limit"] = PAGE_SIZE
            if cont:
                q["continue"] = cont
            elif rv0:
                q["resourceVersion"] = rv0
            try:
                page = self.client.request("GET", path, query=q, timeout=60)
            except ApiError as e:
                if cont and is_expired(e):
                    # the continue token expired: start again with a consistent read
                    items, cont, rv0 = [], "", ""
                    continue
                raise
            items.extend(self._prepare(o) for o in page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                rv = meta.get("resourceVersion") or ""
                break
        self.lists += 1
        metrics.list_total.labels(self.name).inc()
        if not initial:
            metrics.relist_total.labels(self.name).inc()
        self.on_list(items, rv, initial)
        self._set_rv(rv)
        self._followed()
        self._online()

    def _watch(self) -> None:
        q = self._query()
        q.update(
            watch=True,
            allowWatchBookmarks=True,
            resourceVersion=self.last_resource_version,
            timeoutSeconds=int(MIN_WATCH_TIMEOUT * (1 + random.random())),
        )
        path = self.resource.path(self.namespace or None)
        self.watches += 1
        metrics.watch_total.labels(self.name).inc()
        try:
            stream = self.client.stream(path, q, timeout=self.read_timeout)
        except ApiError as e:
            if is_expired(e):
                raise _Expired(str(e)) from e
            if e.status == 429 or e.status >= 500:
                raise _Throttled(e) from e
            raise _WatchFailed(str(e)) from e
        with self._lock:
            self.current_stream = stream
        self._followed()
        if self._stop.is_set():
            stream.close()
            return
        # The server answered: the connection is back (wake the other reflectors). The backoff is
        # reset once the watch proves good (a real event, or MIN_GOOD_WATCH_SECONDS without an
        # error), not on opening: a server that closes every watch at once, or refuses it with an
        # ERROR event, would otherwise be asked again in a hot loop.
        self._online()
        opened, events, good, errored = time.monotonic(), 0, False, False
        try:
            for ev in stream:
                if self._stop.is_set():
                    return
                events += 1
                typ = ev.get("type")
                obj = ev.get("object") or {}
                self._count_event(typ or "")
                if typ == "ERROR":
                    errored = True
                    err = ApiError.from_status(obj)
                    if is_expired(err):
                        raise _Expired(str(err))
                    raise _WatchFailed(str(err))
                if typ not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                    log.warning("%s: unknown watch event type %r", self.name, typ)
                    continue
                if not good:
                    good = True
                    self.backoff.reset()  # a real event: the watch works
                rv = (obj.get("metadata") or {}).get("resourceVersion") or ""
                if typ == "BOOKMARK":
                    self._set_rv(rv)
                    continue
                self.on_event(typ, self._prepare(obj))
                self._set_rv(rv)
        finally:
            with self._lock:
                if self.current_stream is stream:
                    self.current_stream = None
            self._followed()
            stream.close()
            if not (good or errored) and time.monotonic() - opened >= MIN_GOOD_WATCH_SECONDS:
                self.backoff.reset()  # a quiet watch that lasted: a cut now starts from the shortest delay
        if not events and not self._stop.is_set() and time.monotonic() - opened < MIN_GOOD_WATCH_SECONDS:
            raise _ClosedAtOnce(f"the server closed the watch after {time.monotonic() - opened:.3f}s without "
                                "an event")
