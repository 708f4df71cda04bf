"""A rate-limited work queue with the semantics of client-go's util/workqueue.

- Queue: FIFO of keys with a `dirty` set (waiting to be processed) and a `processing` set.
  An item is handed to one get() caller at a time; an add while it is processed marks it dirty
  and it goes back into the queue on done(); adds of a waiting item collapse into one.
- Delaying: add_after() keeps a heap served by one thread; a second add_after for an item that is
  already waiting only moves it earlier, never later.
- Rate limiting: add_rate_limited() asks the RateLimiter how long to wait; forget() resets it.
- Shutdown: shutdown() stops accepting adds and wakes waiters (get() still hands out what is
  queued, then reports shutdown); shutdown_with_drain() also waits until every item handed out
  is done.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from client.ratelimit import TokenBucket

# The buckets client-go uses (ExponentialBuckets(10e-9, 10, 10)).
_BUCKETS = tuple(10e-9 * 10**i for i in range(10))

depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
adds = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name"])
queue_latency = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name"], buckets=_BUCKETS,
)
work_duration = Histogram(
    "workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes",
    ["name"], buckets=_BUCKETS,
)
unfinished_work = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads.",
    ["name"],
)
longest_running = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    ["name"],
)
retries = Counter("workqueue_retries_total", "Total number of retries handled by workqueue", ["name"])


# -- rate limiters ---------------------------------------------------------------------------------
class RateLimiter(Protocol):
    def when(self, item: Hashable) -> float: ...

    def forget(self, item: Hashable) -> None: ...

    def num_requeues(self, item: Hashable) -> int: ...


class _PerItemFailures:
    """Counts failures per item: the bookkeeping shared by the per-item limiters."""

    def __init__(self) -> None:
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def _fail(self, item: Hashable) -> int:
        """Records one more failure; returns how many there were before it."""
        with self._lock:
            n = self._failures.get(item, 0)
            self._failures[item] = n + 1
        return n

    def num_requeues(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)


class ItemExponentialFailureRateLimiter(_PerItemFailures):
    """base * 2^failures per item, capped at max_delay (client-go: 5 ms to 1000 s)."""

    def __init__(self, base: float = 0.005, max_delay: float = 1000.0) -> None:
        super().__init__()
        self.base, self.max_delay = base, max_delay

    def when(self, item: Hashable) -> float:
        exp = self._fail(item)
        try:
            backoff = self.base * math.pow(2, exp)
        except OverflowError:  # client-go guards int64 overflow the same way
            return self.max_delay
        return min(backoff, self.max_delay)


class ItemFastSlowRateLimiter(_PerItemFailures):
    """fast_delay for the first max_fast_attempts failures of an item, then slow_delay."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        super().__init__()
        self.fast_delay, self.slow_delay, self.max_fast_attempts = fast_delay, slow_delay, max_fast_attempts

    def when(self, item: Hashable) -> float:
        n = self._fail(item) + 1
        return self.fast_delay if n <= self.max_fast_attempts else self.slow_delay


class BucketRateLimiter:
    """An overall token bucket: qps tokens a second, burst at most; the delay is the reservation's."""

    def __init__(self, qps: float = 10.0, burst: int = 100) -> None:
        self.bucket = TokenBucket(qps, burst)

    def when(self, item: Hashable) -> float:
        return self.bucket.reserve()

    def num_requeues(self, item: Hashable) -> int:
        return 0

    def forget(self, item: Hashable) -> None:
        pass


class MaxOfRateLimiter:
    """The longest delay of its limiters (each of them is asked, so each records the failure)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(lim.when(item) for lim in self.limiters)

    def when_capped(self, item: Hashable, item_cap: float) -> float:
        """As when(), the per-item delays capped at `item_cap`, an overall bucket's never: a cap on
        how long one item waits must not let many items past the overall rate."""
        return max(lim.when(item) if isinstance(lim, BucketRateLimiter) else min(lim.when(item), item_cap)
                   for lim in self.limiters)

    def num_requeues(self, item: Hashable) -> int:
        return max(lim.num_requeues(item) for lim in self.limiters)

    def forget(self, item: Hashable) -> None:
        for lim in self.limiters:
            lim.forget(item)


def default_controller_rate_limiter(qps: float = 10.0, burst: int = 100) -> MaxOfRateLimiter:
    """client-go DefaultControllerRateLimiter: per-item 5 ms..1000 s, overall qps/burst bucket."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(qps, burst))


# -- the queue -------------------------------------------------------------------------------------
class RateLimitingQueue:
    def __init__(self, name: str, rate_limiter: RateLimiter | None = None) -> None:
        self.name = name
        self.rate_limiter: RateLimiter = rate_limiter or default_controller_rate_limiter()
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._shutting_down = False
        self._drain = False
        # metrics bookkeeping
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}
        self._m_depth = depth.labels(name)
        self._m_adds = adds.labels(name)
        self._m_latency = queue_latency.labels(name)
        self._m_work = work_duration.labels(name)
        self._m_retries = retries.labels(name)
        unfinished_work.labels(name).set_function(self._unfinished_work_seconds)
        longest_running.labels(name).set_function(self._longest_running_seconds)
        # delaying part
        self._delay_cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Hashable]] = []
        self._waiting: dict[Hashable, float] = {}  # item -> ready time of its live heap entry
        self._seq = itertools.count()
        self._delay_thread = threading.Thread(target=self._delay_loop, name=f"workqueue-{name}-delay",
                                              daemon=True)
        self._delay_thread.start()

    # -- basic queue -------------------------------------------------------------------------------
    def add(self, item: Hashable) -> None:
        with self._cond:
            if self._shutting_down:
                return
            if item in self._dirty:
                return
            self._m_adds.inc()
            self._dirty.add(item)
            self._added_at.setdefault(item, time.monotonic())
            if item in self._processing:
                return
            self._queue.append(item)
            self._m_depth.inc()
            self._cond.notify()

    def get(self, timeout: float | None = None) -> tuple[Hashable | None, bool]:
        """(item, False) for the next item; (None, True) once shut down and empty; (None, False)
        if `timeout` passed with nothing to hand out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue and not self._shutting_down:
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None, False
                    self._cond.wait(remaining)
            if not self._queue:
                return None, True
            item = self._queue.popleft()
            self._m_depth.dec()
            now = time.monotonic()
            added = self._added_at.pop(item, None)
            if added is not None:
                self._m_latency.observe(now - added)
            self._started_at[item] = now
            self._processing.add(item)
            self._dirty.discard(item)
            return item, False

    def done(self, item: Hashable) -> None:
        with self._cond:
            started = self._started_at.pop(item, None)
            if started is not None:
                self._m_work.observe(time.monotonic() - started)
            self._processing.discard(item)
            if item in self._dirty:
                self._queue.append(item)
                self._m_depth.inc()
                self._cond.notify()
            elif not self._processing and self._drain:
                # Only a shutdown_with_drain() waits for this. Without it, notify_all would wake every
                # idle worker blocked in get() each time the queue went idle, for nothing: on a burst
                # of 100 MPIJobs x 2 that was 4 % of py-spy's samples (docs/architecture.md 7.1).
                self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def shutdown(self) -> None:
        with self._cond:
            self._drain = False
            self._shutting_down = True
            self._cond.notify_all()
        with self._delay_cond:
            self._delay_cond.notify_all()

    def shutdown_with_drain(self) -> None:
        """Shuts down and waits until every item handed out by get() is done()."""
        with self._cond:
            self._drain = True
            self._shutting_down = True
            self._cond.notify_all()
            while self._processing and self._drain:
                self._cond.wait()
        with self._delay_cond:
            self._delay_cond.notify_all()

    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    # -- delaying ----------------------------------------------------------------------------------
    def add_after(self, item: Hashable, delay: float) -> None:
        if self.shutting_down():
            return
        self._m_retries.inc()
        if delay <= 0:
            self.add(item)
            return
        ready = time.monotonic() + delay
        with self._delay_cond:
            current = self._waiting.get(item)
            if current is not None and current <= ready:
                return  # already due sooner: the earlier time wins
            self._waiting[item] = ready
            heapq.heappush(self._heap, (ready, next(self._seq), item))
            if self._heap[0][2] == item and self._heap[0][0] == ready:
                self._delay_cond.notify()

    def _delay_loop(self) -> None:
        while True:
            due: list[Hashable] = []
            with self._delay_cond:
                if self.shutting_down():
                    return
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    ready, _, item = heapq.heappop(self._heap)
                    if self._waiting.get(item) == ready:  # else a stale entry superseded by an earlier one
                        del self._waiting[item]
                        due.append(item)
                if not due:
                    wait = self._heap[0][0] - now if self._heap else 10.0
                    self._delay_cond.wait(min(wait, 10.0))
            for item in due:
                self.add(item)

    def waiting_len(self) -> int:
        """Items waiting in the delay heap (not yet in the queue)."""
        with self._delay_cond:
            return len(self._waiting)

    # -- rate limiting -----------------------------------------------------------------------------
    def add_rate_limited(self, item: Hashable, item_cap: float | None = None) -> None:
        """Back in after the rate limiter's delay; `item_cap` caps the per-item backoff, never the
        overall bucket (MaxOfRateLimiter.when_capped)."""
        if item_cap is None:
            delay = self.rate_limiter.when(item)
        elif isinstance(self.rate_limiter, MaxOfRateLimiter):
            delay = self.rate_limiter.when_capped(item, item_cap)
        else:
            delay = min(self.rate_limiter.when(item), item_cap)
        self.add_after(item, delay)

    def add_paced(self, item: Hashable) -> None:
        """Back in after the overall bucket's delay only (no per-item backoff, no failure counted):
        for work that is due but not urgent, such as a periodic resync."""
        limiters = self.rate_limiter.limiters if isinstance(self.rate_limiter, MaxOfRateLimiter) else ()
        self.add_after(item, max((lim.when(item) for lim in limiters if isinstance(lim, BucketRateLimiter)),
                                 default=0.0))

    def forget(self, item: Hashable) -> None:
        self.rate_limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.rate_limiter.num_requeues(item)

    # -- metrics -----------------------------------------------------------------------------------
    def _unfinished_work_seconds(self) -> float:
        now = time.monotonic()
        with self._cond:
            return sum(now - t for t in self._started_at.values())

    def longest_running(self) -> tuple[Hashable | None, float]:
        """The item processed for the longest time now, and for how long (None, 0.0 when idle)."""
        now = time.monotonic()
        with self._cond:
            if not self._started_at:
                return None, 0.0
            item, since = min(self._started_at.items(), key=lambda kv: kv[1])
            return item, now - since

    def _longest_running_seconds(self) -> float:
        now = time.monotonic()
        with self._cond:
            return max((now - t for t in self._started_at.values()), default=0.0)
