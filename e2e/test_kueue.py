"""Kueue, the suspend protocol's main user, against this operator, for both worker backends: the
real Kueue (hack/build-kueue.sh) admits MPIJobs by resuming them with its flavor's nodeSelector and
tolerations, holds them suspended without quota, evicts them (preemption, deactivation) by
suspending them again, and reads their conditions for PodsReady and Finished.

Kueue is cluster-wide on a cluster other engineers share: it manages only MPIJobs with its
queue-name label, and every cluster-scoped object here (nodes, flavors, ClusterQueues, priority
classes) has a name of its own, is usable only from the test's namespace, and is deleted after."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kueue import (
    RECOVERY_TIMEOUT_S,
    KueueProcess,
    admitted_flavors,
    build,
    cluster_queue,
    local_queue,
    mpijob_suspended,
    queued,
    resource_flavor,
    set_active,
    wait_workload,
    wl_condition,
    workload,
    workload_priority_class,
)

from reconcilers.names import JOB_NAME_LABEL
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, conditions, get, items, live, now, pods, wait_condition
from testsupport.paths import CRD
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
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
    binary, crds = build()
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout=120)
    # <group>_<plural>.yaml -> crd/<plural>.<group>
    names = [f"crd/{f.stem.split('_', 1)[1]}.{f.stem.split('_', 1)[0]}" for f in sorted(crds.glob("*.yaml"))]

    def established() -> bool:
        # Polled: `kubectl wait` errors out on a CRD so new that it has no status yet.
        r = kubectl("get", *names, "-o", "json", check=False)
        return r.returncode == 0 and all(
            any(c["type"] == "Established" and c["status"] == "True" for c in (i.get("status") or {})
                .get("conditions") or []) for i in json.loads(r.stdout)["items"])

    wait_until(established, 60, what="Kueue's CRDs Established")
    return binary


def kwok_node(name: str, labels: dict[str, str]) -> dict:
    # The taint keeps every other engineer's pods off; only this run's flavors tolerate it. Each
    # pool has a label key of its own, so re-admission on the other flavor changes keys.
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}},
            "spec": {"taints": [{"key": TAINT, "value": SESSION, "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110"},
                       "capacity": {"cpu": "32", "memory": "64Gi", "pods": "110"}}}


@pytest.fixture(scope="module")
def pools(kubectl) -> Iterator[dict[str, Pool]]:
    made = {p: Pool(f"kueue-e2e-{SESSION}-{p}", {f"{LABEL_PREFIX}/pool-{p}": SESSION}) for p in POOLS}
    try:
        for pool in made.values():
            kubectl("apply", "-f", "-", input=json.dumps(kwok_node(pool.node, pool.labels)))

        def ready() -> bool:
            return all(any(c["type"] == "Ready" and c["status"] == "True"
                           for c in (get(kubectl, "", "node", p.node) or {}).get("status", {}).get("conditions", []))
                       for p in made.values())

        wait_until(ready, 60, what="this run's kwok nodes Ready")
        yield made
    finally:
        kubectl("delete", "node", *(p.node for p in made.values()), "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def kueue_namespace(kubectl) -> Iterator[str]:
    name = f"kueue-e2e-{SESSION}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


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


def test_admitted_on_its_flavor_runs_to_succeeded_and_finishes_the_workload(
        kubectl, kueue, operator, namespace, backend, queues, pools):
    q = queues({"a": "1"})
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs="4s"), q.local)
    # No Suspended to wait for: Kueue admits in milliseconds, often before the operator's first
    # reconcile, which then never sees the MPIJob suspended (the quota test holds one suspended).
    w = wait_workload(kubectl, namespace, "pi", "Admitted")
    assert admitted_flavors(w) == {q.flavors["a"]}, w["status"]

    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    for p in running_pods(kubectl, namespace, "pi", 2):
        assert p["spec"].get("nodeSelector") == pools["a"].labels, (p["metadata"]["name"], p["spec"])
        assert p["spec"]["nodeName"] == pools["a"].node
        assert any(t.get("key") == TAINT for t in p["spec"].get("tolerations", []))
    assert worker_template(kubectl, namespace, "pi", backend)["spec"]["nodeSelector"] == pools["a"].labels

    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=60)
    finished = wait_workload(kubectl, namespace, "pi", "Finished", timeout=30)
    assert wl_condition(finished, "Finished")["reason"] == "Succeeded", finished["status"]


def test_over_quota_mpijob_waits_suspended_without_pods_until_the_first_finishes(
        kubectl, kueue, operator, namespace, backend, queues):
    # Each MPIJob asks 3 x 10m (launcher and 2 workers): one fits in 40m, two do not.
    q = queues({"a": "40m"})
    submit(kubectl, namespace, simulated_mpijob("one", launcher_runs="6s"), q.local)
    wait_workload(kubectl, namespace, "one", "Admitted")
    submit(kubectl, namespace, simulated_mpijob("two", launcher_runs="2s"), q.local)
    wait_until(lambda: workload(kubectl, namespace, "two"), 30, what="Workload of two")

    # Until one has finished, two stays suspended, without a single pod.
    deadline, shown_suspended = now() + 90, False
    while conditions(kubectl, namespace, "one").get("Succeeded", {}).get("status") != "True":
        assert now() < deadline, f"one never succeeded: {conditions(kubectl, namespace, 'one')}"
        assert mpijob_suspended(kubectl, namespace, "two")
        assert not all_pods(kubectl, namespace, "two")
        w = workload(kubectl, namespace, "two")
        assert wl_condition(w, "QuotaReserved").get("status") != "True", w["status"]
        assert "Failed" not in conditions(kubectl, namespace, "one")
        # Seen inside the loop: once one has succeeded, two may be resumed within milliseconds.
        shown_suspended |= conditions(kubectl, namespace, "two").get("Suspended", {}).get("status") == "True"
        time.sleep(0.5)
    assert shown_suspended, "two never showed Suspended while it waited for quota"
    one_done = get(kubectl, namespace, "mpijob", "one")["status"]["completionTime"]

    wait_condition(kubectl, namespace, "two", "Succeeded", timeout=90)
    first_pod = min(p["metadata"]["creationTimestamp"] for p in all_pods(kubectl, namespace, "two"))
    assert first_pod >= one_done, (first_pod, one_done)
    wait_workload(kubectl, namespace, "two", "Finished", timeout=30)


def test_preempted_mpijob_loses_every_pod_then_runs_again_from_scratch(
        kubectl, kueue, operator, namespace, backend, queues):
    q = queues({"a": "40m"}, preempt=True)
    low, high = queues.priority("low", 100), queues.priority("high", 1000)
    # The launcher runs long enough to be preempted mid-run, short enough to finish on its rerun.
    submit(kubectl, namespace, simulated_mpijob("low", launcher_runs="15s"), q.local, low)
    wait_condition(kubectl, namespace, "low", "Running", timeout=60)
    first_run = {p["metadata"]["uid"] for p in running_pods(kubectl, namespace, "low", 2)}

    submit(kubectl, namespace, simulated_mpijob("high", launcher_runs="3s"), q.local, high)
    t0 = now()
    wait_until(lambda: not live(all_pods(kubectl, namespace, "low")), 20, interval=0.2,
               what="every pod of the preempted MPIJob gone")
    gone_after = now() - t0
    wait_condition(kubectl, namespace, "low", "Suspended", timeout=10)
    assert "Succeeded" not in conditions(kubectl, namespace, "low"), "preempted too late: it had finished"
    w = wait_workload(kubectl, namespace, "low", "Preempted", timeout=10)
    assert wl_condition(w, "Preempted")["reason"] == "InClusterQueue", w["status"]

    wait_condition(kubectl, namespace, "high", "Succeeded", timeout=90)
    wait_condition(kubectl, namespace, "low", "Running", timeout=90)
    second_run = {p["metadata"]["uid"] for p in running_pods(kubectl, namespace, "low", 2)}
    assert not first_run & second_run, "the rerun reused pods of the preempted run"
    wait_condition(kubectl, namespace, "low", "Succeeded", timeout=90)
    wait_workload(kubectl, namespace, "low", "Finished", timeout=30)
    print(f"preempted MPIJob's pods all gone {gone_after:.1f}s after the higher-priority one was submitted")


def test_readmitted_on_a_flavor_with_other_keys_gets_exactly_its_selector(
        kubectl, kueue, operator, namespace, backend, queues, pools):
    q = queues({"a": "1", "b": "1"})
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None), q.local)
    w = wait_workload(kubectl, namespace, "pi", "Admitted")
    assert admitted_flavors(w) == {q.flavors["a"]}
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    assert all(p["spec"]["nodeSelector"] == pools["a"].labels for p in running_pods(kubectl, namespace, "pi", 2))

    # Deactivated: Kueue suspends the MPIJob and takes flavor a's selector back off its templates.
    set_active(kubectl, namespace, w["metadata"]["name"], False)
    wait_condition(kubectl, namespace, "pi", "Suspended", timeout=30)
    wait_until(lambda: not live(all_pods(kubectl, namespace, "pi")), 30, what="every pod stopped")
    # Flavor a is full from now on: the only place left is flavor b, whose label key differs.
    kubectl("patch", "clusterqueues.kueue.x-k8s.io", q.cluster, "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota", "value": "0"}]))
    set_active(kubectl, namespace, w["metadata"]["name"], True)

    w = wait_until(lambda: (x := workload(kubectl, namespace, "pi")) and wl_condition(x, "Admitted").get("status")
                   == "True" and admitted_flavors(x) == {q.flavors["b"]} and x, 60, what="re-admitted on flavor b")
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    for p in running_pods(kubectl, namespace, "pi", 2):
        assert p["spec"].get("nodeSelector") == pools["b"].labels, (p["metadata"]["name"], p["spec"])
        assert p["spec"]["nodeName"] == pools["b"].node
    assert worker_template(kubectl, namespace, "pi", backend)["spec"]["nodeSelector"] == pools["b"].labels


def test_pods_ready_is_read_from_the_status_and_a_recovered_worker_is_not_evicted(
        kubectl, kueue, operator, namespace, backend, queues):
    q = queues({"a": "1"})
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None), q.local)
    wait_workload(kubectl, namespace, "pi", "Admitted")
    # Kueue's PodsReady is the MPIJob's Running: it cannot turn True before Running does.
    running = wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    w = wait_workload(kubectl, namespace, "pi", "PodsReady", timeout=30)
    assert wl_condition(w, "PodsReady")["lastTransitionTime"] >= running["lastTransitionTime"]

    (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker")) if p["spec"]["hostname"] == "pi-worker-0"]
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    t0 = now()

    def back() -> bool:
        return any(p["metadata"]["uid"] != victim["metadata"]["uid"] and p["spec"]["hostname"] == "pi-worker-0"
                   for p in live(pods(kubectl, namespace, "pi", "worker")))

    wait_until(back, 60, what="worker 0 back")
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    recovered_after = now() - t0
    # Kueue evicts a job whose PodsReady stays False past recoveryTimeout: watch past it.
    while now() - t0 < RECOVERY_TIMEOUT_S + 8:
        w = workload(kubectl, namespace, "pi")
        assert wl_condition(w, "Evicted").get("status") != "True", w["status"]
        assert wl_condition(w, "Admitted").get("status") == "True", w["status"]
        assert not mpijob_suspended(kubectl, namespace, "pi")
        time.sleep(1)
    assert wl_condition(workload(kubectl, namespace, "pi"), "PodsReady").get("status") == "True"
    assert conditions(kubectl, namespace, "pi")["Running"]["status"] == "True"
    print(f"worker 0 back and the MPIJob Running {recovered_after:.1f}s after its pod was deleted")



def typed_templates(crd: Path) -> bool:
    """Whether the CRD gives the Worker's pod template a schema (issue 11) instead of preserving
    unknown fields, so that the API server itself refuses a malformed quantity."""
    doc = yaml.safe_load(crd.read_text())
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    template = schema["properties"]["spec"]["properties"]["mpiReplicaSpecs"]["properties"]["Worker"][
        "properties"]["template"]
    return "properties" in template and not template.get("x-kubernetes-preserve-unknown-fields")


def malformed(job: dict) -> dict:
    """A worker template the API server stores with today's CRD but no Go client can decode."""
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "cpu": "lots"}
    return job


# Last in the module: while the malformed MPIJob exists, Kueue cannot list MPIJobs at all, and it
# takes its informer's backoff (up to 30 s) to recover once the object is gone.
@pytest.mark.parametrize("backend", ["job"])  # under test is how Kueue decodes MPIJobs, not a backend
def test_a_malformed_mpijob_does_not_stop_the_others_being_admitted(
        kubectl, kueue, operator, namespace, backend, queues):
    q = queues({"a": "1"})
    r = kubectl("-n", namespace, "apply", "-f", "-", check=False,
                input=json.dumps(queued(malformed(simulated_mpijob("bad")), q.local)))
    # The generated PodTemplateSpec schema (manifests/crd) refuses it at admission, naming the field,
    # so no Go client (Kueue's informer) ever meets it; the old schema stored it and blinded Kueue.
    assert typed_templates(CRD), "the CRD's pod templates must carry the full PodTemplateSpec schema"
    assert r.returncode != 0 and "limits" in r.stderr and "cpu" in r.stderr, (r.returncode, r.stderr)
    try:
        submit(kubectl, namespace, simulated_mpijob("good", launcher_runs="2s"), q.local)
        wait_workload(kubectl, namespace, "good", "Admitted", timeout=30)
        wait_condition(kubectl, namespace, "good", "Succeeded", timeout=60)
    finally:
        kubectl("-n", namespace, "delete", "mpijob", "bad", "--ignore-not-found", "--timeout=60s", check=False)
