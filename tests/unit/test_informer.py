"""The Reflector and SharedInformer against a scripted fake API (no cluster): list/watch protocol,
relist on 410 with tombstones, re-watch without relist, backoff, handler ordering and isolation,
resync, late handlers, transforms and the factory."""

from __future__ import annotations

import threading
import time

import pytest
import urllib3

from client.errors import ApiError
from client.resources import CONFIGMAPS, PODS
from informers import reflector as reflector_mod
from informers.factory import InformerFactory
from informers.informer import SharedInformer
from informers.reflector import Backoff, Reflector
from informers.store import DeletedFinalStateUnknown
from informers.transforms import slim_pod, strip_managed_fields
from testsupport.fake_api import FakeApi, FakeStream


def cm(name, rv, data="x"):
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}, "data": {"v": data}}


def ev(typ, o):
    return {"type": typ, "object": o}


def page(items, rv, cont=""):
    meta = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return {"items": items, "metadata": meta}


class Recorder:
    def __init__(self):
        self.events: list = []
        self.cond = threading.Condition()

    def _rec(self, *e):
        with self.cond:
            self.events.append(e)
            self.cond.notify_all()

    def add(self, o):
        self._rec("add", o["metadata"]["name"], o["metadata"]["resourceVersion"])

    def update(self, old, new):
        self._rec("update", new["metadata"]["name"], old["metadata"]["resourceVersion"],
                  new["metadata"]["resourceVersion"])

    def delete(self, o):
        if isinstance(o, DeletedFinalStateUnknown):
            self._rec("tombstone", o.key, o.obj["metadata"]["resourceVersion"])
        else:
            self._rec("delete", o["metadata"]["name"])

    def wait(self, n, timeout=3.0):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.events) >= n, timeout), self.events
            return list(self.events)


def make(client, **kw):
    inf = SharedInformer(client, CONFIGMAPS, namespace="ns", name=f"fake-{id(client)}", **kw)
    inf.reflector.backoff = Backoff(0.01, 0.05)
    rec = Recorder()
    inf.add_event_handler(rec.add, rec.update, rec.delete)
    return inf, rec


@pytest.fixture
def client():
    return FakeApi()


def test_list_then_watch_events_in_order(client):
    client.list_pages = [page([cm("a", 5)], 10)]
    client.watch_scripts = [FakeStream([ev("ADDED", cm("b", 11)), ev("MODIFIED", cm("a", 12)),
                                        ev("DELETED", cm("b", 13))], end=False)]
    inf, rec = make(client)
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        got = rec.wait(4)
        assert got == [("add", "a", "5"), ("add", "b", "11"), ("update", "a", "5", "12"), ("delete", "b")]
        assert inf.store.list_keys() == ["ns/a"]
        assert inf.last_sync_resource_version == "13"
        q = client.list_queries[0]
        assert q["resourceVersion"] == "0" and q["limit"] == 500
        w = client.watch_queries[0]
        assert w["resourceVersion"] == "10" and w["allowWatchBookmarks"] is True and w["watch"] is True
        assert 300 <= w["timeoutSeconds"] <= 600
        # list items get their kind
        assert inf.store.get("ns/a")["kind"] == "ConfigMap"
    finally:
        inf.stop()


def test_paged_list(client):
    client.list_pages = [page([cm("a", 1)], 7, cont="tok"), page([cm("b", 2)], 8)]
    inf, _rec = make(client)
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        assert sorted(inf.store.list_keys()) == ["ns/a", "ns/b"]
        assert client.list_queries[1]["continue"] == "tok"
        assert "resourceVersion" not in client.list_queries[1]
        assert client.watch_queries[0]["resourceVersion"] == "8"
    finally:
        inf.stop()


def test_normal_close_rewatches_from_last_rv_without_relist(client):
    client.list_pages = [page([], 10)]
    client.watch_scripts = [
        FakeStream([ev("ADDED", cm("a", 11))]),  # ends normally
        FakeStream([ev("BOOKMARK", {"metadata": {"resourceVersion": "20"}})]),
        FakeStream([], end=False),
    ]
    inf, rec = make(client)
    inf.start()
    try:
        rec.wait(1)
        deadline = time.monotonic() + 3
        while len(client.watch_queries) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert [q["resourceVersion"] for q in client.watch_queries[:3]] == ["10", "11", "20"]
        assert len(client.list_queries) == 1
        assert inf.reflector.lists == 1
    finally:
        inf.stop()


@pytest.mark.parametrize(
    "expire",
    [
        FakeStream([ev("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                 "message": "too old resource version: 11 (50)"})]),
        ApiError(410, "Gone", "too old resource version: 11 (50)"),
        FakeStream([ev("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError",
                                 "message": "too old resource version: 11 (50)"})]),
    ],
    ids=["error-event", "http-410", "message-only"],
)
def test_expired_relists_with_tombstones(client, expire):
    client.list_pages = [page([cm("a", 5), cm("b", 6)], 10),
                         page([cm("a", 40), cm("c", 41)], 50)]
    client.watch_scripts = [FakeStream([ev("MODIFIED", cm("b", 11))]), expire, FakeStream([], end=False)]
    inf, rec = make(client)
    inf.start()
    try:
        got = rec.wait(6)
        assert got[:3] == [("add", "a", "5"), ("add", "b", "6"), ("update", "b", "6", "11")]
        assert got[3:] == [("tombstone", "ns/b", "11"), ("update", "a", "5", "40"), ("add", "c", "41")]
        assert sorted(inf.store.list_keys()) == ["ns/a", "ns/c"]
        assert len(client.list_queries) == 2
        assert "resourceVersion" not in client.list_queries[1]  # a consistent read, not the stale cache
        deadline = time.monotonic() + 3
        while len(client.watch_queries) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert client.watch_queries[2]["resourceVersion"] == "50"
    finally:
        inf.stop()


def test_connection_errors_back_off_then_rewatch_without_relist(client):
    client.list_pages = [page([cm("a", 5)], 10)]
    client.watch_scripts = [
        urllib3.exceptions.NewConnectionError(None, "refused"),
        FakeStream([ev("ADDED", cm("b", 11)), urllib3.exceptions.ReadTimeoutError(None, "", "read timed out")]),
        ConnectionResetError("reset"),
        FakeStream([ev("ADDED", cm("c", 12))], end=False),
    ]
    inf, rec = make(client)
    inf.start()
    try:
        rec.wait(3)
        assert [q["resourceVersion"] for q in client.watch_queries[:4]] == ["10", "10", "11", "11"]
        assert len(client.list_queries) == 1
    finally:
        inf.stop()


def test_throttled_watch_backs_off_and_rewatches_without_relist(client):
    client.list_pages = [page([cm("a", 5)], 10)]
    client.watch_scripts = [ApiError(429, "TooManyRequests", "slow down", retry_after=0.01),
                            ApiError(503, "ServiceUnavailable", "later"),
                            FakeStream([ev("ADDED", cm("b", 11))], end=False)]
    inf, rec = make(client)
    inf.start()
    try:
        rec.wait(2)
        assert [q["resourceVersion"] for q in client.watch_queries[:3]] == ["10", "10", "10"]
        assert len(client.list_queries) == 1
    finally:
        inf.stop()


def test_failed_list_is_retried(client):
    client.list_pages = [urllib3.exceptions.NewConnectionError(None, "refused"),
                         ApiError(500, "InternalError", "boom"), page([cm("a", 1)], 3)]
    inf, rec = make(client)
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        assert rec.wait(1) == [("add", "a", "1")]
    finally:
        inf.stop()


def test_other_watch_error_relists(client):
    client.list_pages = [page([cm("a", 5)], 10), page([cm("a", 5)], 30)]
    client.watch_scripts = [ApiError(403, "Forbidden", "no"), FakeStream([], end=False)]
    inf, rec = make(client)
    inf.start()
    try:
        got = rec.wait(2)
        assert got == [("add", "a", "5"), ("update", "a", "5", "5")]
    finally:
        inf.stop()


def test_handler_exception_is_not_fatal_and_handlers_run_in_order(client):
    client.list_pages = [page([cm("a", 1), cm("b", 2)], 3)]
    calls = []

    def bad(o):
        calls.append(("bad", o["metadata"]["name"]))
        raise RuntimeError("handler bug")

    inf = SharedInformer(client, CONFIGMAPS, namespace="ns", name="fake-order")
    inf.add_event_handler(on_add=bad)
    inf.add_event_handler(on_add=lambda o: calls.append(("good", o["metadata"]["name"])))
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        assert calls == [("bad", "a"), ("good", "a"), ("bad", "b"), ("good", "b")]
    finally:
        inf.stop()


def test_late_handler_gets_synthetic_adds(client):
    client.list_pages = [page([cm("a", 1), cm("b", 2)], 3)]
    client.watch_scripts = [FakeStream([], end=False)]
    inf, _ = make(client)
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        late = Recorder()
        inf.add_event_handler(late.add, late.update, late.delete)
        assert sorted(late.wait(2)) == [("add", "a", "1"), ("add", "b", "2")]
    finally:
        inf.stop()


def test_resync_redelivers_cached_objects_without_api_calls(client):
    client.list_pages = [page([cm("a", 1)], 3)]
    client.watch_scripts = [FakeStream([], end=False)]
    inf, rec = make(client, resync_period=0.05)
    inf.start()
    try:
        got = rec.wait(3)
        assert got[0] == ("add", "a", "1")
        assert got[1:3] == [("update", "a", "1", "1")] * 2
        assert len(client.list_queries) == 1 and len(client.watch_queries) == 1
    finally:
        inf.stop()


def test_events_resyncs_and_a_late_handlers_replay_never_interleave(client):
    """Handlers run on the reflector's thread under the informer's dispatch lock (there is no
    dispatch thread: docs/architecture.md 7.1): a resync every 2 ms and the replay of a
    handler added while events stream wait for the event being handled, so no handler runs twice at
    once, each event finds the Store already holding it, and the adds come in the server's order."""
    n = 100
    client.list_pages = [page([], 1)]
    client.watch_scripts = [FakeStream([ev("ADDED", cm(f"o{i}", i + 2)) for i in range(n)], end=False)]
    inf = SharedInformer(client, CONFIGMAPS, namespace="ns", name="fake-serial", resync_period=0.002)
    count = threading.Lock()
    inside, most, missing, adds = [0], [0], [], []

    def handle(o: dict, record: list | None = None) -> None:
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        if inf.get(f"ns/{o['metadata']['name']}") is not o:
            missing.append(o["metadata"]["name"])
        if record is not None:
            record.append(o["metadata"]["name"])
        time.sleep(0.0002)
        with count:
            inside[0] -= 1

    inf.add_event_handler(on_add=lambda o: handle(o, adds), on_update=lambda old, new: handle(new))
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        late: list[str] = []
        inf.add_event_handler(on_add=lambda o: handle(o, late), on_update=lambda old, new: handle(new))
        deadline = time.monotonic() + 10
        while len(adds) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert adds == [f"o{i}" for i in range(n)]
        assert most[0] == 1 and missing == []
        assert late and len(set(late)) == len(late)  # the replay, then the events after it: each once
    finally:
        inf.stop()


def test_transform_is_applied_before_caching(client):
    o = cm("a", 1)
    o["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    client.list_pages = [page([o], 2)]
    inf = SharedInformer(client, CONFIGMAPS, namespace="ns", transform=strip_managed_fields, name="fake-tr")
    inf.start()
    try:
        assert inf.wait_for_sync(3)
        assert "managedFields" not in inf.store.get("ns/a")["metadata"]
    finally:
        inf.stop()


def test_factory_resync_period_per_informer(client):
    f = InformerFactory(client, namespace="ns", resync_period=30)
    assert f.informer_for(CONFIGMAPS).resync_period == 30
    assert f.informer_for(PODS, resync_period=0).resync_period == 0
    assert f.informer_for(CONFIGMAPS, label_selector="x=y", resync_period=5).resync_period == 5


def test_factory_shares_informers(client):
    f = InformerFactory(client, namespace="ns")
    a = f.informer_for(CONFIGMAPS)
    assert f.informer_for(CONFIGMAPS) is a
    b = f.informer_for(CONFIGMAPS, label_selector="x=y")
    assert b is not a
    p = f.informer_for(PODS, transform=slim_pod)
    assert len(f.informers()) == 3
    f.start()
    try:
        assert f.wait_for_cache_sync(5)
        assert all(i.has_synced() for i in (a, b, p))
        late = f.informer_for(CONFIGMAPS, label_selector="late=1")
        assert late.wait_for_sync(3)  # started at once: the factory is running
    finally:
        f.stop()


def test_slim_pod_keeps_what_the_controller_reads():
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "managedFields": [{}], "labels": {"a": "b"},
                     "deletionTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [{"uid": "u"}]},
        "spec": {"nodeName": "n1", "hostname": "h", "subdomain": "s", "containers": [{"name": "c", "env": []}],
                 "volumes": [{}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "startTime": "t", "conditions": [{"type": "Ready"}],
                   "containerStatuses": [{"name": "c", "state": {"running": {}}, "restartCount": 2,
                                          "ready": True, "image": "img", "imageID": "id"}],
                   "qosClass": "BestEffort"},
    }
    s = slim_pod(pod)
    assert "managedFields" not in s["metadata"]
    assert s["metadata"]["deletionTimestamp"] and s["metadata"]["labels"] == {"a": "b"}
    assert s["spec"] == {"nodeName": "n1", "hostname": "h", "subdomain": "s"}
    assert s["status"]["containerStatuses"] == [{"name": "c", "state": {"running": {}}, "restartCount": 2,
                                                 "ready": True}]
    assert "qosClass" not in s["status"] and s["status"]["phase"] == "Running"
    assert "managedFields" in pod["metadata"]  # the input is not modified
    assert strip_managed_fields(pod)["metadata"].keys() == s["metadata"].keys()


def test_backoff_resets_once_a_watch_is_reestablished_even_a_quiet_one(client, monkeypatch):
    """Issue #14: cuts grew the backoff, and a watch with no events kept it grown for the next cut.
    A quiet watch counts as good once it lasted MIN_GOOD_WATCH_SECONDS (issue 24: not at once)."""
    monkeypatch.setattr(reflector_mod, "MIN_GOOD_WATCH_SECONDS", 0.05)
    client.list_pages = [page([cm("a", 5)], 10)]
    client.watch_scripts = [ConnectionResetError("cut")] * 5 + [FakeStream([], end=False)]
    inf, rec = make(client)
    inf.reflector.backoff = Backoff(0.001, 10.0, jitter=0.0)
    grown = []
    real_next = inf.reflector.backoff.next
    inf.reflector.backoff.next = lambda: grown.append(real_next()) or grown[-1]
    inf.start()
    try:
        rec.wait(1)
        wait = time.monotonic() + 3
        while inf.reflector.current_stream is None and time.monotonic() < wait:
            time.sleep(0.005)
        assert inf.reflector.current_stream is not None
        assert grown == [0.001, 0.002, 0.004, 0.008, 0.016]  # it did grow across the cuts
        time.sleep(0.1)  # the quiet watch lasts: a good one
        inf.reflector.disconnect()
        wait = time.monotonic() + 3
        while len(grown) < 6 and time.monotonic() < wait:
            time.sleep(0.005)
        assert grown[5] == 0.001  # so the quiet watch reset it: the next cut starts from the shortest
    finally:
        inf.stop()


def test_a_reflector_back_online_wakes_the_others_from_their_backoff():
    """The network back for one watch is back for all: no cache waits out a long backoff (issue #14)."""
    fast, slow = FakeApi(), FakeApi()
    for c in (fast, slow):
        c.list_pages = [page([], 10)]
    fast.watch_scripts = [ConnectionResetError("cut"), FakeStream([], end=False)]
    slow.watch_scripts = [ConnectionResetError("cut"), FakeStream([], end=False)]
    noop = lambda *a: None  # noqa: E731
    r_fast = Reflector(fast, CONFIGMAPS, noop, noop, backoff=Backoff(0.2, 0.2, jitter=0.0))
    r_slow = Reflector(slow, CONFIGMAPS, noop, noop, backoff=Backoff(30.0, 30.0, jitter=0.0))
    r_fast.on_reconnect = r_slow.retry_now
    threads = [threading.Thread(target=r.run, daemon=True) for r in (r_slow, r_fast)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 5
        while len(slow.watch_queries) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(slow.watch_queries) == 2, "the slow reflector slept off its 30 s backoff"
    finally:
        r_fast.stop()
        r_slow.stop()
