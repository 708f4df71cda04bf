"""controller.leader against the real API server: one leader at a time, a clean hand-over on
release, and a leader whose Lease is taken stops leading within its renew deadline."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from client.resources import LEASES
from client.rest import RestClient
from controller.leader import LeaderElector
from testsupport.waiting import wait_until

# exclusive: leases of 3 s and a renew deadline of 2 s, timed by threads of this process: run alone
# (make test's second phase), not beside other workers' operators on the same two cores.
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]
TIMINGS = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.3}


class Candidate:
    def __init__(self, client: RestClient, ns: str, identity: str) -> None:
        self.elector = LeaderElector(client, ns, "test-lease", identity, **TIMINGS)
        self.started, self.stopped, self.stop = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(
            target=self.elector.run, args=(self.started.set, self.stopped.set, self.stop), daemon=True)
        self.thread.start()


@pytest.fixture
def client(kubeconfig) -> RestClient:
    return RestClient.from_kubeconfig(kubeconfig, qps=100, burst=100)


@pytest.fixture
def candidates(client, namespace):
    made: list[Candidate] = []

    def make(identity: str) -> Candidate:
        made.append(Candidate(client, namespace, identity))
        return made[-1]

    yield make
    for c in made:
        c.stop.set()
        c.thread.join(5)


def lease(client, ns: str) -> dict:
    return client.request("GET", LEASES.path(ns, "test-lease"))


def test_candidates_started_together_elect_exactly_one(client, namespace, candidates):
    a, b = candidates("a"), candidates("b")
    wait_until(lambda: a.started.is_set() or b.started.is_set(), 10, what="someone leads")
    deadline = time.monotonic() + 2 * TIMINGS["lease_duration"]  # past a lease duration: no takeover of a live one
    while time.monotonic() < deadline:
        assert [a.elector.is_leader(), b.elector.is_leader()].count(True) <= 1
        time.sleep(0.05)
    leader, other = (a, b) if a.started.is_set() else (b, a)
    assert leader.elector.is_leader() and not other.started.is_set() and not other.elector.is_leader()
    spec = lease(client, namespace)["spec"]
    assert spec["holderIdentity"] == leader.elector.identity and spec["leaseDurationSeconds"] == 3


def test_a_clean_stop_releases_the_lease(client, namespace, candidates):
    a = candidates("a")
    wait_until(a.started.is_set, 10, what="a leads")
    a.stop.set()
    wait_until(a.stopped.is_set, 5, what="on_stopped called")
    a.thread.join(5)
    assert not a.thread.is_alive() and not a.elector.is_leader()
    assert lease(client, namespace)["spec"]["holderIdentity"] in ("", None)


def test_a_dead_leaders_lease_is_taken_only_once_it_expires(client, namespace, candidates):
    """A holder that stopped renewing without releasing (a crash): the Lease is taken after lease_duration
    as measured on the candidate's own clock, never earlier, and the takeover is counted."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.request("POST", LEASES.path(namespace), body={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "test-lease"},
        "spec": {"holderIdentity": "crashed", "leaseDurationSeconds": 3, "acquireTime": now, "renewTime": now,
                 "leaseTransitions": 4}})
    b = candidates("b")
    time.sleep(TIMINGS["lease_duration"] - 1.0)
    assert not b.started.is_set() and not b.elector.is_leader(), "took an unexpired Lease"
    wait_until(b.started.is_set, 10, what="b takes the expired Lease")
    spec = lease(client, namespace)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 5


def test_one_leader_then_a_clean_hand_over(client, namespace, candidates):
    a = candidates("a")
    wait_until(a.started.is_set, 10, what="a leads")
    b = candidates("b")
    time.sleep(1.5)  # b campaigns for a while: the Lease is held
    assert a.elector.is_leader() and not b.elector.is_leader() and not b.started.is_set()
    transitions = lease(client, namespace)["spec"].get("leaseTransitions", 0)

    t0 = time.monotonic()
    a.stop.set()
    wait_until(b.started.is_set, 10, what="b takes over")
    assert time.monotonic() - t0 < TIMINGS["lease_duration"], "a released Lease is taken at once"
    assert a.stopped.is_set() and not a.elector.is_leader()
    spec = lease(client, namespace)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == transitions + 1


def test_a_leader_whose_lease_is_taken_stops_within_its_renew_deadline(client, namespace, candidates):
    a = candidates("a")
    wait_until(a.started.is_set, 10, what="a leads")
    stop_intruder = threading.Event()

    def intrude() -> None:  # another holder keeps writing the Lease, as after a partition
        while not stop_intruder.is_set():
            try:
                current = lease(client, namespace)
                current["spec"].update(holderIdentity="intruder",
                                       renewTime=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
                client.request("PUT", LEASES.path(namespace, "test-lease"), body=current)
            except Exception:
                pass  # a conflict with a's renew: try again
            time.sleep(0.3)

    t = threading.Thread(target=intrude, daemon=True)
    t0 = time.monotonic()
    t.start()
    try:
        wait_until(lambda: not a.elector.is_leader(), 10, interval=0.05, what="a stops leading")
        lost_after = time.monotonic() - t0
        wait_until(a.stopped.is_set, 10, what="on_stopped called")
    finally:
        stop_intruder.set()
        t.join(5)
    assert lost_after < TIMINGS["renew_deadline"] + 1.0, f"a still led {lost_after:.1f}s after losing its Lease"
    assert lease(client, namespace)["spec"]["holderIdentity"] == "intruder"
