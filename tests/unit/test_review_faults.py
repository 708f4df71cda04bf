"""Issue 24: the pure parts of items 6 (quantity), 8 (terminating), 10 (healthz), 11 (secret_data)
and 4 (lease). What the API server itself does with these inputs is in
tests/integration/test_review_faults.py and e2e/test_review_faults.py."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import kubernetes
import pytest

from client.rest import RestClient
from controller import __main__ as main
from controller.workqueue import RateLimitingQueue
from informers.transforms import SECRET_VALUE_PLACEHOLDER, strip_secret_data
from reconcilers import apilimits, predecessor
from reconcilers.gang import podgroup
from reconcilers.types import Config
from reconcilers.validation import validate
from tests.unit import sim

# -- item 6: quantities ---------------------------------------------------------------------------

HUGE = ["1e9999999", "1" * 5000, "9" * 20, "1e19", "8Ei", "9223372036854775808", "1e" + "9" * 5000,
        "10000000000000000000000000000000000000000000000000k"]
FINE = ["500m", "2", "1Gi", "7Ei", "9223372036854775807", "1e18", "0." + "0" * 5000 + "1", "1e-9999999",
        "0e9999999", "1.5Ki", ".5", "5.", "+1", 4, 0.25]


def with_cpu(value) -> dict:
    job = sim.mpijob("q", "ns")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": value}}
    return job


@pytest.mark.parametrize("value", HUGE, ids=lambda v: repr(v)[:24])
def test_quantity_beyond_int64_is_invalid_spec_naming_the_field(value):
    """Before: these passed validation; 1e9999999 then made int() spin for minutes in the PodGroup
    sum, and thousands of digits raised in format_quantity (a retry loop without a condition)."""
    errors = validate(with_cpu(value), Config())
    field = "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.requests.cpu"
    assert [e.path for e in errors] == [field]
    assert "larger than the largest quantity" in errors[0].message and len(errors[0].message) < 300
    with pytest.raises(ValueError):
        podgroup.parse_quantity(value)


@pytest.mark.parametrize("value", FINE, ids=lambda v: repr(v)[:24])
def test_quantity_within_bounds_is_accepted_and_parsed(value):
    assert validate(with_cpu(value), Config()) == []
    assert podgroup.parse_quantity(value) >= 0


@pytest.mark.parametrize("value,expected", [
    ("500m", Decimal("0.5")), ("2Gi", Decimal(2**31)), ("1e3", Decimal(1000)), ("1.5Ki", Decimal(1536)),
    ("7Ei", Decimal(7 * 2**60)), ("9223372036854775807", Decimal(2**63 - 1)), ("250u", Decimal("0.00025")),
])
def test_quantity_values(value, expected):
    assert apilimits.quantity_value(value) == expected


def test_quantity_pod_group_of_huge_requests_never_spins_and_never_raises():
    """The PodGroup sum skips what it cannot read (validation reports it): no spin, no exception."""
    job = with_cpu("1e9999999")
    config = Config(gang_scheduler="scheduler-plugins-scheduler")
    pg = podgroup.pod_group(job, config, {"uid": "u"})
    assert "cpu" not in (pg["spec"].get("minResources") or {})


# -- item 8: a predecessor's pod stuck terminating ------------------------------------------------


def stale_pod(name: str, deleted_s_ago: float | None) -> dict:
    meta: dict = {"name": name, "namespace": "ns"}
    if deleted_s_ago is not None:
        meta["deletionTimestamp"] = (sim.NOW - timedelta(seconds=deleted_s_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": meta, "status": {"phase": "Running"}}


def test_terminating_predecessor_pod_is_reported_after_the_bound_once():
    status: dict = {}
    assert predecessor.report_stuck(status, [stale_pod("pi-worker-0", 60)], "ns", sim.NOW) == []
    assert status == {}  # within the bound: nothing said, nothing written
    events = predecessor.report_stuck(status, [stale_pod("pi-worker-1", 300), stale_pod("pi-worker-0", 200)],
                                      "ns", sim.NOW)
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("WaitingForPredecessor", "True", "PredecessorPodStuck")
    assert "ns/pi-worker-0" in cond["message"] and "--force" in cond["message"]
    assert [(e.type, e.reason) for e in events] == [("Warning", "PredecessorPodStuck")]
    again = predecessor.report_stuck(status, [stale_pod("pi-worker-0", 200)], "ns", sim.NOW + timedelta(seconds=60))
    assert again == [] and status["conditions"] == [cond]  # one Event per pod, no churn
    assert predecessor.report_stuck(status, [], "ns", sim.NOW) == [] and status["conditions"] == []


def test_terminating_predecessor_pod_in_the_plan():
    """A new MPIJob whose name a deleted one's worker pod still holds (Terminating past the bound):
    the plan waits, and says so on the MPIJob."""
    job = sim.mpijob("pi", "ns")
    old_worker = sim.pod(job, "worker", 0)
    old_worker["metadata"]["ownerReferences"][0]["uid"] = "uid-of-the-deleted-one"
    old_worker["metadata"]["deletionTimestamp"] = (sim.NOW - timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obs = sim.Observed(pods=[old_worker])
    p = sim.run(job, obs)
    conds = {c["type"]: c for c in (p.status or {}).get("conditions") or []}
    assert conds["WaitingForPredecessor"]["status"] == "True", conds
    assert old_worker["metadata"]["name"] in conds["WaitingForPredecessor"]["message"]
    assert "PredecessorPodStuck" in [e.reason for e in p.events]
    assert not any(c["obj"]["kind"] in ("Job", "StatefulSet") and c["obj"]["metadata"]["name"] == "pi-worker"
                   for c in [{"obj": c.obj} for c in p.creates])


# -- item 11: the Secret informer keeps no key ---------------------------------------------------


def test_secret_data_stripped_keeping_key_names():
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
              "metadata": {"name": "pi-ssh", "namespace": "ns", "managedFields": [{}]},
              "data": {"ssh-privatekey": "LS0tLS1CRUdJTi...", "ssh-publickey": "ZWNkc2Et...", "empty": ""}}
    out = strip_secret_data(secret)
    assert out["data"] == {"ssh-privatekey": SECRET_VALUE_PLACEHOLDER, "ssh-publickey": SECRET_VALUE_PLACEHOLDER,
                           "empty": ""}
    assert "managedFields" not in out["metadata"] and out["type"] == "kubernetes.io/ssh-auth"
    assert secret["data"]["ssh-privatekey"].startswith("LS0t")  # the input is not modified


def test_secret_data_stripped_still_plans_no_write():
    """The plan reads only whether both keys are there: a cached Secret without values plans nothing
    (no delete for lost keys), and one that lost a key is still replaced."""
    job, obs = sim.running_state(sim.mpijob("pi", "ns"), "job")
    stripped = sim.replace(obs, secret=strip_secret_data(obs.secret))
    p = sim.run(job, stripped)
    assert not p.deletes and not p.creates and not p.patches
    lost = strip_secret_data({**obs.secret, "data": {"ssh-publickey": "x"}})
    assert [d.ref.kind for d in sim.run(job, sim.replace(obs, secret=lost)).deletes] == ["Secret"]


# -- item 10: what /healthz reads of the queue ---------------------------------------------------


def test_healthz_longest_running_names_the_item():
    q = RateLimitingQueue("healthz-test")
    try:
        assert q.longest_running() == (None, 0.0)
        q.add("ns/a")
        q.add("ns/b")
        item, _ = q.get()
        q.get()
        key, running = q.longest_running()
        assert key == item and running >= 0
        q.done(item)
        assert q.longest_running()[0] == "ns/b"
    finally:
        q.shutdown()


# -- item 4: leader election's own client --------------------------------------------------------


def test_lease_client_has_its_own_token_bucket():
    client = RestClient(kubernetes.client.ApiClient(configuration=kubernetes.client.Configuration()), qps=5, burst=5)
    lease = main.lease_client(client)
    assert lease.limiter is not client.limiter and lease.api_client is client.api_client
    for _ in range(50):  # the controller's bucket used up...
        client.limiter.reserve()
    assert lease.limiter.reserve() == 0.0  # ...the lease client's is untouched


def test_lease_guard_runs_after_the_throttle():
    """The leader check runs once the token is there, not before the wait."""
    client = RestClient(kubernetes.client.ApiClient(configuration=kubernetes.client.Configuration()), qps=20, burst=1)
    client.limiter.reserve()  # the next call waits ~50 ms
    order: list[str] = []
    real_take = client.limiter.take
    client.limiter.take = lambda: (real_take(), order.append("throttle"))  # type: ignore[method-assign]

    class Stop(Exception):
        pass

    def guard():
        order.append("guard")
        raise Stop

    with pytest.raises(Stop):
        client.request("GET", "/api", guard=guard)
    assert order == ["throttle", "guard"]


def test_lease_release_waits_for_before_release():
    """Item 9 at the elector: on a clean stop, before_release runs (the workers joined) before the
    release, and a False answer (a worker still writing) leaves the Lease to expire."""
    from controller.leader import LeaderElector

    calls: list[str] = []
    el = LeaderElector.__new__(LeaderElector)
    el.namespace, el.name, el.identity, el.retry_period = "ns", "l", "me", 0.01
    el._lock = threading.Lock()
    el._renewed_at = None
    el._try_acquire_or_renew = lambda: True
    el._release = lambda: calls.append("release")
    el.is_leader = lambda: True
    stop = threading.Event()

    def before_release() -> bool:
        calls.append("workers joined")
        return True

    def started():
        stop.set()

    el.run(started, lambda: calls.append("stopped"), stop, before_release=before_release)
    assert calls == ["workers joined", "release", "stopped"]
    calls.clear()
    stop.clear()
    el.run(started, lambda: calls.append("stopped"), stop, before_release=lambda: False)
    assert calls == ["stopped"]
