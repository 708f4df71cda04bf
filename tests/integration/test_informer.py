"""Informers and the REST transport against the local API server: CRUD events, recovery after the
watch connection is cut, relist with tombstones after an outage that ends in 410 Expired, a stale
resourceVersion, and a ServiceAccount-token kubeconfig."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import urllib3
import yaml
from prometheus_client import REGISTRY

from client.errors import ApiError
from client.resources import CONFIGMAPS, SECRETS
from client.rest import RestClient
from informers.informer import SharedInformer
from informers.store import NAMESPACE_INDEX, DeletedFinalStateUnknown
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def client(kubeconfig) -> RestClient:
    return RestClient.from_kubeconfig(kubeconfig, qps=200, burst=200)


class Recorder:
    def __init__(self):
        self.events: list[tuple] = []
        self.lock = threading.Lock()

    def handlers(self):
        return {"on_add": self.add, "on_update": self.update, "on_delete": self.delete}

    def add(self, o):
        with self.lock:
            self.events.append(("add", o["metadata"]["name"]))

    def update(self, old, new):
        with self.lock:
            self.events.append(("update", new["metadata"]["name"], new["data"]))

    def delete(self, o):
        with self.lock:
            if isinstance(o, DeletedFinalStateUnknown):
                self.events.append(("tombstone", o.key))
            else:
                self.events.append(("delete", o["metadata"]["name"]))

    def has(self, e):
        with self.lock:
            return e in self.events


def cm(client, ns, name, data="1"):
    return client.request("POST", CONFIGMAPS.path(ns), body={"metadata": {"name": name}, "data": {"v": data}})


def fresh(client, ns) -> dict[str, str]:
    lst = client.request("GET", CONFIGMAPS.path(ns))
    return {f"{ns}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in lst["items"]}


def cached(inf) -> dict[str, str]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
            for o in inf.store.list()}


def start(client, ns, rec, **kw) -> SharedInformer:
    inf = SharedInformer(client, CONFIGMAPS, namespace=ns, name=f"it-{ns}", **kw)
    inf.add_event_handler(**rec.handlers())
    inf.start()
    assert inf.wait_for_sync(30)
    return inf


def test_informer_sees_creates_updates_deletes(client, namespace):
    rec = Recorder()
    cm(client, namespace, "before")
    inf = start(client, namespace, rec)
    try:
        assert rec.has(("add", "before"))
        cm(client, namespace, "x")
        client.request("PATCH", CONFIGMAPS.path(namespace, "x"), body={"data": {"v": "2"}}, content_type=MERGE)
        client.request("DELETE", CONFIGMAPS.path(namespace, "x"))
        wait_until(lambda: rec.has(("delete", "x")), 30, 0.05, "delete event")
        with rec.lock:
            mine = [e for e in rec.events if e[1] == "x"]
        assert mine == [("add", "x"), ("update", "x", {"v": "2"}), ("delete", "x")]
        assert inf.store.get(f"{namespace}/x") is None
        in_ns = {o["metadata"]["name"] for o in inf.store.by_index(NAMESPACE_INDEX, namespace)}
        assert "before" in in_ns and "x" not in in_ns
        assert cached(inf) == fresh(client, namespace)
        assert REGISTRY.get_sample_value("informer_list_total", {"resource": inf.name}) == 1
        assert REGISTRY.get_sample_value("informer_events_total", {"resource": inf.name, "type": "DELETED"}) >= 1
    finally:
        inf.stop()


def test_recovers_after_the_watch_connection_is_cut(client, namespace):
    rec = Recorder()
    for n in "abc":
        cm(client, namespace, n)
    inf = start(client, namespace, rec)
    try:
        wait_until(lambda: inf.reflector.current_stream is not None, 10, 0.05, "watch running")
        watches = inf.reflector.watches
        inf.reflector.disconnect()  # the socket is shut down under the reader
        client.request("PATCH", CONFIGMAPS.path(namespace, "a"), body={"data": {"v": "2"}}, content_type=MERGE)
        client.request("DELETE", CONFIGMAPS.path(namespace, "b"))
        cm(client, namespace, "d")
        wait_until(lambda: cached(inf) == fresh(client, namespace), 30, 0.1, "store == fresh list")
        assert inf.reflector.watches > watches  # it watched again...
        assert inf.reflector.lists == 1  # ...from its resourceVersion, without a relist
        assert rec.has(("delete", "b")) and rec.has(("add", "d")) and rec.has(("update", "a", {"v": "2"}))
        # and it keeps working
        cm(client, namespace, "e")
        wait_until(lambda: rec.has(("add", "e")), 30, 0.05, "event after recovery")
    finally:
        inf.stop()


class Outage:
    """Wraps a RestClient's stream(): while `down`, watches fail as if the server were unreachable;
    the first watch after it comes back starts with the ERROR 410 event an API server sends when
    the requested resourceVersion is older than what it still has."""

    def __init__(self, client: RestClient):
        self.client, self.real = client, client.stream
        self.down = threading.Event()
        self.expire_next = False
        self.calls = 0

    def __enter__(self):
        self.client.stream = self.stream
        return self

    def __exit__(self, *exc):
        self.client.stream = self.real

    def stream(self, path, query=None, timeout=80):
        self.calls += 1
        if self.down.is_set():
            raise urllib3.exceptions.NewConnectionError(None, "connection refused (simulated outage)")
        if self.expire_next:
            self.expire_next = False
            rv = (query or {}).get("resourceVersion")
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired",
                      "message": f"too old resource version: {rv}"}
            return _Events([{"type": "ERROR", "object": status}])
        return self.real(path, query, timeout)


class _Events(list):
    def close(self):
        pass

    def shutdown(self):
        pass


# exclusive: its outage is its own client's, but its 0.2 s backoffs and 'nothing seen while down'
# are timed against the watch thread; alone, a busy machine cannot stretch them
@pytest.mark.exclusive
def test_outage_ending_in_410_relists_with_tombstones(client, namespace):
    rec = Recorder()
    for n in "abc":
        cm(client, namespace, n)
    with Outage(client) as outage:
        inf = start(client, namespace, rec)
        inf.reflector.backoff.initial = inf.reflector.backoff._next = 0.2
        try:
            wait_until(lambda: inf.reflector.current_stream is not None, 10, 0.05, "watch running")
            relists = REGISTRY.get_sample_value("informer_relist_total", {"resource": inf.name}) or 0
            outage.down.set()
            inf.reflector.disconnect()
            # Until the watch thread has seen its stream end, an event sent on it may still be read
            # (Linux delivers data that arrives after a shutdown): the writes wait for that.
            wait_until(lambda: inf.reflector.current_stream is None, 10, 0.01, "the watch stream ended")
            client.request("DELETE", CONFIGMAPS.path(namespace, "b"))
            client.request("PATCH", CONFIGMAPS.path(namespace, "a"), body={"data": {"v": "2"}},
                           content_type=MERGE)
            cm(client, namespace, "d")
            wait_until(lambda: outage.calls >= 3, 30, 0.05, "reconnect attempts during the outage")
            assert not rec.has(("delete", "b"))  # nothing seen while down
            outage.expire_next = True
            outage.down.clear()
            wait_until(lambda: cached(inf) == fresh(client, namespace), 60, 0.1, "store == fresh list")
            assert inf.reflector.lists == 2
            assert REGISTRY.get_sample_value("informer_watch_errors_total",
                                             {"resource": inf.name, "kind": "expired"}) == 1
            assert REGISTRY.get_sample_value("informer_relist_total", {"resource": inf.name}) == relists + 1
            assert rec.has(("tombstone", f"{namespace}/b"))  # deleted while down: a tombstone
            assert rec.has(("add", "d")) and rec.has(("update", "a", {"v": "2"}))
            cm(client, namespace, "e")
            wait_until(lambda: rec.has(("add", "e")), 30, 0.05, "events after the relist")
        finally:
            inf.stop()


def _compact_etcd() -> int | None:
    """Compacts the local etcd to its current revision (what kube-apiserver does every 5 minutes).
    Returns the revision, or None when etcd is not reachable (a kind cluster)."""
    http = urllib3.PoolManager(timeout=5.0, retries=False)
    try:
        r = http.request("POST", "http://127.0.0.1:2379/v3/kv/range",
                         body=json.dumps({"key": "AA==", "limit": 1, "keys_only": True}))
        rev = int(json.loads(r.data)["header"]["revision"])
        http.request("POST", "http://127.0.0.1:2379/v3/kv/compaction",
                     body=json.dumps({"revision": str(rev), "physical": True}))
        return rev
    except (urllib3.exceptions.HTTPError, KeyError, ValueError):
        return None


def test_stale_resource_version_after_compaction_converges(client, namespace):
    """The reflector is made to watch from resourceVersion 1 after an etcd compaction. The API
    server either replays from its watch cache or answers 410 (then the reflector relists): either
    way no crash, and the store equals a fresh list and keeps following changes."""
    rec = Recorder()
    cm(client, namespace, "a")
    inf = start(client, namespace, rec)
    try:
        wait_until(lambda: inf.reflector.current_stream is not None, 10, 0.05, "watch running")
        client.request("DELETE", CONFIGMAPS.path(namespace, "a"))
        cm(client, namespace, "b")
        if _compact_etcd() is None:
            pytest.skip("etcd is not reachable on 127.0.0.1:2379 (not the local cluster): cannot compact")
        inf.reflector.last_resource_version = "1"
        inf.reflector.disconnect()
        # The store may already equal a fresh list (the first watch delivered the delete and the add):
        # wait for the reflector to watch again first, so that what follows comes after the stale watch.
        wait_until(lambda: inf.reflector.watches >= 2 and inf.reflector.current_stream is not None, 60, 0.05,
                   "a watch again after the stale one")
        wait_until(lambda: cached(inf) == fresh(client, namespace), 60, 0.1, "store == fresh list")
        cm(client, namespace, "c")
        wait_until(lambda: rec.has(("add", "c")), 30, 0.05, "events after the stale watch")
        assert int(inf.last_sync_resource_version) > 1
    finally:
        inf.stop()


def test_service_account_token_kubeconfig(client, kubectl, kubeconfig, namespace, tmp_path: Path):
    """A ServiceAccount with read access to ConfigMaps in one namespace: its token kubeconfig works
    for RestClient (requests and an informer), and what it may not do is a 403 ApiError."""
    kubectl("create", "serviceaccount", "reader", "-n", namespace)
    kubectl("create", "role", "cm-reader", "-n", namespace, "--verb=get,list,watch", "--resource=configmaps")
    kubectl("create", "rolebinding", "cm-reader", "-n", namespace, "--role=cm-reader",
            f"--serviceaccount={namespace}:reader")
    token = kubectl("create", "token", "reader", "-n", namespace, "--duration=10m").stdout.strip()
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "reader", "user": {"token": token}}],
        "contexts": [{"name": "reader", "context": {"cluster": "local", "user": "reader", "namespace": namespace}}],
        "current-context": "reader",
    }
    path = tmp_path / "sa.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    sa = RestClient.from_kubeconfig(str(path), qps=50, burst=50)
    cm(client, namespace, "visible")
    # RBAC takes effect at once, but the binding may need a moment to reach the authorizer cache
    wait_until(lambda: _can_list(sa, namespace), 30, 0.2, "the reader's binding to take effect")
    got = sa.request("GET", CONFIGMAPS.path(namespace, "visible"))
    assert got["data"] == {"v": "1"}
    with pytest.raises(ApiError) as e:
        sa.request("GET", SECRETS.path(namespace))
    assert e.value.status == 403 and e.value.reason == "Forbidden"
    with pytest.raises(ApiError) as e:
        sa.request("POST", CONFIGMAPS.path(namespace), body={"metadata": {"name": "nope"}})
    assert e.value.status == 403
    rec = Recorder()
    inf = start(sa, namespace, rec)
    try:
        assert inf.store.get(f"{namespace}/visible") is not None
        cm(client, namespace, "later")
        wait_until(lambda: rec.has(("add", "later")), 30, 0.05, "watch with the SA token")
    finally:
        inf.stop()
    # whoami through the same client: it is the ServiceAccount
    review = sa.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:reader"


def _can_list(sa: RestClient, ns: str) -> bool:
    try:
        sa.request("GET", CONFIGMAPS.path(ns))
        return True
    except ApiError:
        return False


def test_rest_client_errors_and_rate_limit(client, namespace):
    cm(client, namespace, "dup")
    with pytest.raises(ApiError) as e:
        cm(client, namespace, "dup")
    assert (e.value.status, e.value.reason) == (409, "AlreadyExists")
    assert e.value.body["kind"] == "Status"
    with pytest.raises(ApiError) as e:
        client.request("GET", CONFIGMAPS.path(namespace, "missing"))
    assert (e.value.status, e.value.reason) == (404, "NotFound")
    # optimistic concurrency: an update with a stale resourceVersion is a Conflict
    cur = client.request("GET", CONFIGMAPS.path(namespace, "dup"))
    client.request("PATCH", CONFIGMAPS.path(namespace, "dup"), body={"data": {"v": "2"}}, content_type=MERGE)
    with pytest.raises(ApiError) as e:
        client.request("PUT", CONFIGMAPS.path(namespace, "dup"), body=cur)
    assert (e.value.status, e.value.reason) == (409, "Conflict")
    before = REGISTRY.get_sample_value("rest_client_requests_total", {"method": "GET", "code": "200"}) or 0
    slow = RestClient(client.api_client, qps=20, burst=1)
    t0 = time.monotonic()
    for _ in range(6):
        slow.request("GET", CONFIGMAPS.path(namespace, "dup"))
    assert time.monotonic() - t0 >= 0.2  # 5 tokens at 20 qps after a burst of 1
    assert REGISTRY.get_sample_value("rest_client_requests_total", {"method": "GET", "code": "200"}) >= before + 6


def test_kubectl_and_cache_agree_on_a_busy_namespace(client, kubectl, namespace):
    """Many concurrent writes while the informer runs: the cache ends equal to the server's list."""
    rec = Recorder()
    inf = start(client, namespace, rec)
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: cm(client, namespace, f"o{i}"), range(200)))
            list(pool.map(lambda i: client.request("DELETE", CONFIGMAPS.path(namespace, f"o{i}")), range(0, 200, 3)))
        wait_until(lambda: cached(inf) == fresh(client, namespace), 60, 0.1, "store == fresh list")
        names = set(kubectl("get", "configmaps", "-n", namespace, "-o", "name").stdout.split())
        assert {f"configmap/{k.split('/')[1]}" for k in cached(inf)} == names
    finally:
        inf.stop()

