"""Retries told apart by cause, on kwok pods with the cluster's real Job controller and API server
(docs/architecture.md section 11), both worker backends: evictions through the Eviction API use no
retry (`disruption`), restartPolicy ExitCode (`exit_code`). The real node runs the same with MPI
(e2e/test_realnode_retries.py). kwok keeps the DisruptionTarget condition the API server's
eviction sets on a pod through the terminal phase it writes (checked on the local cluster)."""

from __future__ import annotations

import json

import pytest

from testsupport.builders import EXIT_ON_DELETE, simulated_mpijob
from testsupport.kubectl import Watch, apply, conditions, events, get, live, pods, wait_condition, wait_finished
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
LEDGER = "mpijob-operator.dev/launcher-retries"


def evict(kubectl, ns: str, pod: str) -> None:
    """What `kubectl drain` does for each pod: the pods/eviction subresource."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", "-", input=json.dumps(body))


def restarting_events(kubectl, ns: str, name: str) -> list[str]:
    return [e["message"] for e in events(kubectl, ns, name) if e["reason"] == "MPIJobRestarting"]


def one_live_launcher(kubectl, ns: str, name: str, not_uid: str = "") -> dict:
    def found() -> dict | None:
        ps = [p for p in live(pods(kubectl, ns, name, "launcher")) if p["metadata"]["uid"] != not_uid
              and p["status"].get("phase") == "Running"]
        return ps[0] if ps else None

    return wait_until(found, 90, interval=0.3, what=f"a Running launcher pod of {ns}/{name}")


def test_disruption_evictions_use_no_retry_of_backoff_limit_0(kubectl, operator, namespace, backend):
    """backoffLimit 0. The launcher pod evicted (as a drain of its node does): the Job ignores it and
    makes a new pod; the MPIJob says why in Restarting and an Event, and runs on. Then a worker
    evicted: the operator binds that disruption to the running attempt (the launcher Job's ledger,
    its limit raised), and the launcher that fails next (deleted here, exit 1: kwok runs no mpirun)
    costs nothing either. The MPIJob is never Failed."""
    job = simulated_mpijob("pi", workers=2, launcher_runs=None, run_policy={"backoffLimit": 0})
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    first = one_live_launcher(kubectl, namespace, "pi")
    evict(kubectl, namespace, first["metadata"]["name"])
    second = one_live_launcher(kubectl, namespace, "pi", not_uid=first["metadata"]["uid"])
    # (the evicted pod is gone once the Job controller counted it: its DisruptionTarget shows here)
    msgs = restarting_events(kubectl, namespace, "pi")
    assert any(f"launcher pod {first['metadata']['name']} was disrupted (EvictionByEvictionAPI" in m
               and "not counted, 0 of 0 retries" in m for m in msgs), msgs
    assert (get(kubectl, namespace, "job", "pi-launcher") or {})["status"].get("failed", 0) == 0

    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker")) if p["spec"]["hostname"] == "pi-worker-1"]
    evict(kubectl, namespace, victim["metadata"]["name"])

    def bound() -> dict | None:
        lj = get(kubectl, namespace, "job", "pi-launcher") or {}
        raw = ((lj.get("metadata") or {}).get("annotations") or {}).get(LEDGER) or "{}"
        book = json.loads(raw).get("notCounted", {})
        return book if f"{second['metadata']['name']}#0" in book else None

    book = wait_until(bound, 60, interval=0.3, what="the worker's eviction bound to the running attempt")
    assert book[f"{second['metadata']['name']}#0"]["worker"] == "pi-worker-1", book
    assert get(kubectl, namespace, "job", "pi-launcher")["spec"]["backoffLimit"] == 0 + 1 + 1
    kubectl("-n", namespace, "delete", "pod", second["metadata"]["name"], "--wait=false")
    one_live_launcher(kubectl, namespace, "pi", not_uid=second["metadata"]["uid"])
    wait_until(lambda: any("was disrupted" in m and second["metadata"]["name"] in m and "exit code 1" in m
                           for m in restarting_events(kubectl, namespace, "pi")), 60, interval=0.3,
               what="the failure the eviction caused, announced as not counted")
    assert conditions(kubectl, namespace, "pi").get("Failed") is None


@pytest.mark.parametrize(("code", "backoff", "outcome", "attempts"), [
    (3, 3, "PermanentExitCode3", 1),  # 1-127: at once, with retries left
    (137, 1, "BackoffLimitExceeded", 2),  # 128-255: retried, counted
])
def test_exit_code_permanent_or_retried(kubectl, start_operator, namespace, code, backoff, outcome, attempts):
    """restartPolicy ExitCode, the Job backend (the rule is the launcher Job's podFailurePolicy, the
    same with both; the real node runs it with both, e2e/test_realnode_retries.py)."""
    start_operator("job", namespace)
    job = simulated_mpijob("pi", workers=1, launcher_runs="2s", launcher_exit=code,
                           run_policy={"backoffLimit": backoff})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "ExitCode"
    apply(kubectl, namespace, job)
    assert wait_finished(kubectl, namespace, "pi", 120) == "Failed"
    failed = conditions(kubectl, namespace, "pi")["Failed"]
    assert failed["reason"] == outcome, failed
    assert f"code {code}" in failed["message"], failed
    launchers = pods(kubectl, namespace, "pi", "launcher")
    assert len([p for p in launchers if p["status"].get("phase") == "Failed"]) == attempts, launchers
    if attempts > 1:
        msgs = restarting_events(kubectl, namespace, "pi")
        # 137: the kubelet's signal named beside the code (reconcilers/explain/ends.py)
        assert any(f"exit code {code} (signal 9, SIGKILL); counted, 1 of 1 retries" in m for m in msgs), msgs


def test_drained_launcher_that_exits_0_runs_again_in_a_launcher_job_made_afresh(kubectl, operator, namespace,
                                                                               backend):
    """backoffLimit 0; the launcher pod evicted while it runs and its program exits 0 on the SIGTERM
    (kwok's exit code on delete 0: Open MPI 5's mpirun can do the same, e2e/test_drain.py). Its Job
    completes, which is no finish: the MPIJob says the attempt is not counted, the operator deletes
    the launcher Job and makes it afresh with the ledger it had, and the new launcher's run ends
    Succeeded (issue 41 item 10)."""
    job = simulated_mpijob("pi", workers=2, launcher_runs="15s", run_policy={"backoffLimit": 0})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["annotations"][EXIT_ON_DELETE] = "0"
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    first = one_live_launcher(kubectl, namespace, "pi")
    old_job = get(kubectl, namespace, "job", "pi-launcher")["metadata"]["uid"]
    evict(kubectl, namespace, first["metadata"]["name"])
    # (announced as it is being deleted, or once it exited 0: the message says how it runs again then)
    wait_until(lambda: any(first["metadata"]["name"] in m and "was disrupted" in m and "not counted" in m
                           for m in restarting_events(kubectl, namespace, "pi")), 60, interval=0.3,
               what="the drained launcher's end announced as not counted")
    new = wait_until(lambda: (j := get(kubectl, namespace, "job", "pi-launcher")) and
                     j["metadata"]["uid"] != old_job and j, 90, interval=0.3, what="a launcher Job made afresh")
    conds = conditions(kubectl, namespace, "pi")
    assert conds.get("Succeeded") is None and conds.get("Failed") is None, conds
    old = [p for p in pods(kubectl, namespace, "pi", "launcher") if p["metadata"]["uid"] == first["metadata"]["uid"]]
    assert not old, old  # the old Job went (Foreground) with its pod
    book = json.loads(new["metadata"]["annotations"][LEDGER])
    assert (book["failed"], book["counted"]) == (1, 0), book
    assert wait_finished(kubectl, namespace, "pi", 120) == "Succeeded", conditions(kubectl, namespace, "pi")


def test_worker_deleted_the_launcher_job_is_made_afresh_with_the_workers_counted_once(kubectl, start_operator,
                                                                                     namespace):
    """The Job backend, default flags, backoffLimit 3: worker 0's pod deleted mid-run (it exits 0, as
    sshd does: its index would stay complete) and the launcher failing on it (deleted here, exit 1:
    kwok runs no mpirun). The operator makes the worker Job afresh and, instead of leaving the
    launcher's retry to its Job's backoff (10 s), makes the launcher Job afresh too, created no
    sooner than the new worker Job; the failure is announced once, counted once (1 of 3, carried in
    the new Job's ledger), and the new launcher runs to Succeeded (docs/architecture.md section 11)."""
    start_operator("job", namespace)
    job = simulated_mpijob("pi", workers=2, launcher_runs="20s", run_policy={"backoffLimit": 3})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]["annotations"][EXIT_ON_DELETE] = "1"
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    first = one_live_launcher(kubectl, namespace, "pi")
    old = {k: get(kubectl, namespace, "job", f"pi-{k}")["metadata"]["uid"] for k in ("launcher", "worker")}
    (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker")) if p["spec"]["hostname"] == "pi-worker-0"]
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    kubectl("-n", namespace, "delete", "pod", first["metadata"]["name"], "--wait=false")

    def made_afresh() -> dict | None:
        new = {k: get(kubectl, namespace, "job", f"pi-{k}") for k in ("launcher", "worker")}
        return new if all(j and j["metadata"]["uid"] != old[k] for k, j in new.items()) else None

    new = wait_until(made_afresh, 60, interval=0.3, what="the worker Job and the launcher Job made afresh")
    made = {k: j["metadata"]["creationTimestamp"] for k, j in new.items()}
    assert made["launcher"] >= made["worker"], made  # the launcher starts with the new workers
    book = json.loads(new["launcher"]["metadata"]["annotations"][LEDGER])
    assert (book["failed"], book["counted"]) == (1, 1), book
    assert wait_finished(kubectl, namespace, "pi", 120) == "Succeeded", conditions(kubectl, namespace, "pi")
    msgs = restarting_events(kubectl, namespace, "pi")
    assert [m for m in msgs if "launcher attempt" in m] and all(
        "launcher attempt 1 " in m and "counted, 1 of 3 retries" in m and "the launcher Job is made afresh" in m
        for m in msgs if "launcher attempt" in m), msgs


def test_in_place_a_lost_worker_leaves_the_service_until_its_job_is_made_afresh(kubectl, kubeconfig, start_operator,
                                                                              namespace, tmp_path):
    """`--launcher-restart=in-place`, the Job backend: worker 0's pod deleted mid-run. While the old
    worker Job goes, the Service selects the launcher alone, and the cluster's EndpointSlice controller
    follows it (a version of the slice with the launcher's endpoint alone); the new worker Job brings
    the full selector back and its workers into the slice; the launcher runs on in its pod
    (docs/architecture.md section 11, "Names while the workers are made afresh"). kwok ends a deleted
    pod at once, so the race itself (a terminating worker's name still resolving) is the real node's
    to show: bench.recovery, e2e/test_realnode_retries.py."""
    start_operator("job", namespace, "--launcher-restart=in-place")
    apply(kubectl, namespace, simulated_mpijob("pi", workers=2, launcher_runs=None, policy="AtStartup"))
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    launcher = one_live_launcher(kubectl, namespace, "pi")
    old = get(kubectl, namespace, "job", "pi-worker")["metadata"]["uid"]
    service = Watch(kubeconfig, "-n", namespace, "service", "pi", out=tmp_path / "service.json")
    slices = Watch(kubeconfig, "-n", namespace, "endpointslices", "-l", "kubernetes.io/service-name=pi",
                   out=tmp_path / "slices.json")
    try:
        wait_until(lambda: len(service.versions()) and len(slices.versions()), 30, interval=0.2,
                   what="both watches started")
        (victim,) = [p for p in live(pods(kubectl, namespace, "pi", "worker"))
                     if p["spec"]["hostname"] == "pi-worker-0"]
        kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")

        def back() -> bool:
            job = get(kubectl, namespace, "job", "pi-worker")
            eps = [e for s in slices.versions()[-1:] for e in s.get("endpoints") or []]
            return bool(job and job["metadata"]["uid"] != old) and sorted(e.get("hostname") for e in eps) == [
                "pi-launcher", "pi-worker-0", "pi-worker-1"]

        wait_until(back, 60, interval=0.3, what="the worker Job made afresh and its workers in the Service's slice")
    finally:
        service.stop()
        slices.stop()
    selectors = [s["spec"]["selector"] for s in service.versions()]
    launcher_only = {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "launcher"}
    assert launcher_only in selectors and selectors[-1] == {"training.kubeflow.org/job-name": "pi"}, selectors
    hosts = [sorted(e.get("hostname") for e in s.get("endpoints") or []) for s in slices.versions()]
    assert ["pi-launcher"] in hosts, hosts
    assert one_live_launcher(kubectl, namespace, "pi")["metadata"]["uid"] == launcher["metadata"]["uid"]
