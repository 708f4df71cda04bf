"""Issue 36 item 3: a lapse of the leader Lease is final, as in client-go (OnStoppedLeading, exit).

A renewal whose GET is slow straddles the renew deadline: `is_leader()` turns false for a moment,
a worker's write raises NotLeader and its reconcile is dropped. Before the fix the renewal then
succeeded, the process went on leading, and the dropped MPIJob waited for its next event or the
resync (minutes). Now the lapse stands: the late renewal does not restore leadership, `run` ends and
calls `on_stopped` (the process exits, controller/__main__.py), and the next leader queues every
MPIJob. The clock is the test's: the renew deadline passes when the test says so.
"""

from __future__ import annotations

import threading
import time

from client.errors import ApiError
from controller.leader import LeaderElector


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class LeaseApi:
    """The Lease as the API server keeps it; `on_get(n)` / `on_write(n)` run inside the n-th GET /
    write (a slow one)."""

    def __init__(self, on_get=None, on_write=None) -> None:
        self.lease: dict | None = None
        self.gets, self.writes, self.timeouts = 0, 0, []
        self.on_get, self.on_write = on_get, on_write

    def request(self, method, path, *, body=None, timeout=30, **kw):
        self.timeouts.append((method, timeout))
        if method == "GET":
            self.gets += 1
            if self.on_get is not None:
                self.on_get(self.gets)
            if self.lease is None:
                raise ApiError(404, "NotFound", "leases not found")
            return dict(self.lease, spec=dict(self.lease["spec"]))
        self.writes += 1
        self.lease = body
        if self.on_write is not None:
            self.on_write(self.writes)
        return body


def elector(api: LeaseApi, clock: Clock) -> LeaderElector:
    return LeaderElector(api, "ns", "lock", "me", lease_duration=15.0, renew_deadline=10.0, retry_period=0.001,
                         clock=clock)


def run(el: LeaderElector, timeout: float = 5.0) -> tuple[list[str], threading.Event]:
    """`el.run` on a thread; the calls it made, once it returned or `timeout` passed (then stopped)."""
    calls: list[str] = []
    stop = threading.Event()
    t = threading.Thread(target=el.run, args=(lambda: calls.append("started"), lambda: calls.append("stopped"), stop),
                         daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        calls.append("still leading")
        stop.set()
        t.join(5)
    return calls, stop


def test_not_leader_a_lapse_is_final_even_if_the_renewal_then_succeeds():
    clock = Clock()
    seen: list[bool] = []
    el: LeaderElector

    def slow_write(n: int) -> None:
        if n == 2:  # the first renewal: so slow that the renew deadline passes before its answer
            clock.t += 10.5
            seen.append(el.is_leader())  # a worker's write at that moment: NotLeader, key dropped

    api = LeaseApi(on_write=slow_write)
    el = elector(api, clock)
    calls, _ = run(el)
    assert seen == [False]
    assert not el.is_leader()  # the renewal did land on the server, but the lapse stands...
    assert calls == ["started", "stopped"]  # ...run ended by itself: on_stopped exits the process
    assert api.writes == 2  # (before: it went on leading, renewing, thousands of times in 5 s)


def test_not_leader_a_lapse_nobody_saw_is_final_too():
    """The same with no write in flight during the lapse: the rule, not the timing of a worker."""
    clock = Clock()

    def slow_write(n: int) -> None:
        if n == 2:
            clock.t += 10.5

    api = LeaseApi(on_write=slow_write)
    el = elector(api, clock)
    calls, _ = run(el)
    assert not el.is_leader()
    assert calls == ["started", "stopped"]


def test_not_leader_a_renewal_past_the_deadline_is_not_sent():
    """A GET that took the renewal past its deadline: no PUT follows it (client-go's renewal is bounded
    by the deadline), and the elector stops."""
    clock = Clock()

    def slow_get(n: int) -> None:
        if n == 3:  # the second renewal's GET (the first GET was the 404 before the create)
            clock.t += 10.5

    api = LeaseApi(on_get=slow_get)
    el = elector(api, clock)
    calls, _ = run(el)
    assert calls == ["started", "stopped"]
    assert api.writes == 2 and api.gets == 3


def test_not_leader_renewals_get_only_the_time_left_before_the_deadline():
    clock = Clock()

    def get(n: int) -> None:
        if n == 3:
            clock.t += 4.0  # 4 s into a renewal that started right after the last one

    api = LeaseApi(on_get=get)
    el = elector(api, clock)
    stop = threading.Event()
    t = threading.Thread(target=el.run, args=(lambda: None, lambda: None, stop), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 5
        while api.writes < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert api.timeouts[0] == ("GET", 10.0)  # campaigning: the whole deadline
        assert api.timeouts[4:6] == [("GET", 10.0), ("PUT", 6.0)]  # after the slow GET: the 6 s left
    finally:
        stop.set()
        t.join(5)
