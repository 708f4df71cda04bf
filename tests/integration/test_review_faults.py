"""Issue 24 against the real API server: item 4 (lease: renewals through a client of their own, the
leader check after the throttle), item 9 (lease release after the workers) and item 6 (quantity:
the operator's bound against what the API server stores)."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import pytest

from client.errors import ApiError
from client.resources import CONFIGMAPS, LEASES
from client.rest import RestClient
from controller import __main__ as main
from controller.executor import Executor, NotLeader
from controller.leader import LeaderElector
from reconcilers import apilimits
from reconcilers.types import Create, Plan
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
TIMINGS = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.3}


def _config_map(ns: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {}}


def _exists(client: RestClient, ns: str, name: str) -> bool:
    try:
        client.request("GET", CONFIGMAPS.path(ns, name))
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return True


# -- item 4 ---------------------------------------------------------------------------------------


@pytest.mark.exclusive  # 3 s Leases timed by threads: alone (make test's second phase)
def test_lease_lost_during_the_throttle_write_is_not_sent(kubeconfig, namespace):
    """The controller's bucket is empty: a write waits ~2 s for its token. The Lease is lost during
    that wait. Before the fix the leader check ran before the wait, so the write went out 2 s later
    from a replica that no longer led; now it is checked once the token is there."""
    client = RestClient.from_kubeconfig(kubeconfig, qps=0.5, burst=1)
    leading = [True]
    ex = Executor(client, is_leader=lambda: leading[0], component="mpi-operator", instance="test")
    client.limiter.reserve()  # the bucket used up by other reconciles
    threading.Timer(0.5, lambda: leading.__setitem__(0, False)).start()
    with pytest.raises(NotLeader):
        ex.apply({"metadata": {"name": "pi", "namespace": namespace, "uid": "u"}},
                 Plan(creates=[Create(_config_map(namespace, "late-write"))]))
    admin = RestClient.from_kubeconfig(kubeconfig, qps=100, burst=100)
    assert not _exists(admin, namespace, "late-write"), "a write that passed the check went out late"


@pytest.mark.exclusive  # 3 s Leases timed by threads: alone (make test's second phase)
def test_lease_renewals_do_not_wait_behind_a_saturated_controller_bucket(kubeconfig, namespace):
    """The controller's client at --kube-api-qps=5 with reconciles queued on it (here: 8 threads
    reading as fast as the bucket lets them). The elector renews through main.lease_client (its own
    bucket) and keeps leading. Before the fix it shared the controller's client: each renewal
    waited behind the queued reads, longer than the renew deadline, and the leader lost its Lease
    (and exited) for nothing."""
    client = RestClient.from_kubeconfig(kubeconfig, qps=5, burst=10)
    elector = LeaderElector(main.lease_client(client), namespace, "lease-saturated", "a", **TIMINGS)
    stop, started = threading.Event(), threading.Event()
    lost = threading.Event()
    t = threading.Thread(target=elector.run, args=(started.set, lost.set, stop), daemon=True)
    t.start()
    wait_until(started.is_set, 10, what="a leads")

    def hammer() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                client.request("GET", CONFIGMAPS.path(namespace), query={"limit": 1})

    hammers = [threading.Thread(target=hammer, daemon=True) for _ in range(8)]
    for h in hammers:
        h.start()
    try:
        deadline = time.monotonic() + 3 * TIMINGS["lease_duration"]
        while time.monotonic() < deadline:
            assert elector.is_leader() and not lost.is_set(), "lost the Lease behind the controller's reads"
            time.sleep(0.1)
    finally:
        stop.set()
        t.join(10)
        for h in hammers:
            h.join(10)


# -- item 9 ---------------------------------------------------------------------------------------


@pytest.mark.exclusive  # 3 s Leases timed by threads: alone (make test's second phase)
def test_lease_released_only_after_the_workers_stopped(kubeconfig, namespace):
    """On a clean stop the elector first stops the workers (before_release: the controller's
    shutdown, which joins them), and only then gives the Lease up. Before the fix the Lease was
    released first and the workers joined after, so a write in flight could land after the
    standby took over."""
    client = RestClient.from_kubeconfig(kubeconfig, qps=50, burst=50)
    elector = LeaderElector(main.lease_client(client), namespace, "lease-release", "a", **TIMINGS)
    stop, started = threading.Event(), threading.Event()
    holder_while_joining: list[str] = []

    def before_release() -> bool:  # a worker still finishing its write: the Lease must still be ours
        time.sleep(0.5)
        lease = client.request("GET", LEASES.path(namespace, "lease-release"))
        holder_while_joining.append(lease["spec"].get("holderIdentity") or "")
        return True

    t = threading.Thread(target=elector.run, args=(started.set, lambda: None, stop),
                         kwargs={"before_release": before_release}, daemon=True)
    t.start()
    wait_until(started.is_set, 10, what="a leads")
    stop.set()
    t.join(10)
    assert holder_while_joining == ["a"]
    assert client.request("GET", LEASES.path(namespace, "lease-release"))["spec"].get("holderIdentity") in ("", None)


# -- item 6 ---------------------------------------------------------------------------------------

# Each quantity the operator refuses as too large: what the API server does with it in a Pod (a
# server-side dry-run), as seen on v1.37: it stores a value no int64 holds (its consumers read
# Quantity.Value/MilliValue, which saturate), clamps a binary one to 2^63-1, or refuses an exponent
# that does not fit an int64. Never a value Kubernetes can schedule.
TOO_LARGE = ["1e99999", "1" * 2000, "1e19", "9223372036854775808", "8Ei", "1e" + "9" * 30]
WITHIN = ["500m", "2", "7Ei", "9223372036854775807", "1e18", "0." + "0" * 2000 + "1", "1.5Ki"]


def _server_cpu(kubectl, namespace: str, q: str) -> tuple[bool, str]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": q}}}]}}
    r = kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(pod),
                check=False)
    if r.returncode != 0:
        return False, r.stderr
    return True, json.loads(r.stdout)["spec"]["containers"][0]["resources"]["requests"]["cpu"]


@pytest.mark.parametrize("q", TOO_LARGE, ids=lambda q: q[:16])
def test_quantity_the_operator_refuses_is_one_kubernetes_cannot_represent(kubectl, namespace, q):
    assert apilimits.quantity_error(q) and "larger than" in apilimits.quantity_error(q)
    accepted, stored = _server_cpu(kubectl, namespace, q)
    if not accepted:
        assert "quantity" in stored, stored  # refused outright (an exponent beyond int64)
        return
    if stored == str(apilimits.MAX_QUANTITY):
        return  # clamped: a binary suffix
    with pytest.raises(ValueError, match="larger than"):
        apilimits.quantity_value(stored)  # stored as given: beyond what its consumers can read


@pytest.mark.parametrize("q", WITHIN, ids=lambda q: q[:16])
def test_quantity_the_operator_accepts_the_api_server_stores_with_its_value(kubectl, namespace, q):
    assert apilimits.quantity_error(q) is None
    accepted, stored = _server_cpu(kubectl, namespace, q)
    assert accepted, stored
    # The same value, the server's rounding aside (CPU is kept to the milli-unit, rounded up).
    assert abs(apilimits.quantity_value(stored) - apilimits.quantity_value(q)) <= 0.001
