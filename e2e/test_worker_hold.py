"""Issue 50 items 5, 6 and 7 on kwok pods with the cluster's real Job controller, StatefulSet
controller, garbage collector and API server (docs/architecture.md sections 4 and 11):
`worker_exit_loop` (workers whose command ends by themselves: paced, counted, ended),
`stuck_terminating` (an earlier worker pod that never ends: named, and no retry spent) and
`in_place_waits` (WaitForWorkersReady holds every retry of the launcher)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from testsupport.builders import EXIT_CODE, RUN_FOR, simulated_mpijob
from testsupport.kubectl import apply, conditions, events, get, live, pods, wait_condition, wait_finished
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
LEDGER = "mpijob-operator.dev/launcher-retries"
WRITES = "mpi_operator_api_writes_total"


# -- item 5: workers that exit by themselves -------------------------------------------------------------------


def exiting_workers(backoff: int) -> dict:
    """WaitForWorkersReady (the launcher, if it starts in the second its workers are Ready, runs on: nothing
    else ends the loop); each worker's
    command ends by itself 1 s after it starts, exit 0 (sshd without -D)."""
    job = simulated_mpijob("pi", workers=2, launcher_runs="600s", run_policy={"backoffLimit": backoff})
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotations": {RUN_FOR: "1s",
                                                                                       EXIT_CODE: "0"}}
    return job


def test_worker_exit_loop_paced_counted_across_a_restart_and_ended(kubectl, start_operator, namespace):
    """backoffLimit 2, the Job backend (a StatefulSet restarts its pods itself, in place). The first
    exit is counted in the status; the operator is then stopped and started again, and the count goes
    on from the status: the third exit ends the MPIJob Failed/WorkerBackoffLimitExceeded, naming the
    worker, its pod and its exit, with Warning Events. Before: the worker Job deleted and made again
    every second, forever."""
    op = start_operator("job", namespace)
    started = time.monotonic()
    apply(kubectl, namespace, exiting_workers(backoff=2))
    first = wait_condition(kubectl, namespace, "pi", "WorkerExited", timeout=60)
    assert "exit 1 of at most 2 (runPolicy.backoffLimit)" in first["message"], first
    assert "exit code 0, Completed" in first["message"], first
    # (its Warning Event follows the status write: stopped before it, the operator would lose it)
    wait_until(lambda: [e for e in events(kubectl, namespace, "pi") if e["reason"] == "WorkerExited"], 30,
               interval=0.3, what="the first exit's Warning Event")
    writes = op.metric(WRITES)
    op.stop()
    op = start_operator("job", namespace, name="again")
    assert wait_finished(kubectl, namespace, "pi", 120) == "Failed", conditions(kubectl, namespace, "pi")
    elapsed = time.monotonic() - started
    writes += op.metric(WRITES)
    failed = conditions(kubectl, namespace, "pi")["Failed"]
    assert failed["reason"] == "WorkerBackoffLimitExceeded", failed
    msg = failed["message"]
    assert "(pod pi-worker-" in msg and "exit code 0, Completed" in msg and "3 time(s)" in msg, msg
    assert "runPolicy.backoffLimit (2)" in msg, msg
    warned = [e for e in events(kubectl, namespace, "pi") if e["type"] == "Warning"]
    exited = [e["message"] for e in warned if e["reason"] == "WorkerExited"]
    assert len(exited) == 2 and [m for m in exited if "exit 2 of at most 2" in m and "made afresh 20s" in m], exited
    assert [e for e in warned if "WorkerBackoffLimitExceeded" in e["message"]], warned
    # 10 s then 20 s between the worker Jobs: about 35 s from the first exit to the end
    assert elapsed > 30, elapsed
    print(f"\nworker_exit_loop: {writes:.0f} writes in {elapsed:.1f} s ({writes / elapsed:.2f}/s), "
          "the MPIJob's creation included")


def test_worker_exit_loop_writes_per_second(kubectl, start_operator, namespace):
    """The loop's own writes, measured over 40 s from the first exit (backoffLimit 100: it does not
    end within): before, the worker Job was deleted and made again about every second (4 writes a
    second, issue 50); now about 2 exits in that window, each a handful of writes."""
    op = start_operator("job", namespace)
    apply(kubectl, namespace, exiting_workers(backoff=100))
    wait_condition(kubectl, namespace, "pi", "WorkerExited", timeout=60)
    before, t0 = op.metric(WRITES), time.monotonic()
    time.sleep(40)
    rate = (op.metric(WRITES) - before) / (time.monotonic() - t0)
    print(f"\nworker_exit_loop: {rate:.2f} writes/s over 40 s after the first exit")
    assert rate < 1.0, rate
    assert conditions(kubectl, namespace, "pi").get("Failed") is None


# -- item 7: WaitForWorkersReady holds every retry ---------------------------------------------------------------


def _pool_node(kubectl, name: str, pool: str) -> None:
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok",
                                    "workers-node": pool}},
            "spec": {"taints": [{"key": "workers-node", "value": pool, "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                       "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}
    kubectl("apply", "-f", "-", input=json.dumps(node))
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in
                           ((get(kubectl, "", "node", name) or {}).get("status") or {}).get("conditions") or []),
               60, interval=0.5, what=f"kwok node {name} Ready")


@contextlib.contextmanager
def own_node(kubectl) -> Iterator[tuple[str, dict, Callable[[], str]]]:
    """A kwok node of the test's own, tainted and labelled: only pods with the returned placement
    land there (so cordoning it holds their replacements Pending, and nobody else's pods), and a
    function that adds another node to its pool (a node's arrival moves the scheduler's unschedulable
    pods back at once). Deleted at the end."""
    pool = f"workers-{uuid.uuid4().hex[:6]}"
    made = [pool]
    _pool_node(kubectl, pool, pool)

    def more() -> str:
        made.append(f"{pool}-{len(made)}")
        _pool_node(kubectl, made[-1], pool)
        return made[-1]

    try:
        yield pool, {"nodeSelector": {"workers-node": pool},
                     "tolerations": [{"key": "workers-node", "operator": "Equal", "value": pool,
                                      "effect": "NoSchedule"}]}, more
    finally:
        kubectl("delete", "node", *made, "--wait=false", check=False)


def test_in_place_waits_a_retry_waits_for_every_worker_ready(kubectl, operator, namespace, backend):
    """WaitForWorkersReady, backoffLimit 3, default flags (the cluster admits container restart rules).
    The launcher Job restarts nothing in place. Worker 0's pod deleted while its replacement cannot be
    scheduled (its node cordoned), and the launcher failing on the loss (deleted here, exit 1: kwok runs
    no mpirun): for 25 s no launcher pod runs (before: the launcher Job's own retry after its 10 s
    backoff, or a restart in place at once, ran without worker 0); once worker 0 is Ready again a
    launcher runs, the loss counted once."""
    with own_node(kubectl) as (node, placement, more):
        job = simulated_mpijob("pi", workers=2, launcher_runs=None, run_policy={"backoffLimit": 3})
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(placement)
        apply(kubectl, namespace, job)
        wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
        container = get(kubectl, namespace, "job", "pi-launcher")["spec"]["template"]["spec"]["containers"][0]
        assert "restartPolicy" not in container and "restartPolicyRules" not in container, container
        kubectl("cordon", node)
        (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker"))
                     if p["spec"]["hostname"] == "pi-worker-0"]
        (first,) = live(pods(kubectl, namespace, "pi", "launcher"))
        kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
        kubectl("-n", namespace, "delete", "pod", first["metadata"]["name"], "--wait=false")
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            running = [p for p in live(pods(kubectl, namespace, "pi", "launcher"))
                       if p["metadata"]["uid"] != first["metadata"]["uid"]]
            assert not running, [(p["metadata"]["name"], p["status"].get("phase")) for p in running]
            time.sleep(0.5)
        kubectl("uncordon", node)
        more()  # (a node's arrival, unlike an uncordon, has the scheduler look at the Pending pods at once)

        def again() -> bool:
            ready = [p for p in live(pods(kubectl, namespace, "pi", "worker")) if any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
            return len(ready) == 2 and any(p["status"].get("phase") == "Running" and p["metadata"]["uid"] != first[
                "metadata"]["uid"] for p in live(pods(kubectl, namespace, "pi", "launcher")))

        wait_until(again, 90, interval=0.5, what="worker 0 Ready again, then a launcher running")
        book = json.loads(get(kubectl, namespace, "job", "pi-launcher")["metadata"]["annotations"][LEDGER])
        assert (book["failed"], book["counted"]) == (1, 1), book
        assert conditions(kubectl, namespace, "pi").get("Failed") is None


# -- item 6: an earlier worker pod that never ends ----------------------------------------------------------------


@contextlib.contextmanager
def dead_node(kubectl, namespace: str) -> Iterator[str]:
    """A Node that no kubelet (and no kwok) runs, as one that died: a pod bound there never confirms
    its delete. Tainted, so that nothing else is scheduled there. Its pods freed, then it, at the end."""
    name = f"workers-dead-{uuid.uuid4().hex[:6]}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"workers-node": name}},
            "spec": {"taints": [{"key": "workers-node", "value": name, "effect": "NoSchedule"}]}}
    kubectl("apply", "-f", "-", input=json.dumps(node))
    try:
        yield name
    finally:
        for pod in json.loads(kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)["items"]:
            if pod["spec"].get("nodeName") == name:
                kubectl("-n", namespace, "delete", "pod", pod["metadata"]["name"], "--force", "--grace-period=0",
                        check=False)
        kubectl("delete", "node", name, "--wait=false", check=False)


def stuck_worker(like: dict, owner_uid: str, node: str) -> dict:
    """A pod of the worker Job `owner_uid` with worker 0's name and labels, bound to `node`: what the
    Job controller made there before the node died."""
    meta = like["metadata"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pi-worker-0-stuck", "labels": dict(meta["labels"]),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi-worker",
                                              "uid": owner_uid, "controller": True}]},
            "spec": {"nodeName": node, "hostname": "pi-worker-0", "subdomain": "pi", "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"key": "workers-node", "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [{"name": "worker", "image": like["spec"]["containers"][0]["image"]}]}}


def test_stuck_terminating_an_earlier_worker_pod_is_named_and_spends_no_retry(kubectl, start_operator, namespace):
    """The Job backend (a StatefulSet's replacement takes the old pod's own name and waits for it; an
    earlier worker Job's pods are this backend's), AtStartup, backoffLimit 1. One pod of the worker Job
    sits on a node that died. Worker 0's pod is deleted and the launcher fails on the loss (deleted
    here, exit 1): the worker Job is made afresh, and the pod on the dead node never ends, so the
    workers' names stay withheld. The MPIJob names that pod, its earlier worker Job and its node (not
    "a deleted MPIJob of the same name"), no launcher runs and no retry is spent meanwhile (the loss
    counted once, 1 of 1, never Failed); once the pod is removed the run goes on."""
    start_operator("job", namespace)
    with dead_node(kubectl, namespace) as node:
        job = simulated_mpijob("pi", workers=2, launcher_runs=None, policy="AtStartup", run_policy={"backoffLimit": 1})
        apply(kubectl, namespace, job)
        wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
        old_uid = get(kubectl, namespace, "job", "pi-worker")["metadata"]["uid"]
        (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker"))
                     if p["spec"]["hostname"] == "pi-worker-0"]
        kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(stuck_worker(victim, old_uid, node)))
        kubectl("-n", namespace, "patch", "pod", "pi-worker-0-stuck", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))
        (first,) = live(pods(kubectl, namespace, "pi", "launcher"))
        kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
        kubectl("-n", namespace, "delete", "pod", first["metadata"]["name"], "--wait=false")

        def stuck_named() -> dict | None:
            c = conditions(kubectl, namespace, "pi").get("WaitingForPredecessor")
            return c if c and c["status"] == "True" else None

        deadline = time.monotonic() + 200  # 120 s past its deletionTimestamp (predecessor.STUCK_SECONDS)
        cond = None
        while cond is None and time.monotonic() < deadline:
            running = [p for p in live(pods(kubectl, namespace, "pi", "launcher"))
                       if p["metadata"]["uid"] != first["metadata"]["uid"]]
            assert not running, [(p["metadata"]["name"], p["status"].get("phase")) for p in running]
            assert conditions(kubectl, namespace, "pi").get("Failed") is None
            cond = stuck_named()
            time.sleep(1)
        assert cond is not None, conditions(kubectl, namespace, "pi")
        msg = cond["message"]
        assert cond["reason"] == "OldWorkerPodStuck", cond
        assert f"pod {namespace}/pi-worker-0-stuck of this MPIJob's earlier worker Job" in msg, msg
        assert f"on node {node}" in msg and "deleted MPIJob" not in msg and "no retry is spent" in msg, msg
        assert "--force --grace-period=0" in msg, msg
        warned = [e for e in events(kubectl, namespace, "pi") if e["reason"] == "OldWorkerPodStuck"]
        assert len(warned) == 1 and "pi-worker-0-stuck" in warned[0]["message"], warned
        book = json.loads(((get(kubectl, namespace, "job", "pi-launcher") or {}).get("metadata", {}).get(
            "annotations") or {}).get(LEDGER) or (get(kubectl, namespace, "configmap", "pi-config") or {}).get(
            "metadata", {}).get("annotations", {}).get(LEDGER) or "{}")
        assert book.get("counted") == 1, book
        kubectl("-n", namespace, "delete", "pod", "pi-worker-0-stuck", "--force", "--grace-period=0")
        wait_until(lambda: any(p["status"].get("phase") == "Running" for p in live(pods(kubectl, namespace, "pi",
                                                                                         "launcher"))),
                   60, interval=0.5, what="a launcher running once the pod is gone")
        wait_until(lambda: stuck_named() is None, 30, interval=0.5, what="the condition gone with the pod")
        assert conditions(kubectl, namespace, "pi").get("Failed") is None
