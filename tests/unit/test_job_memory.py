"""Issue 24 items 1, 2 and 5: the controller's per-MPIJob memory (controller/job_memory.py).

The controller here is the real MPIJobController with informers that are never started: the test
puts objects in their stores and calls their handlers as a reflector thread would, and the executor
answers as the API server did in the reported cases (a 422, a 403 quota). The end-to-end tests
(e2e/test_review_faults.py) show the same against the real API server.
"""

from __future__ import annotations

import itertools
import time

import kubernetes
import pytest

from client.errors import ApiError
from client.rest import RestClient
from controller import mpijob_controller as mc
from controller.config import Options
from controller.executor import ObjectGone, Refused, Result
from controller.workqueue import BucketRateLimiter, ItemExponentialFailureRateLimiter, MaxOfRateLimiter
from informers.factory import InformerFactory
from reconcilers import names
from reconcilers.types import Plan
from tests.unit import sim


class FakeExecutor:
    """Records the plans it is given; answers with `refuse` (a Refused) while it is set."""

    def __init__(self) -> None:
        self.plans: list[tuple[dict, Plan]] = []
        self.refuse: Refused | None = None

    def apply(self, mpijob: dict, plan: Plan) -> Result:
        self.plans.append((mpijob, plan))
        if self.refuse is not None and (plan.creates or plan.patches):
            return Result(refused=self.refuse)
        return Result()

    def exists(self, path: str) -> bool:
        return False


def refused(code: int, reason: str) -> Refused:
    return Refused(ApiError(code, reason, f"Job.batch \"pi-launcher\" is {reason}"), "create", "Job", "pi-launcher")


@pytest.fixture
def ctrl():
    # A client that is never used: the informers are not started.
    client = RestClient(kubernetes.client.ApiClient(configuration=kubernetes.client.Configuration()), qps=0)
    c = mc.MPIJobController(Options(), InformerFactory(client, namespace="ns"), FakeExecutor(),
                            now=lambda: sim.NOW, keygen=sim.KeyGen())
    yield c
    c.queue.shutdown()


_UIDS = itertools.count(1)


def mpijob(name: str) -> dict:
    """An MPIJob with a uid of its own (each call another object, as a re-creation is)."""
    job = sim.mpijob(name, "ns")
    job["metadata"]["uid"] = f"uid-{name}-{next(_UIDS)}"
    return job


def add_mpijob(ctrl, job: dict) -> None:
    ctrl.mpijobs.store.add(job)
    ctrl._enqueue_mpijob(job)  # on_add, or on_update (a relist's) with the new object: the same handler


def failed_reason(plan: Plan) -> str | None:
    conds = (plan.status or {}).get("conditions") or []
    return next((c.get("reason") for c in conds if c["type"] == "Failed" and c["status"] == "True"), None)


def test_refusal_of_a_deleted_mpijob_is_not_inherited_by_a_namesake_seen_in_a_relist(ctrl):
    """Item 1: the old MPIJob's child was refused for good (422); it is deleted and re-created while
    the watch is down, so a relist shows the new one as an *update* (same ns/name, generation 1
    again, another uid) and no delete handler runs. The new MPIJob must be planned afresh, not
    marked Failed/ChildRefused without trying."""
    ctrl._active = True  # leading, without worker threads: the test calls sync
    old = mpijob("pi")
    old["metadata"]["generation"] = 1
    add_mpijob(ctrl, old)
    ctrl.executor.refuse = refused(422, "Invalid")
    assert ctrl.sync("ns/pi") is False  # refused: remembered, and shown by the next pass
    assert ctrl.sync("ns/pi") is False
    assert failed_reason(ctrl.executor.plans[-1][1]) == "ChildRefused"

    new = mpijob("pi")  # another uid, generation 1 again
    new["metadata"]["generation"] = 1
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    ctrl.executor.refuse = None
    ctrl.executor.plans.clear()
    add_mpijob(ctrl, new)  # the relist's update
    ctrl.sync("ns/pi")
    planned, plan = ctrl.executor.plans[0]
    assert planned["metadata"]["uid"] == new["metadata"]["uid"]
    assert failed_reason(plan) is None and plan.creates, "the namesake inherited the old refusal"


def test_refusal_recorded_after_the_delete_is_not_inherited(ctrl, monkeypatch):
    """Item 1, the other order: the worker of the old MPIJob gets its refusal back after the delete
    handler ran (and a namesake is already cached). The refusal belongs to the memory of the old
    uid, which the delete dropped: the namesake starts blank."""
    ctrl._active = True
    old = mpijob("pi")
    add_mpijob(ctrl, old)
    new = mpijob("pi")
    real_apply = ctrl.executor.apply

    def apply_while_deleted(mpijob, plan):
        if mpijob is old:  # the delete and the re-creation land while the API server answers
            ctrl.mpijobs.store.delete(old)
            ctrl._mpijob_deleted(old)
            add_mpijob(ctrl, new)
        return real_apply(mpijob, plan)

    monkeypatch.setattr(ctrl.executor, "apply", apply_while_deleted)
    ctrl.executor.refuse = refused(422, "Invalid")
    ctrl.sync("ns/pi")
    ctrl.executor.refuse = None
    ctrl.executor.plans.clear()
    ctrl.sync("ns/pi")
    planned, plan = ctrl.executor.plans[0]
    assert planned is new and failed_reason(plan) is None and plan.creates
    assert ctrl.memory.peek("ns/pi").uid == new["metadata"]["uid"]


def test_refusal_memory_is_forgotten_in_one_place_on_delete(ctrl):
    """Item 1: a delete drops everything remembered of the MPIJob: refusal, taken name, pace,
    expectations and its metric series."""
    ctrl._active = True
    job = mpijob("pi")
    add_mpijob(ctrl, job)
    ctrl.executor.refuse = refused(403, "Forbidden")
    ctrl.sync("ns/pi")
    mem = ctrl.memory.peek("ns/pi")
    assert mem.refusal is not None and mem.refusal.code == 403
    ctrl.expectations.expect_object("ns/pi", ("jobs", "ns", "pi-launcher"), "99")
    launcher = names.launcher_name(job)
    mc.metrics.job_info.labels(launcher, "ns").set(1)
    ctrl.mpijobs.store.delete(job)
    ctrl._mpijob_deleted(job)
    assert ctrl.memory.peek("ns/pi") is None
    assert ctrl.expectations.pending("ns/pi") == []
    assert ("ns", launcher) not in {(s.labels["namespace"], s.labels["launcher"])
                                    for m in mc.metrics.job_info.collect() for s in m.samples}


def pod_of(job: dict, i: int) -> dict:
    return sim.pod(job, "worker", i)


def test_standby_pod_events_leave_no_memory_and_no_queue(ctrl):
    """Item 2: on a replica that is not the leader (workers not started), pod events of MPIJobs,
    deleted ones included, grew the pace map and the queue for the life of the standby."""
    for i in range(200):
        job = mpijob(f"j{i}")
        add_mpijob(ctrl, job)
        for w in range(2):
            ctrl._enqueue_pod_owner(pod_of(job, w))
        ctrl.mpijobs.store.delete(job)
        ctrl._mpijob_deleted(job)
        ctrl._enqueue_pod_owner(pod_of(job, 0))  # the garbage collector deleting its pods
    time.sleep(mc.POD_EVENT_BATCH_SECONDS + 0.2)
    assert len(ctrl.memory) == 0
    assert len(ctrl.queue) == 0 and ctrl.queue.waiting_len() == 0


def test_standby_takes_every_cached_mpijob_when_it_starts_leading(ctrl):
    """Item 2: the standby queued nothing, so its takeover queues every cached MPIJob."""
    jobs = [mpijob(f"j{i}") for i in range(3)]
    for job in jobs:
        add_mpijob(ctrl, job)
    assert len(ctrl.queue) == 0
    ctrl.opts = Options(threadiness=1)
    seen: list[str] = []
    ctrl.sync = lambda key: seen.append(key) or True
    ctrl.run_workers()
    deadline = time.monotonic() + 3
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(seen) == ["ns/j0", "ns/j1", "ns/j2"]


def test_standby_leader_pod_event_of_a_deleted_mpijob_leaves_nothing(ctrl):
    """Item 2 on the leader: a pod event whose MPIJob is gone makes no memory entry."""
    ctrl._active = True
    job = mpijob("gone")
    ctrl._enqueue_pod_owner(pod_of(job, 0))
    assert ctrl.memory.peek("ns/gone") is None and ctrl.queue.waiting_len() == 0


def test_refusal_retry_cap_stays_inside_the_queue_bucket():
    """Item 5: the per-MPIJob cap (10 s) of a refused write's retry no longer bypasses the queue's
    overall bucket: 500 blocked MPIJobs get retry slots at the bucket's rate (10/s after a burst
    of 100), not 500 every 10 s each."""
    limiter = MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100))
    for _ in range(20):  # every key failed many times: its own backoff is far past the cap
        delays = [limiter.when_capped(f"k{i}", 10.0) for i in range(500)]
    # The 500 retries of the last round are spread at 10/s: the last one waits ~1,000 s of bucket.
    assert max(delays) > 500 * 19 / 10.0 - 100 / 10.0
    assert sorted(delays) == delays  # in the order they were asked for: the bucket's order
    fresh = MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100))
    for _ in range(15):
        d = fresh.when_capped("one", 10.0)
    assert d == 10.0  # one key alone: its backoff grows to the cap, no further


def test_patch_gone_is_requeued_quietly_not_blocked(ctrl):
    """Item 7: a 404 on a patch (ObjectGone) is a race: no refusal remembered, no Blocked condition,
    no Warning; the key is retried."""
    ctrl._active = True
    job = mpijob("pi")
    add_mpijob(ctrl, job)

    def gone(mpijob_, plan):
        ctrl.executor.plans.append((mpijob_, plan))
        raise ObjectGone("ConfigMap ns/pi-config is gone")

    ctrl.executor.apply = gone
    ctrl._process("ns/pi")
    assert len(ctrl.executor.plans) == 1  # nothing planned to show a refusal
    assert ctrl.memory.peek("ns/pi").refusal is None
    # Retried after the rate limiter's delay: a few milliseconds, which a loaded machine may have spent
    # before this line (the key then in the queue already, not waiting).
    deadline = time.monotonic() + 5
    while "ns/pi" not in list(ctrl.queue._queue):
        assert time.monotonic() < deadline, ("not retried", ctrl.queue.waiting_len())
        time.sleep(0.005)


def test_refusal_resync_is_paced_by_the_queue_bucket(ctrl):
    """Item 5, the other path: the periodic resync re-delivered every MPIJob at once, and each
    blocked one retried its refused write at once: 500 writes in one burst that took the client's
    budget from every other MPIJob. A resync now goes through the queue's overall bucket (burst
    100, then 10/s); a real update still queues at once."""
    ctrl._active = True
    jobs = [mpijob(f"j{i}") for i in range(300)]
    for job in jobs:
        ctrl.mpijobs.store.add(job)
    handler = ctrl.mpijobs.handlers[0]
    for job in jobs:
        handler.on_update(job, job)  # what the informer's resync calls
    assert len(ctrl.queue) <= 101 and ctrl.queue.waiting_len() >= 199, (len(ctrl.queue), ctrl.queue.waiting_len())
    changed = dict(jobs[-1], metadata={**jobs[-1]["metadata"], "resourceVersion": "2"})
    handler.on_update(jobs[-1], changed)
    assert "ns/j299" in list(ctrl.queue._queue)


def test_a_refusal_met_again_by_the_pass_that_shows_it_backs_off_instead_of_spinning(ctrl):
    """The pass that shows a permanent refusal applies the whole plan of the Failed MPIJob; if the
    server refuses that again the same way, the next try waits for the backoff (no hot loop)."""
    ctrl._active = True
    add_mpijob(ctrl, mpijob("pi"))
    r = refused(422, "Invalid")

    def refuse_everything(job, plan):
        ctrl.executor.plans.append((job, plan))
        return Result(refused=r)

    ctrl.executor.apply = refuse_everything
    assert ctrl.sync("ns/pi") is False
    assert ctrl.queue.num_requeues("ns/pi") == 0, "a new refusal is shown by the next pass, at once"
    assert ctrl.sync("ns/pi") is False
    assert failed_reason(ctrl.executor.plans[-1][1]) == "ChildRefused", "that pass shows it"
    assert ctrl.queue.num_requeues("ns/pi") == 1, "refused again while shown: retried with backoff"
    assert ctrl.memory.peek("ns/pi").refusal_shown is False, "still to be shown"


def test_disrupted_pods_are_kept_for_a_while_and_few():
    """A disrupted pod's last state outlives the cache for DISRUPTED_KEEP_S, at most DISRUPTED_MAX per
    MPIJob; a namesake (another uid) starts without them (reconcilers/failure/retries.py)."""
    from controller.expectations import Expectations
    from controller.job_memory import DISRUPTED_KEEP_S, DISRUPTED_MAX, JobMemories

    mems = JobMemories(Expectations())
    for i in range(DISRUPTED_MAX + 3):
        mems.pod_disrupted("ns/pi", "u1", {"metadata": {"uid": f"p{i}"}}, now=float(i))
    mem = mems.of("ns/pi", "u1")
    kept = mems.disrupted(mem, now=float(DISRUPTED_MAX + 3))
    assert [p["metadata"]["uid"] for p in kept] == [f"p{i}" for i in range(3, DISRUPTED_MAX + 3)]
    assert mems.disrupted(mem, now=DISRUPTED_MAX + 3 + DISRUPTED_KEEP_S + 1) == []
    mems.pod_disrupted("ns/pi", "u1", {"metadata": {"uid": "x"}}, now=0.0)
    assert mems.of("ns/pi", "u2").disrupted == {}
