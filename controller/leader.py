"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's timings and rules.

The candidate that holds an unexpired Lease renews it every `retry_period`; others take it over
only after they have seen the same holder record unchanged for `lease_duration` on their own
monotonic clock (clocks of different machines are never compared). A leader that cannot renew
within `renew_deadline` stops leading at once: `is_leader()` turns false before the Lease can be
taken by anyone else (renew_deadline < lease_duration), and the executor checks it before every
write, once the client's throttle let the write go. The elector talks through a client of its own
(RestClient.with_own_limiter), so reconciles that use up the controller's token bucket never delay
a renewal (docs/architecture.md section 3.2).

A lapse is final, as in client-go (its renew loop gives up at the renew deadline, OnStoppedLeading
runs, and the controller managers exit): once the renew deadline passed, a renewal that lands later
does not make this replica lead again; `run` ends and calls `on_stopped`, and the process exits
(controller/__main__.py). So a write refused during the lapse (its reconcile dropped) is never
lost: the next leader, this process restarted or the standby, queues every cached MPIJob. Each
renewal request is given only the time left before the deadline, so a lapse is acted on at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from client.errors import ApiError
from client.resources import LEASES
from client.rest import RestClient
from controller import logs, metrics

log = logs.get("leader")


def _micro_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: RestClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert renew_deadline < lease_duration
        self.client, self.namespace, self.name, self.identity = client, namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._clock = clock
        self._observed_record: dict | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # monotonic time of our last successful renew
        self._lapsed = False  # the renew deadline passed while leading: final
        self._lock = threading.Lock()

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading()

    def _leading(self) -> bool:
        """Under the lock. Leading, unless the renew deadline passed since the last renewal: then
        the lapse is recorded for good (a renewal that lands later changes nothing)."""
        if self._renewed_at is None or self._lapsed:
            return False
        if self._clock() - self._renewed_at >= self.renew_deadline:
            self._lapsed = True
            return False
        return True

    def _timeout(self) -> float:
        """A request's timeout: the renew deadline; while leading, only the time left before it
        (client-go bounds the whole renewal by the deadline). 0: no time left, nothing to send."""
        with self._lock:
            if self._renewed_at is None:
                return self.renew_deadline
            if not self._leading():
                return 0.0
            return self._renewed_at + self.renew_deadline - self._clock()

    def run(self, on_started: Callable[[], None], on_stopped: Callable[[], None], stop: threading.Event,
            before_release: Callable[[], bool] | None = None) -> None:
        """Blocks: campaigns until elected, calls on_started, renews until lost, calls on_stopped.
        On a clean stop, `before_release` stops the work (the workers) first; the Lease is given up
        only once it returns True (nothing of ours in flight), else left to expire: a write still
        in flight must not land after the standby took over."""
        while not stop.is_set() and not self._try_acquire_or_renew():
            stop.wait(self.retry_period)
        if stop.is_set():
            return
        log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        metrics.is_leader.set(1)
        threading.Thread(target=on_started, name="leading", daemon=True).start()
        while not stop.is_set():
            stop.wait(self.retry_period)
            if stop.is_set():
                break
            if self._try_acquire_or_renew():
                continue
            if not self.is_leader():
                break
        lost = not stop.is_set()
        with self._lock:
            self._renewed_at = None
        metrics.is_leader.set(0)
        if lost:
            log.error("lost the leader Lease; stopping", lease=f"{self.namespace}/{self.name}")
        elif before_release is None or before_release():
            self._release()
        else:
            log.warning("work still in flight: the Lease is left to expire, not released")
        on_stopped()

    def _path(self, name: str | None = None) -> str:
        return LEASES.path(self.namespace, name)

    def _record(self, now: datetime, acquire_time: str, transitions: int) -> dict:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire_time,
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        timeout = self._timeout()
        if timeout <= 0:
            return False  # lapsed: final
        try:
            lease = self.client.request("GET", self._path(self.name), timeout=timeout)
        except ApiError as e:
            if e.status != 404:
                log.warning("reading the Lease failed", error=str(e))
                return False
            body = {
                "apiVersion": LEASES.api_version,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._record(now, _micro_time(now), 0),
            }
            return self._write("POST", self._path(), body)
        except Exception as e:  # connection trouble: try again next period
            log.warning("reading the Lease failed", error=str(e))
            return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = {k: spec.get(k) for k in ("holderIdentity", "renewTime", "leaseTransitions")}
        if record != self._observed_record:
            self._observed_record, self._observed_at = record, self._clock()
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and self._clock() - self._observed_at < duration:
            return False  # someone else holds an unexpired Lease
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquire = spec.get("acquireTime") or _micro_time(now)
        else:
            acquire, transitions = _micro_time(now), transitions + 1
        lease["spec"] = self._record(now, acquire, transitions)
        return self._write("PUT", self._path(self.name), lease)  # resourceVersion makes it atomic

    def _write(self, method: str, path: str, body: dict) -> bool:
        started = self._clock()  # the Lease counts from when the write was sent, not answered
        timeout = self._timeout()
        if timeout <= 0:
            return False
        try:
            self.client.request(method, path, body=body, timeout=timeout)
        except ApiError as e:
            if e.status not in (409, 422):
                log.warning("writing the Lease failed", error=str(e))
            return False
        except Exception as e:
            log.warning("writing the Lease failed", error=str(e))
            return False
        with self._lock:
            if self._renewed_at is not None and not self._leading():
                return False  # answered past the renew deadline: the lapse stands, as in client-go
            self._renewed_at = started
        return True

    def _release(self) -> None:
        """On a clean shutdown give the Lease up, so the standby takes over at once."""
        try:
            lease = self.client.request("GET", self._path(self.name), timeout=5)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            self.client.request("PUT", self._path(self.name), body=lease, timeout=5)
            log.info("released the leader Lease")
        except Exception as e:
            log.warning("releasing the Lease failed", error=str(e))
