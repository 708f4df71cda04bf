"""Fixtures of the Kueue e2e modules (e2e/test_kueue*.py), registered through e2e/conftest.py:
Kueue's CRDs and one Kueue process per module (its configuration is global), kwok nodes of this
run's own, queues usable only from the test's namespace, and a record of what Kueue saw of each
MPIJob (admission -> PodsReady). Every cluster-scoped object has a name of its own and is deleted
after; Kueue objects whose finalizers Kueue cannot remove lose them (see release())."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kueue import (
    PODS_READY_TIMEOUT_S,
    KueueProcess,
    admitted_to_pods_ready,
    build,
    cluster_queue,
    local_queue,
    queued,
    resource_flavor,
    wait_workload,
    workload_priority_class,
)

from reconcilers.names import JOB_NAME_LABEL
from testsupport.kubectl import apply, get, items, live, release_held_pods, wait_established
from testsupport.waiting import wait_until

SESSION = uuid.uuid4().hex[:6]
LABEL_PREFIX = "kueue-e2e.mpijob-operator.dev"
TAINT = f"{LABEL_PREFIX}/dedicated"
POOLS = ("a", "b")


@dataclass
class Pool:
    """A kwok node of this run's own, and the labels a flavor uses to put pods on it."""

    node: str
    labels: dict[str, str]


@pytest.fixture(scope="module")
def kueue_crds(kubectl) -> Path:
    """Kueue built (once per machine) and its CRDs applied from the Go module cache."""
    return install_crds(kubectl)


def install_crds(kubectl) -> Path:
    """Kueue's CRDs applied to the cluster of `kubectl`, Established; Kueue's binary."""
    binary, crds = build()
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout=120)
    # <group>_<plural>.yaml -> <plural>.<group>
    wait_established(kubectl, *(f"{f.stem.split('_', 1)[1]}.{f.stem.split('_', 1)[0]}"
                                for f in sorted(crds.glob("*.yaml"))))
    return binary


def kwok_node(name: str, labels: dict[str, str], cpu: str = "32") -> dict:
    # The taint keeps every other engineer's pods off; only this run's flavors tolerate it. Each
    # pool has a label key of its own, so re-admission on the other flavor changes keys.
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}},
            "spec": {"taints": [{"key": TAINT, "value": SESSION, "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                       "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"}}}


@pytest.fixture(scope="module")
def pools(kubectl) -> Iterator[dict[str, Pool]]:
    made = {p: Pool(f"kueue-e2e-{SESSION}-{p}", {f"{LABEL_PREFIX}/pool-{p}": SESSION}) for p in POOLS}
    try:
        for pool in made.values():
            kubectl("apply", "-f", "-", input=json.dumps(kwok_node(pool.node, pool.labels)))
        wait_nodes_ready(kubectl, [p.node for p in made.values()])
        yield made
    finally:
        kubectl("delete", "node", *(p.node for p in made.values()), "--ignore-not-found", "--wait=false", check=False)


def wait_nodes_ready(kubectl, names: list[str]) -> None:
    def ready() -> bool:
        return all(any(c["type"] == "Ready" and c["status"] == "True"
                       for c in (get(kubectl, "", "node", n) or {}).get("status", {}).get("conditions", []))
                   for n in names)

    wait_until(ready, 60, what=f"kwok nodes {names} Ready")


@pytest.fixture(scope="module")
def kueue_namespace(kubectl) -> Iterator[str]:
    """Kueue's own namespace (its Configuration's; MultiKueue's kubeconfig Secrets live there): one
    per module, as the previous module's may still be terminating."""
    name = f"kueue-e2e-{SESSION}-{uuid.uuid4().hex[:4]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)
    release_held_pods(kubectl, name)


@pytest.fixture(scope="module")
def kueue(kueue_crds, kubeconfig, kueue_namespace, crd, tmp_path_factory) -> Iterator[KueueProcess]:
    """One Kueue for every test of this module (its configuration is global: see kueue.py)."""
    proc = KueueProcess(kueue_crds, kubeconfig, tmp_path_factory.mktemp("kueue"), kueue_namespace)
    try:
        try:
            took = proc.wait_ready()
        except AssertionError:
            print(f"\n--- kueue log ({proc.log_path}), last lines ---\n{proc.tail(80)}")
            raise
        print(f"\nkueue ready in {took:.1f}s, log {proc.log_path}")
        yield proc
        print(f"\nkueue RSS at the end: {proc.rss_mib():.0f} MiB")
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def pods_ready_times(request) -> Iterator[list[tuple[str, float]]]:
    """(test, seconds from admission to PodsReady) of every MPIJob that got Running under Kueue in
    this module, printed at its end (`pytest -s`): the figure WaitForPodsReady's timeout bounds."""
    seen: list[tuple[str, float]] = []
    yield seen
    if seen:
        worst = max(t for _, t in seen)
        print(f"\n{request.module.__name__}: admission -> PodsReady, {len(seen)} MPIJobs, max {worst:.0f}s "
              f"(WaitForPodsReady timeout {PODS_READY_TIMEOUT_S}s):")
        for test, t in seen:
            print(f"  {t:4.0f}s  {test}")


@pytest.fixture
def pods_ready(request, kubectl, pods_ready_times) -> Callable[..., dict]:
    """pods_ready(ns, name, kubectl=...) -> the Workload once Kueue has seen the MPIJob's pods ready
    (its Running condition); the time since admission is recorded, and must be far inside the
    timeout: a tenth of it is already minutes more than any MPIJob here needs."""

    def wait(ns: str, name: str, kubectl: Callable = kubectl) -> dict:
        w = wait_workload(kubectl, ns, name, "PodsReady", timeout=60)
        took = admitted_to_pods_ready(w)
        pods_ready_times.append((f"{request.node.name} {name}", took))
        assert took < PODS_READY_TIMEOUT_S / 10, (took, w["status"])
        return w

    return wait


@pytest.fixture(autouse=True)
def kueue_log(request) -> Iterator[None]:
    """Kueue's log lines of this test, printed (shown by pytest only when the test fails)."""
    if "kueue" not in request.fixturenames:
        yield
        return
    proc: KueueProcess = request.getfixturevalue("kueue")
    start = proc.log_path.stat().st_size
    yield
    with open(proc.log_path, errors="replace") as f:
        f.seek(start)
        lines = f.read().splitlines()
    print(f"\n--- kueue log ({proc.log_path}), last lines of this test ---\n" + "\n".join(lines[-80:]))


@dataclass
class Queues:
    local: str
    cluster: str
    flavors: dict[str, str]  # pool -> flavor name


@pytest.fixture
def queues(kubectl, kueue, pools, namespace) -> Iterator:
    """queues({pool: cpu quota}, preempt=False) -> Queues: flavors, a ClusterQueue only this test's
    namespace may use, and a LocalQueue in it; all deleted afterwards."""
    tag = uuid.uuid4().hex[:6]
    cluster_scoped: list[tuple[str, str]] = []

    def make(quota: dict[str, str], preempt: bool = False) -> Queues:
        flavors = {p: f"kueue-e2e-{tag}-{p}" for p in quota}
        for p, f in flavors.items():
            create(kubectl, "resourceflavors.kueue.x-k8s.io", resource_flavor(f, pools[p].labels, TAINT),
                   cluster_scoped)
        cq = f"kueue-e2e-{tag}"
        create(kubectl, "clusterqueues.kueue.x-k8s.io",
               cluster_queue(cq, namespace, {flavors[p]: q for p, q in quota.items()}, preempt), cluster_scoped)
        apply(kubectl, namespace, local_queue("q", cq))
        return Queues("q", cq, flavors)

    def priority(name: str, value: int) -> str:
        full = f"kueue-e2e-{tag}-{name}"
        create(kubectl, "workloadpriorityclasses.kueue.x-k8s.io", workload_priority_class(full, value), cluster_scoped)
        return full

    make.priority = priority  # type: ignore[attr-defined]
    yield make
    # The MPIJobs first: Kueue keeps a ClusterQueue (and its flavors) while Workloads use it.
    kubectl("-n", namespace, "delete", "mpijobs", "--all", "--wait=false", check=False)
    release(kubectl, namespace, "workloads.kueue.x-k8s.io", [w["metadata"]["name"] for w in
                                                            items(kubectl, namespace, "workloads.kueue.x-k8s.io")])
    for kind, name in reversed(cluster_scoped):
        release(kubectl, None, kind, [name])


def release(kubectl, ns: str | None, kind: str, names: list[str], timeout: float = 30) -> None:
    """Deletes Kueue objects; any still there after `timeout` loses its finalizers. Kueue removes
    them itself, unless it cannot see the MPIJobs (the malformed-MPIJob bug below, also when one is
    elsewhere on this shared cluster): then nothing may be left behind for the other engineers."""
    scope = ["-n", ns] if ns else []
    if not names:
        return
    kubectl(*scope, "delete", kind, *names, "--ignore-not-found", "--wait=false", check=False)

    def left() -> list[str]:
        return [n for n in names if kubectl(*scope, "get", kind, n, check=False).returncode == 0]

    try:
        wait_until(lambda: not left(), timeout, what=f"{kind} {names} deleted")
    except AssertionError:
        for n in left():
            print(f"{kind} {n} still there after {timeout}s: finalizers removed")
            kubectl(*scope, "patch", kind, n, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)


def create(kubectl, kind: str, obj: dict, made: list[tuple[str, str]]) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(obj))
    made.append((kind, obj["metadata"]["name"]))


def submit(kubectl, ns: str, job: dict, queue: str, priority: str | None = None) -> None:
    apply(kubectl, ns, queued(job, queue, priority))


def all_pods(kubectl, ns: str, name: str) -> list[dict]:
    return items(kubectl, ns, "pods", f"{JOB_NAME_LABEL}={name}")


def worker_template(kubectl, ns: str, name: str, backend: str) -> dict:
    kind = "statefulset" if backend == "statefulset" else "job"
    return get(kubectl, ns, kind, f"{name}-worker")["spec"]["template"]


def running_pods(kubectl, ns: str, name: str, workers: int) -> list[dict]:
    """Every pod of a running MPIJob (launcher and workers), once all are there."""
    def check() -> list[dict]:
        ps = live(all_pods(kubectl, ns, name))
        return ps if len(ps) == workers + 1 else []

    return wait_until(check, 60, what=f"{workers} workers and the launcher of {ns}/{name}")

