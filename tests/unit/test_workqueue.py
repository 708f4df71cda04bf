"""Ports of client-go util/workqueue queue_test.go, delaying_queue_test.go and
rate_limiting_queue_test.go, plus concurrency tests of the one-key-one-worker and no-lost-add rules."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from prometheus_client import REGISTRY

from controller.workqueue import (
    ItemExponentialFailureRateLimiter,
    RateLimitingQueue,
)

_n = iter(range(1_000_000))


@pytest.fixture
def q():
    queue = RateLimitingQueue(f"test-{next(_n)}", ItemExponentialFailureRateLimiter(0.001, 1.0))
    yield queue
    queue.shutdown()


def wait_for(cond, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


# -- queue_test.go ---------------------------------------------------------------------------------
def test_basic(q):
    producers, consumers, per_producer = 50, 10, 50
    got: list[int] = []
    lock = threading.Lock()

    def produce():
        for i in range(per_producer):
            q.add(i)

    def consume():
        while True:
            item, shutdown = q.get()
            if shutdown:
                return
            with lock:
                got.append(item)
            q.done(item)

    ps = [threading.Thread(target=produce) for _ in range(producers)]
    cs = [threading.Thread(target=consume) for _ in range(consumers)]
    for t in ps + cs:
        t.start()
    for t in ps:
        t.join()
    q.shutdown()
    for t in cs:
        t.join(5)
        assert not t.is_alive()
    assert set(got) == set(range(per_producer))  # every item processed, duplicates collapsed
    assert len(q) == 0
    item, shutdown = q.get()
    assert item is None and shutdown


def test_add_while_processing(q):
    producers, consumers = 50, 10
    counters: Counter = Counter()
    lock = threading.Lock()

    def produce(i):
        q.add(i)

    def consume():
        while True:
            item, shutdown = q.get()
            if shutdown:
                return
            with lock:
                counters[item] += 1
                first = counters[item] == 1
            if first:
                q.add(item)  # re-add while processing: must come back once done
            q.done(item)

    cs = [threading.Thread(target=consume) for _ in range(consumers)]
    for t in cs:
        t.start()
    for i in range(producers):
        produce(i)
    assert wait_for(lambda: sum(counters.values()) >= 2 * producers)
    q.shutdown()
    for t in cs:
        t.join(5)
    assert all(counters[i] == 2 for i in range(producers))


@pytest.mark.parametrize(
    ("adds", "want_len"),
    [(["foo"], 1), (["foo", "bar"], 2), (["foo", "bar", "foo"], 2), (["foo", "foo", "foo"], 1), ([], 0)],
)
def test_len(q, adds, want_len):
    for a in adds:
        q.add(a)
    assert len(q) == want_len


def test_reinsert(q):
    q.add("foo")
    item, _ = q.get()
    assert item == "foo"
    q.add(item)  # while processing: dirty, not queued
    assert len(q) == 0
    q.done(item)
    assert len(q) == 1
    item, shutdown = q.get()
    assert item == "foo" and not shutdown
    q.done(item)
    assert len(q) == 0


def test_collapse(q):
    q.add("bar")
    q.add("bar")
    assert len(q) == 1
    item, _ = q.get()
    assert item == "bar"
    q.done(item)
    assert len(q) == 0


def test_collapse_while_processing(q):
    q.add("foo")
    item, _ = q.get()
    q.add("foo")
    q.add("foo")
    assert len(q) == 0
    q.done(item)
    assert len(q) == 1
    item, _ = q.get()
    q.done(item)
    assert len(q) == 0


def test_fifo_order(q):
    for i in range(10):
        q.add(i)
    assert [q.get()[0] for _ in range(10)] == list(range(10))


def test_get_timeout(q):
    t0 = time.monotonic()
    assert q.get(timeout=0.02) == (None, False)
    assert time.monotonic() - t0 >= 0.015


def test_queue_drainage_using_shutdown_with_drain(q):
    q.add(1)
    q.add(2)
    i1, _ = q.get()
    i2, _ = q.get()
    finished = threading.Event()

    def drain():
        q.shutdown_with_drain()
        finished.set()

    threading.Thread(target=drain, daemon=True).start()
    assert wait_for(q.shutting_down)
    assert not finished.wait(0.05)  # still processing two items
    q.done(i1)
    assert not finished.wait(0.05)
    q.done(i2)
    assert finished.wait(2)


@pytest.mark.exclusive  # 0.05 s told from 0.5 s by the clock: alone (make test's second phase)
def test_no_queue_drainage_using_shutdown(q):
    q.add(1)
    q.get()
    t0 = time.monotonic()
    q.shutdown()  # does not wait for the item in flight
    assert time.monotonic() - t0 < 0.5
    assert q.shutting_down()


def test_force_queue_shutdown_using_shutdown(q):
    got = []

    def consume():
        got.append(q.get())

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.02)
    q.shutdown()
    t.join(2)
    assert got == [(None, True)]


def test_queue_drainage_with_dirty_item(q):
    q.add(1)
    item, _ = q.get()
    q.add(item)  # dirty while processing
    finished = threading.Event()
    threading.Thread(target=lambda: (q.shutdown_with_drain(), finished.set()), daemon=True).start()
    assert wait_for(q.shutting_down)
    assert not finished.wait(0.05)
    q.done(item)  # requeued: the add before shutdown is not lost
    item, shutdown = q.get()
    assert item == 1 and not shutdown
    q.done(item)
    assert finished.wait(2)
    assert q.get() == (None, True)


def test_add_after_shutdown_is_ignored(q):
    q.shutdown()
    q.add("x")
    q.add_after("y", 0.001)
    q.add_rate_limited("z")
    assert len(q) == 0
    assert q.get() == (None, True)


def test_queued_items_still_handed_out_after_shutdown(q):
    q.add("a")
    q.add("b")
    q.shutdown()
    assert q.get() == ("a", False)
    assert q.get() == ("b", False)
    assert q.get() == (None, True)


# -- delaying_queue_test.go ------------------------------------------------------------------------
def test_simple_delaying_queue(q):
    q.add_after("foo", 0.05)
    assert len(q) == 0
    assert q.waiting_len() == 1
    assert wait_for(lambda: len(q) == 1)
    item, _ = q.get()
    assert item == "foo"
    q.done(item)
    assert q.waiting_len() == 0


def test_add_after_zero_is_immediate(q):
    q.add_after("now", 0)
    assert len(q) == 1


@pytest.mark.exclusive  # 0.05 s told from 0.5 s by the clock: alone (make test's second phase)
def test_deduping_earlier_wins(q):
    # a later add_after does not push the item back
    t0 = time.monotonic()
    q.add_after("foo", 0.05)
    q.add_after("foo", 0.5)
    assert q.waiting_len() == 1
    assert wait_for(lambda: len(q) == 1)
    assert time.monotonic() - t0 < 0.4
    q.get()
    q.done("foo")
    # an earlier add_after moves it forward
    t0 = time.monotonic()
    q.add_after("foo", 0.5)
    q.add_after("foo", 0.05)
    assert q.waiting_len() == 1
    assert wait_for(lambda: len(q) == 1)
    assert time.monotonic() - t0 < 0.4
    time.sleep(0.5)
    assert len(q) == 1  # the superseded entry does not fire a second time... and collapses anyway
    assert q.waiting_len() == 0


def test_add_two_fire_early(q):
    q.add_after("foo", 0.5)
    q.add_after("bar", 0.05)
    assert wait_for(lambda: len(q) == 1)
    assert q.get()[0] == "bar"
    q.add_after("foo", 0.02)  # moves foo forward
    assert wait_for(lambda: len(q) == 1, timeout=0.3)
    assert q.get()[0] == "foo"


def test_copy_shifting(q):
    q.add_after("first", 0.15)
    q.add_after("second", 0.10)
    q.add_after("third", 0.05)
    assert len(q) == 0
    assert wait_for(lambda: len(q) == 3)
    assert [q.get()[0] for _ in range(3)] == ["third", "second", "first"]


# -- rate_limiting_queue_test.go -------------------------------------------------------------------
def test_rate_limiting_queue(q):
    q.add_rate_limited("one")
    assert q.waiting_len() == 1
    q.add_rate_limited("one")
    assert q.waiting_len() == 1  # earlier entry kept
    assert q.num_requeues("one") == 2
    q.add_rate_limited("two")
    assert q.waiting_len() == 2
    assert q.num_requeues("two") == 1
    q.forget("one")
    assert q.num_requeues("one") == 0
    q.add_rate_limited("one")
    assert q.num_requeues("one") == 1
    assert wait_for(lambda: len(q) == 2)


# -- metrics ---------------------------------------------------------------------------------------
def test_metrics_use_client_go_names(q):
    q.add("a")
    item, _ = q.get()
    q.done(item)
    q.add_after("b", 0)
    labels = {"name": q.name}
    assert REGISTRY.get_sample_value("workqueue_adds_total", labels) == 2
    assert REGISTRY.get_sample_value("workqueue_depth", labels) == 1
    assert REGISTRY.get_sample_value("workqueue_retries_total", labels) == 1
    assert REGISTRY.get_sample_value("workqueue_queue_duration_seconds_count", labels) == 1
    assert REGISTRY.get_sample_value("workqueue_work_duration_seconds_count", labels) == 1
    assert REGISTRY.get_sample_value("workqueue_unfinished_work_seconds", labels) == 0
    item, _ = q.get()
    time.sleep(0.01)
    assert REGISTRY.get_sample_value("workqueue_longest_running_processor_seconds", labels) >= 0.01
    assert REGISTRY.get_sample_value("workqueue_unfinished_work_seconds", labels) >= 0.01
    q.done(item)


# -- concurrency -----------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [8])
def test_one_key_one_worker_and_no_lost_add(workers):
    """Producers bump a per-key version and then add the key; a worker records the version it saw
    when it got the key. At the end every key was last processed at its final version (no add was
    lost), and no key was ever in two workers' hands at once."""
    q = RateLimitingQueue(f"concurrency-{next(_n)}")
    keys = [f"k{i}" for i in range(64)]
    version: Counter = Counter()
    seen: dict[str, int] = {}
    active: set[str] = set()
    lock = threading.Lock()
    violations: list[str] = []
    processed = Counter()
    adds_per_producer, producers = 2000, 4

    def produce(seed):
        rnd = random.Random(seed)
        for _ in range(adds_per_producer):
            k = rnd.choice(keys)
            with lock:
                version[k] += 1
            q.add(k)

    def work():
        while True:
            k, shutdown = q.get()
            if shutdown:
                return
            with lock:
                if k in active:
                    violations.append(k)
                active.add(k)
                seen[k] = version[k]
                processed[k] += 1
            if random.random() < 0.1:
                time.sleep(0.0005)
            with lock:
                active.discard(k)
            q.done(k)

    ws = [threading.Thread(target=work) for _ in range(workers)]
    ps = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for t in ws + ps:
        t.start()
    for t in ps:
        t.join()
    q.shutdown_with_drain()
    for t in ws:
        t.join(10)
        assert not t.is_alive()
    assert violations == []
    assert sum(version.values()) == adds_per_producer * producers
    for k in version:
        assert seen.get(k) == version[k], k
    # duplicates collapsed: far fewer processings than adds is allowed, never more
    assert sum(processed.values()) <= adds_per_producer * producers


def test_concurrent_add_after_and_rate_limited():
    q = RateLimitingQueue(f"concurrency-delay-{next(_n)}", ItemExponentialFailureRateLimiter(0.0005, 0.005))
    keys = [f"k{i}" for i in range(20)]
    got: Counter = Counter()
    lock = threading.Lock()

    def produce(seed):
        rnd = random.Random(seed)
        for i in range(500):
            k = rnd.choice(keys)
            if i % 2:
                q.add_after(k, rnd.random() * 0.01)
            else:
                q.add_rate_limited(k)

    def work():
        while True:
            k, shutdown = q.get(timeout=0.5)
            if shutdown or k is None:
                return
            with lock:
                got[k] += 1
            q.forget(k)
            q.done(k)

    ws = [threading.Thread(target=work) for _ in range(8)]
    ps = [threading.Thread(target=produce, args=(i,)) for i in range(8)]
    for t in ws + ps:
        t.start()
    for t in ps:
        t.join()
    assert wait_for(lambda: q.waiting_len() == 0 and len(q) == 0, timeout=5)
    for t in ws:
        t.join(5)
    q.shutdown()
    assert set(got) == set(keys)


class _CountingCondition(threading.Condition):
    """A Condition that counts the waits that returned: each is a thread woken up."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.wakeups = 0

    def wait(self, timeout=None):
        woken = super().wait(timeout)
        self.wakeups += 1  # under the lock again
        return woken


def test_idle_workers_stay_asleep_when_the_queue_goes_idle(q):
    """done() on the last item in flight wakes nobody (unless a drain waits for it), and one add
    wakes one worker: on a burst, each idle queue woke every worker blocked in get() for nothing."""
    q._cond = cond = _CountingCondition()
    q.add("a")
    item, _ = q.get()
    got = []
    workers = [threading.Thread(target=lambda: got.append(q.get()), daemon=True) for _ in range(4)]
    for t in workers:
        t.start()
    assert wait_for(lambda: len(cond._waiters) == 4)
    q.done(item)
    time.sleep(0.05)
    assert cond.wakeups == 0
    q.add("b")
    assert wait_for(lambda: got == [("b", False)])
    time.sleep(0.05)
    assert cond.wakeups == 1
