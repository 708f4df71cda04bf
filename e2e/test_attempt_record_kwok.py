"""Launcher pods held until their end is recorded (issue 50 item 4; reconcilers/failure/hold.py), on kwok
pods with the cluster's real Job controller, garbage collector and API server, both backends.

The risk of a finalizer is a pod that hangs Terminating for good: every way an MPIJob's life ends
leaves no pod held (`held_pod_released`: finished, cleanPodPolicy All, TTL, deleted in the background
or in the foreground, deleted while the operator is away, suspended). And the evidence a restart lost
before (`drained_while_away`): the operator SIGKILLed, the launcher evicted meanwhile and exiting 0 on
the SIGTERM (as Open MPI 5's mpirun does), the operator started again: the pod is still there, so the
run is retried free (backoffLimit 0), never Succeeded on a drain."""

from __future__ import annotations

import json

import pytest

from testsupport.builders import EXIT_ON_DELETE, simulated_mpijob
from testsupport.kubectl import (
    apply,
    conditions,
    events,
    get,
    live,
    namespaced_service_account_kubeconfig,
    pods,
    wait_condition,
    wait_finished,
)
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
FINALIZER = "mpijob-operator.dev/attempt-record"


@pytest.fixture
def op(start_operator, kubectl, namespace, backend, tmp_path):
    """Starts the operator for `namespace` under the ServiceAccount of manifests/rbac-namespaced/ (the
    cluster-wide admission policy on the operator's pod writes is whichever checkout applied it last:
    e2e/test_pods_patch.py checks this one's)."""
    kc = namespaced_service_account_kubeconfig(kubectl, namespace, tmp_path / "kubeconfig")

    def start(name: str = "op"):
        return start_operator(backend, namespace, f"--leader-election-namespace={namespace}", kubeconfig=kc,
                              name=name)

    yield start  # (the namespace fixture releases a pod a failed test left held)


def _all_pods(kubectl, ns: str) -> list[dict]:
    r = kubectl("-n", ns, "get", "pods", "-o", "json", check=False)
    return json.loads(r.stdout)["items"] if r.returncode == 0 else []


def _evict(kubectl, ns: str, pod: str) -> None:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", "-", input=json.dumps(body))


def _none_held(kubectl, ns: str, timeout: float = 60) -> None:
    def clear() -> bool:
        return not [p for p in _all_pods(kubectl, ns) if FINALIZER in (p["metadata"].get("finalizers") or [])]

    wait_until(clear, timeout, interval=0.5, what="no pod held by " + FINALIZER)


def _launcher(kubectl, ns: str) -> dict:
    return wait_until(lambda: next(iter(live(pods(kubectl, ns, "pi", "launcher"))), None), 60, interval=0.3,
                      what="a running launcher pod")


@pytest.mark.parametrize("end", ["finished", "clean-all", "ttl", "deleted-background", "deleted-foreground",
                                 "deleted-while-away", "suspended"])
def test_held_pod_released(kubectl, op, namespace, backend, end):
    runs = "3s" if end in ("finished", "clean-all", "ttl") else None
    rp: dict = {"ttlSecondsAfterFinished": 0} if end == "ttl" else {}
    job = simulated_mpijob("pi", workers=2, launcher_runs=runs, run_policy=rp)
    if end == "clean-all":
        job["spec"]["runPolicy"]["cleanPodPolicy"] = "All"
    operator = op()
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    launcher = _launcher(kubectl, namespace)
    assert FINALIZER in launcher["metadata"].get("finalizers", []), launcher["metadata"]
    if end in ("finished", "clean-all"):
        assert wait_finished(kubectl, namespace, "pi", 60) == "Succeeded"
    elif end == "ttl":
        wait_until(lambda: get(kubectl, namespace, "mpijobs.kubeflow.org", "pi") is None, 60, interval=0.5,
                   what="the MPIJob deleted by its TTL")
    elif end == "deleted-background":
        kubectl("-n", namespace, "delete", "mpijob", "pi", "--cascade=background", "--wait=false")
    elif end == "deleted-foreground":
        kubectl("-n", namespace, "delete", "mpijob", "pi", "--cascade=foreground", "--wait=false")
    elif end == "deleted-while-away":
        operator.kill()
        kubectl("-n", namespace, "delete", "mpijob", "pi", "--wait=false")
        wait_until(lambda: any(p["metadata"].get("deletionTimestamp") for p in _all_pods(kubectl, namespace)),
                   60, interval=0.5, what="the garbage collector deleting the pods")
        op("op2")
    elif end == "suspended":
        kubectl("-n", namespace, "patch", "mpijob", "pi", "--type=merge", "-p",
                '{"spec":{"runPolicy":{"suspend":true}}}')
        wait_condition(kubectl, namespace, "pi", "Suspended", timeout=60)
    _none_held(kubectl, namespace)
    if end != "finished":  # (cleanPodPolicy Running keeps a finished launcher pod, not held)
        wait_until(lambda: not pods(kubectl, namespace, "pi", "launcher"), 90, interval=0.5,
                   what="the launcher pods gone (a held one would stay Terminating)")


def test_drained_while_away(kubectl, op, namespace, backend):
    job = simulated_mpijob("pi", workers=2, launcher_runs=None, run_policy={"backoffLimit": 0})
    # the launcher exits 0 on its delete's SIGTERM, as Open MPI 5's mpirun may
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["annotations"][EXIT_ON_DELETE] = "0"
    first = op()
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    launcher = _launcher(kubectl, namespace)
    first.kill()
    _evict(kubectl, namespace, launcher["metadata"]["name"])
    wait_until(lambda: (get(kubectl, namespace, "job", "pi-launcher") or {}).get("status", {}).get("succeeded"),
               60, interval=0.5, what="the launcher Job counting the drained pod's exit 0")
    held = get(kubectl, namespace, "pod", launcher["metadata"]["name"])
    assert held is not None and held["metadata"].get("deletionTimestamp"), "the drained pod is gone: nothing held it"
    op("op2")
    msgs = wait_until(lambda: [e["message"] for e in events(kubectl, namespace, "pi")
                               if e["reason"] == "MPIJobRestarting" and "was disrupted" in e["message"]],
                      60, interval=0.5, what="the drained launcher's end announced")
    assert any("not counted" in m and "the launcher Job is made afresh" in m for m in msgs), msgs
    wait_until(lambda: next(iter(live(pods(kubectl, namespace, "pi", "launcher"))), None), 90, interval=0.5,
               what="the launcher made afresh")
    conds = conditions(kubectl, namespace, "pi")
    assert conds.get("Succeeded") is None and conds.get("Failed") is None, conds
    # released once recorded, so it went (the new launcher pod holds the finalizer in its turn)
    wait_until(lambda: get(kubectl, namespace, "pod", launcher["metadata"]["name"]) is None, 60, interval=0.5,
               what="the drained launcher pod released and gone")


def test_evicted_worker(kubectl, op, namespace, backend):
    """Worker 1 alone evicted through the Eviction API while an Open MPI launcher runs, backoffLimit 0;
    that launcher then exits 0 with PRRTE's lost-daemon line in its log (kwok's `sim-cut-short`, as Open
    MPI 5's mpirun after losing a daemon). That exit is not judged (before: Failed/WorkerLostDuringRun
    at once, whatever backoffLimit said): announced as not counted, the launcher Job made afresh. Its
    next attempt, which no disruption touched, is judged on its own log (kwok's is the same cut-short
    one: Failed/WorkerLostDuringRun, naming that attempt's pod)."""
    job = simulated_mpijob("pi", workers=2, launcher_runs="12s", launcher_log="cut-short",
                           run_policy={"backoffLimit": 0})
    job["spec"]["mpiImplementation"] = "OpenMPI"
    op()
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    first = _launcher(kubectl, namespace)
    (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker"))
                 if p["spec"]["hostname"] == "pi-worker-1"]
    _evict(kubectl, namespace, victim["metadata"]["name"])
    def announced() -> list[str]:
        return [e["message"] for e in events(kubectl, namespace, "pi") if e["reason"] == "MPIJobRestarting"
                and first["metadata"]["name"] in e["message"] and "exit code 0" in e["message"]]

    msgs = wait_until(announced, 60, interval=0.5, what="the evicted run's exit 0 announced, not judged")
    assert any("worker pi-worker-1 was disrupted" in m and "not counted" in m and "made afresh" in m
               for m in msgs), msgs
    conds = conditions(kubectl, namespace, "pi")
    assert conds.get("Failed") is None and conds.get("Succeeded") is None, conds
    assert wait_finished(kubectl, namespace, "pi", 120) == "Failed"
    failed = conditions(kubectl, namespace, "pi")["Failed"]
    assert failed["reason"] == "WorkerLostDuringRun" and first["metadata"]["name"] not in failed["message"], failed


@pytest.mark.parametrize("exit_code", ["0", "1"])
def test_preempted(kubectl, op, namespace, backend, exit_code):
    """Kueue's preemption: runPolicy.suspend true while the launcher runs; its mpirun exits `exit_code` on
    the SIGTERM (Open MPI 5's may exit 0), backoffLimit 0. Neither a finish nor a failure (before:
    Succeeded beside Suspended on 0, Failed/BackoffLimitExceeded on 1): nothing judged or counted while
    suspended; the resume runs a launcher Job made afresh, the count untouched."""
    job = simulated_mpijob("pi", workers=2, launcher_runs=None, run_policy={"backoffLimit": 0})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["annotations"][EXIT_ON_DELETE] = exit_code
    op()
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    first = _launcher(kubectl, namespace)
    first_job = get(kubectl, namespace, "job", "pi-launcher")["metadata"]["uid"]
    kubectl("-n", namespace, "patch", "mpijob", "pi", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
    wait_condition(kubectl, namespace, "pi", "Suspended", timeout=60)
    wait_until(lambda: get(kubectl, namespace, "pod", first["metadata"]["name"]) is None, 60, interval=0.5,
               what="the preempted launcher pod gone")
    conds = conditions(kubectl, namespace, "pi")
    assert conds.get("Failed") is None and conds.get("Succeeded") is None, conds
    kubectl("-n", namespace, "patch", "mpijob", "pi", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
    wait_condition(kubectl, namespace, "pi", "Running", timeout=90)
    assert get(kubectl, namespace, "job", "pi-launcher")["metadata"]["uid"] != first_job  # made afresh
    mpijob = get(kubectl, namespace, "mpijobs.kubeflow.org", "pi")
    assert (mpijob["status"]["replicaStatuses"]["Launcher"].get("failed") or 0) == 0, mpijob["status"]
    conds = conditions(kubectl, namespace, "pi")
    assert conds.get("Failed") is None and conds.get("Succeeded") is None, conds
