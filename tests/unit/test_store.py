"""Ports of client-go tools/cache store_test.go, index_test.go and thread_safe_store_test.go."""

from __future__ import annotations

import random
import threading

import pytest

from informers.store import (
    CONTROLLER_UID_INDEX,
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Store,
    controller_uid_index,
    label_index,
    meta_namespace_key,
    namespace_index,
    split_key,
)


def obj(name, ns="ns", labels=None, owner=None, rv="1", **extra):
    meta = {"name": name, "resourceVersion": rv}
    if ns:
        meta["namespace"] = ns
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [{"uid": "not-controller"}, {"uid": owner, "controller": True}]
    return {"metadata": meta, **extra}


@pytest.mark.parametrize(
    ("o", "key"),
    [
        (obj("a", "ns"), "ns/a"),
        (obj("a", None), "a"),
        (DeletedFinalStateUnknown("ns/x", obj("x")), "ns/x"),
        ("ns/raw", "ns/raw"),
    ],
)
def test_meta_namespace_key(o, key):
    assert meta_namespace_key(o) == key


def test_meta_namespace_key_needs_a_name():
    with pytest.raises(KeyError):
        meta_namespace_key({"metadata": {}})


@pytest.mark.parametrize(
    ("key", "want"), [("ns/name", ("ns", "name")), ("name", ("", "name")), ("/name", ("", "name"))]
)
def test_split_key(key, want):
    assert split_key(key) == want


def test_split_key_rejects_bad_keys():
    with pytest.raises(ValueError):
        split_key("a/b/c")


def test_store_basics():
    """store_test.go doTestStore: add, update, delete, list, list_keys, replace."""
    s = Store()
    s.add(obj("foo", data="bar"))
    assert s.get("ns/foo")["data"] == "bar"
    s.update(obj("foo", data="baz"))
    assert s.get("ns/foo")["data"] == "baz"
    s.delete(obj("foo"))
    assert s.get("ns/foo") is None
    assert len(s) == 0
    for n in ("a", "b", "c"):
        s.add(obj(n, data=n + n))
    assert sorted(o["data"] for o in s.list()) == ["aa", "bb", "cc"]
    assert sorted(s.list_keys()) == ["ns/a", "ns/b", "ns/c"]
    s.replace([obj("foo", data="foo"), obj("bar", data="bar")])
    assert sorted(s.list_keys()) == ["ns/bar", "ns/foo"]
    assert "ns/foo" in s and "ns/a" not in s
    # deleting what is not there is not an error
    assert s.delete(obj("nope")) is None
    assert s.delete("ns/foo")["data"] == "foo"


def test_delete_by_tombstone():
    s = Store()
    s.add(obj("x"))
    s.delete(DeletedFinalStateUnknown("ns/x", obj("x")))
    assert len(s) == 0


def test_index_by_namespace_and_owner():
    """index_test.go TestGetIndexFuncValues / thread_safe_store_test TestThreadSafeStoreIndexingFunctions."""
    s = Store({NAMESPACE_INDEX: namespace_index, CONTROLLER_UID_INDEX: controller_uid_index})
    s.add(obj("a", "n1", owner="u1"))
    s.add(obj("b", "n1", owner="u2"))
    s.add(obj("c", "n2", owner="u1"))
    s.add(obj("d", None))
    assert sorted(o["metadata"]["name"] for o in s.by_index(NAMESPACE_INDEX, "n1")) == ["a", "b"]
    assert sorted(o["metadata"]["name"] for o in s.by_index(CONTROLLER_UID_INDEX, "u1")) == ["a", "c"]
    assert s.by_index(CONTROLLER_UID_INDEX, "not-controller") == []
    assert sorted(s.list_index_func_values(NAMESPACE_INDEX)) == ["n1", "n2"]
    assert s.by_index(NAMESPACE_INDEX, "nope") == []
    with pytest.raises(KeyError):
        s.by_index("no-such-index", "x")


def test_update_moves_index_entries():
    """thread_safe_store_test.go TestThreadSafeStoreUpdateIndex... an update re-indexes."""
    s = Store({"role": label_index("role")})
    s.add(obj("a", labels={"role": "worker"}))
    s.add(obj("b", labels={"role": "worker"}))
    s.update(obj("a", labels={"role": "launcher"}))
    assert [o["metadata"]["name"] for o in s.by_index("role", "launcher")] == ["a"]
    assert [o["metadata"]["name"] for o in s.by_index("role", "worker")] == ["b"]
    s.delete(obj("b"))
    assert s.by_index("role", "worker") == []
    assert s.list_index_func_values("role") == ["launcher"]  # empty index values are dropped
    s.update(obj("a"))  # label removed
    assert s.by_index("role", "launcher") == []


def test_multi_value_index():
    """index_test.go testIndexFunc with several values per object."""

    def users(o):
        return o["metadata"].get("annotations", {}).get("users", "").split(",")

    s = Store({"users": users})
    a = obj("a")
    a["metadata"]["annotations"] = {"users": "ernie,bert"}
    b = obj("b")
    b["metadata"]["annotations"] = {"users": "bert,oscar"}
    s.add(a)
    s.add(b)
    assert sorted(o["metadata"]["name"] for o in s.by_index("users", "bert")) == ["a", "b"]
    assert sorted(s.index_keys("users", "ernie")) == ["ns/a"]
    b2 = obj("b")
    b2["metadata"]["annotations"] = {"users": "elmo"}
    s.update(b2)
    assert sorted(o["metadata"]["name"] for o in s.by_index("users", "bert")) == ["a"]
    assert sorted(s.list_index_func_values("users")) == ["bert", "elmo", "ernie"]


def test_add_indexers_indexes_existing_objects_and_rejects_duplicates():
    s = Store()
    s.add(obj("a", "n1"))
    s.add_indexers({NAMESPACE_INDEX: namespace_index})
    assert len(s.by_index(NAMESPACE_INDEX, "n1")) == 1
    s.add_indexers({NAMESPACE_INDEX: namespace_index})  # the same function again: a no-op
    with pytest.raises(ValueError):
        s.add_indexers({NAMESPACE_INDEX: controller_uid_index})


def test_replace_rebuilds_indices():
    s = Store({NAMESPACE_INDEX: namespace_index})
    s.add(obj("a", "n1"))
    s.replace([obj("b", "n2")])
    assert s.by_index(NAMESPACE_INDEX, "n1") == []
    assert [o["metadata"]["name"] for o in s.by_index(NAMESPACE_INDEX, "n2")] == ["b"]


def test_concurrent_writers_keep_indices_consistent():
    s = Store({NAMESPACE_INDEX: namespace_index, "role": label_index("role")})
    names = [f"o{i}" for i in range(50)]

    def churn(seed):
        rnd = random.Random(seed)
        for _ in range(2000):
            n = rnd.choice(names)
            if rnd.random() < 0.3:
                s.delete(f"ns/{n}")
            else:
                s.add(obj(n, labels={"role": rnd.choice(["launcher", "worker"])}))
            s.by_index("role", "worker")

    ts = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    by_role = {r: {o["metadata"]["name"] for o in s.by_index("role", r)} for r in ("launcher", "worker")}
    assert by_role["launcher"] | by_role["worker"] == {o["metadata"]["name"] for o in s.list()}
    assert not by_role["launcher"] & by_role["worker"]
    for o in s.list():
        assert o["metadata"]["name"] in by_role[o["metadata"]["labels"]["role"]]
    assert len(s.by_index(NAMESPACE_INDEX, "ns")) == len(s)
