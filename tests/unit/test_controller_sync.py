"""The controller's one reconcile (`sync`) and its error sorting (`_process`), over the in-memory
stores of informers that are never started and the real executor writing to a scripted fake of the
API client (testsupport/fake_api.py). The real API server's side of the same is in the integration
and e2e tests; here every branch of the controller's own logic is reached in milliseconds."""

from __future__ import annotations

import copy
import itertools
import threading

import pytest

from client.errors import ApiError
from controller.config import Options
from controller.executor import Executor
from controller.mpijob_controller import MPIJobController
from informers.factory import InformerFactory
from tests.unit import sim
from testsupport.fake_api import FakeApi

KEY = "ns/pi"


class EchoServer:
    """Answers writes as the API server would in substance: a create returns the object with a uid
    and a resourceVersion, a merge patch of the MPIJob's status returns the patched MPIJob."""

    def __init__(self, job: dict) -> None:
        self.job = job
        self.rv = itertools.count(100)
        self.fail_creates: Exception | None = None
        self.created: list[dict] = []  # what the creates returned, for the caches

    def __call__(self, method: str, path: str, body: object) -> object:
        if method == "POST" and path.endswith("/events"):
            return {"metadata": {"resourceVersion": str(next(self.rv))}}
        if method == "POST":
            if self.fail_creates is not None:
                raise self.fail_creates
            obj = copy.deepcopy(body)
            obj["metadata"].update(uid=f"uid-{obj['metadata']['name']}", resourceVersion=str(next(self.rv)))
            self.created.append(obj)
            return copy.deepcopy(obj)
        if method == "PATCH" and path.endswith("/status"):
            self.job = {**sim.merge_patch(self.job, body), "metadata": {**self.job["metadata"],
                                                                     "resourceVersion": str(next(self.rv))}}
            return self.job
        return {"metadata": {"resourceVersion": str(next(self.rv))}}


@pytest.fixture
def job() -> dict:
    j = sim.mpijob("pi", "ns")
    j["metadata"].update(uid="uid-pi", generation=1, resourceVersion="1")
    return j


@pytest.fixture
def setup(job):
    server = EchoServer(job)
    api = FakeApi(respond=server)
    ctrl = MPIJobController(Options(worker_backend="job"), InformerFactory(api, namespace="ns"),
                            Executor(api, is_leader=lambda: True, component="mpi-operator", instance="t"),
                            now=lambda: sim.NOW, keygen=sim.KeyGen())
    ctrl._active = True  # leading, without worker threads: the tests call sync and _process
    ctrl.mpijobs.store.add(job)
    yield ctrl, api, server
    ctrl.queue.shutdown()


def created_kinds(api: FakeApi) -> list[str]:
    return sorted(body["kind"] for method, path, body in api.calls if method == "POST" and "/events" not in path)


def cache_what_was_written(ctrl, server: EchoServer) -> None:
    """What the informers would deliver after the writes: each created child, the patched MPIJob."""
    stores = {"Service": ctrl.services, "ConfigMap": ctrl.config_maps, "Secret": ctrl.secrets, "Job": ctrl.jobs}
    for obj in server.created:
        stores[obj["kind"]].store.add(copy.deepcopy(obj))
    ctrl.mpijobs.store.add(server.job)


def test_sync_of_a_new_mpijob_creates_its_children_and_writes_its_status_once(setup):
    ctrl, api, _ = setup
    assert ctrl.sync(KEY) is True
    assert created_kinds(api) == ["ConfigMap", "Job", "Job", "Secret", "Service"]
    status_patches = [c for c in api.calls if c[0] == "PATCH" and c[1].endswith("/status")]
    assert len(status_patches) == 1
    assert {c["type"] for c in status_patches[0][2]["status"]["conditions"]} >= {"Created"}
    assert not [c for c in api.calls if c[0] == "GET"], "a reconcile reads caches only"


def test_sync_waits_for_the_cache_to_show_its_writes_then_writes_nothing_more(setup):
    ctrl, api, server = setup
    ctrl.sync(KEY)
    api.calls.clear()
    assert ctrl.sync(KEY) is True  # the caches do not show the writes yet: wait, write nothing
    assert api.writes() == []
    cache_what_was_written(ctrl, server)
    api.calls.clear()
    ctrl.sync(KEY)
    assert api.writes() == [], "the children match: a reconcile at steady state writes nothing"


def test_sync_of_a_deleted_mpijob_forgets_it(setup):
    ctrl, api, _ = setup
    ctrl.sync(KEY)
    ctrl.mpijobs.store.delete(ctrl.mpijobs.store.get(KEY))
    api.calls.clear()
    assert ctrl.sync(KEY) is True
    assert api.writes() == [] and ctrl.memory.peek(KEY) is None


def conditions(server: EchoServer) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (server.job.get("status") or {}).get("conditions") or []}


def process(ctrl, server: EchoServer) -> None:
    """One pass of a worker, then what the MPIJob informer would deliver: the status written."""
    ctrl._process(KEY)
    ctrl.mpijobs.store.add(server.job)


def test_process_shows_a_server_error_as_blocked_retries_with_backoff_and_resets_once_it_passes(setup):
    ctrl, api, server = setup
    server.fail_creates = ApiError(500, "InternalError", "etcd leader changed", retry_after=0.001)
    process(ctrl, server)
    assert "Blocked" not in conditions(server) and len(ctrl.queue) == 1, "shown by the next pass, at once"
    calls = len(api.calls)
    process(ctrl, server)
    assert conditions(server).get("Blocked") == "True"
    assert not [c for c in api.calls[calls:] if c[0] == "POST" and "/events" not in c[1]], \
        "the pass that shows the refusal does not send the refused write again"
    assert ctrl.queue.num_requeues(KEY) == 1, "retried through the rate limiter, not at once"
    process(ctrl, server)
    assert ctrl.queue.num_requeues(KEY) == 2, "each failure backs off further"
    server.fail_creates = None
    process(ctrl, server)
    assert created_kinds(api).count("Job") == 2
    assert ctrl.queue.num_requeues(KEY) == 0, "a reconcile that passes resets the backoff"
    cache_what_was_written(ctrl, server)
    process(ctrl, server)
    assert "Blocked" not in conditions(server), "the condition goes once the writes pass"


def test_refusal_reason_a_quota_whose_used_count_moves_is_one_refusal(setup, monkeypatch):
    """A ResourceQuota refusal names the pods used, which move as other pods come and go: the same
    refusal all the same (issue 36 item 8). Logged once, retried with growing backoff, never requeued
    at once outside the queue's bucket; one Event, one Blocked written."""
    from controller import mpijob_controller

    ctrl, api, server = setup
    warnings: list[str] = []
    monkeypatch.setattr(mpijob_controller.log, "warning", lambda msg, **kw: warnings.append(msg))
    added: list[str] = []  # put back at once by the reconcile itself (not a backoff come due in the queue's thread)
    plain_add, me = ctrl.queue.add, threading.current_thread()
    monkeypatch.setattr(ctrl.queue, "add", lambda key: (
        added.append(key) if threading.current_thread() is me else None, plain_add(key)))

    def refuse(used: int) -> None:
        msg = (f'pods "pi-worker-0" is forbidden: exceeded quota: q, requested: pods=1, used: pods={used}, '
               "limited: pods=4")
        server.fail_creates = ApiError(403, "Forbidden", msg, {"reason": "Forbidden", "code": 403})

    refuse(3)
    process(ctrl, server)  # met: logged, shown by the next pass at once
    process(ctrl, server)  # shown: Blocked + one Event, retried with backoff
    assert conditions(server).get("Blocked") == "True"
    assert (len(warnings), len(added)) == (1, 1)
    shown = copy.deepcopy(server.job["status"])
    status_writes = len([c for c in api.calls if c[0] == "PATCH" and c[1].endswith("/status")])
    for n, used in enumerate((2, 4, 1), start=2):
        refuse(used)
        process(ctrl, server)
        assert ctrl.queue.num_requeues(KEY) == n, "the backoff grows: not taken for a new refusal"
    assert (len(warnings), len(added)) == (1, 1), "no log line, no requeue at once per retry"
    assert len([c for c in api.calls if c[0] == "PATCH" and c[1].endswith("/status")]) == status_writes, \
        "Blocked is not rewritten per retry"
    assert server.job["status"] == shown
    events = [body for method, path, body in api.calls if method == "POST" and path.endswith("/events")]
    assert [e["reason"] for e in events if e["type"] == "Warning"] == ["ChildRefused"]


def test_process_retries_an_unexpected_error_with_backoff(setup):
    ctrl, _, server = setup
    server.fail_creates = RuntimeError("a bug")  # not an ApiError: logged with its traceback
    ctrl._process(KEY)
    assert ctrl.queue.num_requeues(KEY) == 1


def test_process_requeues_quietly_a_patch_of_an_object_deleted_meanwhile(setup):
    ctrl, api, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    cm = ctrl.config_maps.store.get("ns/pi-config")
    ctrl.config_maps.store.add({**cm, "data": {**cm["data"], "hostfile": "edited"}})  # drift to repair
    api.calls.clear()
    api.answers = [ApiError(404, "NotFound", 'configmaps "pi-config" not found')]
    ctrl._process(KEY)
    assert [c[0] for c in api.calls] == ["PATCH"], "no Blocked status, no Event: a race, not a refusal"
    assert ctrl.queue.num_requeues(KEY) == 1


def test_the_echo_of_our_status_write_enqueues_nothing_but_news_does(setup, job):
    """The MPIJob event that only shows the status this operator wrote reconciles nothing (the pass
    that wrote it planned from all the rest); a change by anyone else after it does."""
    ctrl, _, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    assert len(ctrl.queue) == 0
    ctrl._mpijob_updated(job, copy.deepcopy(server.job))  # the watch event of our status patch
    assert len(ctrl.queue) == 0
    later = copy.deepcopy(server.job)
    later["metadata"]["resourceVersion"] = str(int(later["metadata"]["resourceVersion"]) + 1)
    later["metadata"]["labels"] = {"edited": "by-a-user"}
    ctrl._mpijob_updated(server.job, later)
    assert len(ctrl.queue) == 1


def test_the_echo_a_waiting_reconcile_needs_enqueues_it(setup, job):
    """A reconcile that found the cache behind its writes waits for their events: the echo that
    completes them enqueues the MPIJob, else it would wait for the 5 s safety net."""
    ctrl, _, server = setup
    ctrl.sync(KEY)
    ctrl.queue.forget(KEY)
    for obj in server.created:  # the children's events come first ...
        {"Service": ctrl.services, "ConfigMap": ctrl.config_maps, "Secret": ctrl.secrets,
         "Job": ctrl.jobs}[obj["kind"]].store.add(copy.deepcopy(obj))
    ctrl.sync(KEY)  # ... a reconcile finds the MPIJob's status not there yet: put off
    assert len(ctrl.queue) == 0
    ctrl.mpijobs.store.add(server.job)  # then the status, as the informer stores it, then its handler
    ctrl._mpijob_updated(job, copy.deepcopy(server.job))
    assert len(ctrl.queue) == 1


def test_a_resync_is_never_taken_for_an_echo(setup):
    ctrl, _, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    waiting = ctrl.queue.waiting_len()
    ctrl._mpijob_updated(server.job, server.job)  # the periodic resync: old is new
    assert len(ctrl.queue) + ctrl.queue.waiting_len() == waiting + 1


def test_the_event_of_a_child_we_created_is_news(setup):
    """A create's event enqueues: the next step of a plan may wait for the object (a gang's PodGroup
    before the pods that join it)."""
    ctrl, _, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    job = next(o for o in server.created if o["kind"] == "Job")
    ctrl._enqueue_owner(copy.deepcopy(job), "jobs")
    assert len(ctrl.queue) == 1


def test_a_running_mpijobs_job_counting_pods_is_no_news(setup):
    """The Job controller raising a Running MPIJob's launcher Job's counts reconciles nothing; the
    same Job losing a Ready pod, or ending, does."""
    ctrl, _, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    running = copy.deepcopy(server.job)
    running["status"]["conditions"].append({"type": "Running", "status": "True"})
    ctrl.mpijobs.store.add(running)
    launcher = next(o for o in server.created if o["kind"] == "Job")
    before = {**copy.deepcopy(launcher), "status": {"active": 1}}
    counted = {**copy.deepcopy(launcher), "status": {"active": 1, "ready": 1}}
    ctrl._child_updated(before, counted, "jobs")
    assert len(ctrl.queue) == 0
    ctrl._child_updated(counted, before, "jobs")  # ready 1 -> 0
    assert len(ctrl.queue) == 1
    ctrl.queue.get()
    ctrl.queue.done(KEY)
    ctrl._child_updated(counted, {**counted, "status": {"active": 0, "ready": 1, "succeeded": 1}}, "jobs")
    assert len(ctrl.queue) == 1


def test_a_bring_ups_job_counts_reconcile_only_when_they_may_make_it_running(setup):
    """While the MPIJob comes up, the launcher Job's first count (its pod created) reconciles nothing;
    its Ready count rising does, at once: Running may follow from it before the pods' batched events."""
    ctrl, _, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    launcher = next(o for o in server.created if o["kind"] == "Job" and o["metadata"]["name"].endswith("-launcher"))
    created = {**copy.deepcopy(launcher), "status": {"active": 1, "startTime": "t", "uncountedTerminatedPods": {}}}
    ctrl._child_updated(copy.deepcopy(launcher), created, "jobs")
    assert len(ctrl.queue) == 0
    ctrl._child_updated(created, {**created, "status": {**created["status"], "ready": 1}}, "jobs")
    assert len(ctrl.queue) == 1


def test_the_event_of_our_patch_before_its_answer_enqueues_nothing(setup):
    """A child's event that shows exactly the merge patch the last pass sent (it may come before the
    patch's answer, so before its resourceVersion is expected) reconciles nothing, once; the same
    child changed otherwise does."""
    ctrl, api, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    cm = ctrl.config_maps.store.get("ns/pi-config")
    ctrl.config_maps.store.add({**cm, "data": {**cm["data"], "hostfile": "edited"}})  # drift to repair
    ctrl.queue.forget(KEY)
    ctrl.sync(KEY)
    assert [c[0] for c in api.calls][-1:] == ["PATCH"]
    drifted = ctrl.config_maps.store.get("ns/pi-config")
    repaired = copy.deepcopy(cm)
    repaired["metadata"]["resourceVersion"] = "999"  # not the answer's: the event came first
    ctrl._child_updated(drifted, repaired, "configmaps")
    assert len(ctrl.queue) == 0
    ctrl._child_updated(drifted, repaired, "configmaps")  # once only
    assert len(ctrl.queue) == 1
    ctrl.queue.get()
    ctrl.queue.done(KEY)
    other = copy.deepcopy(repaired)
    other["data"]["hostfile"] = "edited again"
    ctrl._child_updated(repaired, other, "configmaps")
    assert len(ctrl.queue) == 1


def test_a_delete_is_never_taken_for_an_echo(setup):
    """A child deleted (a relist's DeletedFinalStateUnknown carries its last known state, which may
    be the very state our patch returned) always queues its MPIJob."""
    ctrl, _, server = setup
    ctrl.sync(KEY)
    cache_what_was_written(ctrl, server)
    cm = next(o for o in server.created if o["kind"] == "ConfigMap")
    ctrl.expectations.expect_object(KEY, ("configmaps", "ns", cm["metadata"]["name"]),
                                    cm["metadata"]["resourceVersion"], quiet=True)
    for h in ctrl.config_maps.handlers:
        h.on_delete(copy.deepcopy(cm))
    assert len(ctrl.queue) == 1
