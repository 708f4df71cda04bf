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
from pathlib import Path

import pytest
import yaml
from kueue import (
    RECOVERY_TIMEOUT_S,
    admitted_flavors,
    mpijob_suspended,
    queued,
    set_active,
    wait_workload,
    wl_condition,
    workload,
)
from kueue_fixtures import TAINT, all_pods, running_pods, submit, worker_template

from reconcilers.names import NETWORK_POLICY_SUFFIX
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import (
    conditions,
    get,
    items,
    live,
    namespaced_service_account_kubeconfig,
    now,
    pods,
    wait_condition,
    wait_event,
    wait_finished,
)
from testsupport.paths import CRD
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.builds("kueue")]


def test_admitted_on_its_flavor_runs_to_succeeded_and_finishes_the_workload(
        kubectl, kueue, operator, namespace, backend, queues, pools, pods_ready):
    q = queues({"a": "1"})
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs="4s"), q.local)
    # No Suspended to wait for: Kueue admits in milliseconds, often before the operator's first
    # reconcile, which then never sees the MPIJob suspended (the quota test holds one suspended).
    w = wait_workload(kubectl, namespace, "pi", "Admitted")
    assert admitted_flavors(w) == {q.flavors["a"]}, w["status"]

    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    pods_ready(namespace, "pi")
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
    while True:
        assert now() < deadline, f"one never succeeded: {conditions(kubectl, namespace, 'one')}"
        # two's state first, one's after: once one has succeeded, two may be admitted within
        # milliseconds, so what two showed counts only if one had still not succeeded after it.
        suspended, two_pods = mpijob_suspended(kubectl, namespace, "two"), all_pods(kubectl, namespace, "two")
        w = workload(kubectl, namespace, "two")
        shown = conditions(kubectl, namespace, "two").get("Suspended", {}).get("status") == "True"
        one = conditions(kubectl, namespace, "one")
        if one.get("Succeeded", {}).get("status") == "True":
            break
        assert suspended and not two_pods, (suspended, two_pods)
        assert wl_condition(w, "QuotaReserved").get("status") != "True", w["status"]
        assert "Failed" not in one
        shown_suspended |= shown
        time.sleep(0.5)
    assert shown_suspended, "two never showed Suspended while it waited for quota"
    one_done = get(kubectl, namespace, "mpijob", "one")["status"]["completionTime"]

    wait_condition(kubectl, namespace, "two", "Succeeded", timeout=90)
    first_pod = min(p["metadata"]["creationTimestamp"] for p in all_pods(kubectl, namespace, "two"))
    assert first_pod >= one_done, (first_pod, one_done)
    wait_workload(kubectl, namespace, "two", "Finished", timeout=30)


def test_preempted_mpijob_loses_every_pod_then_runs_again_from_scratch(
        kubectl, kueue, operator, namespace, backend, queues, pods_ready):
    q = queues({"a": "40m"}, preempt=True)
    low, high = queues.priority("low", 100), queues.priority("high", 1000)
    # The launcher runs long enough to be preempted mid-run, short enough to finish on its rerun.
    submit(kubectl, namespace, simulated_mpijob("low", launcher_runs="15s"), q.local, low)
    wait_condition(kubectl, namespace, "low", "Running", timeout=60)
    pods_ready(namespace, "low")
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
    pods_ready(namespace, "low")  # re-admitted: measured from the second admission
    second_run = {p["metadata"]["uid"] for p in running_pods(kubectl, namespace, "low", 2)}
    assert not first_run & second_run, "the rerun reused pods of the preempted run"
    wait_condition(kubectl, namespace, "low", "Succeeded", timeout=90)
    wait_workload(kubectl, namespace, "low", "Finished", timeout=30)
    print(f"preempted MPIJob's pods all gone {gone_after:.1f}s after the higher-priority one was submitted")


def test_readmitted_on_a_flavor_with_other_keys_gets_exactly_its_selector(
        kubectl, kueue, operator, namespace, backend, queues, pools, pods_ready):
    q = queues({"a": "1", "b": "1"})
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None), q.local)
    w = wait_workload(kubectl, namespace, "pi", "Admitted")
    assert admitted_flavors(w) == {q.flavors["a"]}
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    pods_ready(namespace, "pi")
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
    pods_ready(namespace, "pi")
    for p in running_pods(kubectl, namespace, "pi", 2):
        assert p["spec"].get("nodeSelector") == pools["b"].labels, (p["metadata"]["name"], p["spec"])
        assert p["spec"]["nodeName"] == pools["b"].node
    assert worker_template(kubectl, namespace, "pi", backend)["spec"]["nodeSelector"] == pools["b"].labels


def test_pods_ready_is_read_from_the_status_and_a_recovered_worker_is_not_evicted(
        kubectl, kueue, operator, namespace, backend, queues, pods_ready):
    q = queues({"a": "1"})
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs=None), q.local)
    wait_workload(kubectl, namespace, "pi", "Admitted")
    # Kueue's PodsReady is the MPIJob's Running: it cannot turn True before Running does.
    running = wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    w = pods_ready(namespace, "pi")
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
    # Kueue evicts a job whose PodsReady stays False past recoveryTimeout (by default the admission
    # timeout, 30 minutes): the operator brings the worker back far inside it, Kueue sees the job
    # ready again, and it stays admitted and running.
    assert recovered_after < RECOVERY_TIMEOUT_S / 10, recovered_after
    wait_workload(kubectl, namespace, "pi", "PodsReady", timeout=30)
    for _ in range(5):
        w = workload(kubectl, namespace, "pi")
        assert wl_condition(w, "Evicted").get("status") != "True", w["status"]
        assert wl_condition(w, "Admitted").get("status") == "True", w["status"]
        assert wl_condition(w, "PodsReady").get("status") == "True", w["status"]
        assert not mpijob_suspended(kubectl, namespace, "pi")
        time.sleep(1)
    assert conditions(kubectl, namespace, "pi")["Running"]["status"] == "True"
    print(f"worker 0 back and the MPIJob Running {recovered_after:.1f}s after its pod was deleted "
          f"(Kueue's recovery timeout {RECOVERY_TIMEOUT_S}s)")


def test_policy_clash_an_admitted_running_mpijob_keeps_running_stays_admitted_and_succeeds(
        kubectl, kueue, start_operator, namespace, backend, queues, pods_ready):
    """Issue 42 item 1, the upgrade: MPIJob `pi` admitted and running under an operator without the
    NetworkPolicy feature (here --network-isolation=false), and the user's own NetworkPolicy `pi`
    made before it. The operator with isolation comes up: the user's `pi` is none of its business,
    and an object under the policy's own name (`pi-mpijob-isolation`, here a NetworkPolicy of
    someone else's) costs the run its isolation only: NetworkIsolated=False/PolicyNameTaken and a
    Warning Event, never Failed (which Kueue reads as finished, releasing the quota while the pods
    run). The MPIJob stays admitted and running, and ends Succeeded; nobody's policy is touched."""
    q = queues({"a": "1"})
    old = start_operator(backend, namespace, "--network-isolation=false", name="before")
    submit(kubectl, namespace, simulated_mpijob("pi", launcher_runs="90s"), q.local)
    wait_workload(kubectl, namespace, "pi", "Admitted")
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    pods_ready(namespace, "pi")
    users = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "pi"},
             "spec": {"podSelector": {"matchLabels": {"app": "users-own"}}, "policyTypes": ["Ingress"]}}
    taken = {**users, "metadata": {"name": f"pi{NETWORK_POLICY_SUFFIX}"}}
    for pol in (users, taken):
        kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(pol))
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
              for p in items(kubectl, namespace, "networkpolicies")}
    old.stop()
    start_operator(backend, namespace, name="after")  # --network-isolation on: the default

    warned = wait_event(kubectl, namespace, "pi", "NotIsolated", "Warning", timeout=60)
    assert f"NetworkPolicy {namespace}/pi{NETWORK_POLICY_SUFFIX}" in warned["message"], warned
    c = conditions(kubectl, namespace, "pi")
    assert (c["NetworkIsolated"]["status"], c["NetworkIsolated"]["reason"]) == ("False", "PolicyNameTaken"), c
    deadline = now() + 150  # the launcher runs 90 s from its start: time for the restart under load
    while "Succeeded" not in (c := conditions(kubectl, namespace, "pi")):
        assert now() < deadline, f"pi never succeeded: {c}"
        assert c.get("Failed", {}).get("status") != "True", c
        w = workload(kubectl, namespace, "pi")
        if wl_condition(w, "Finished").get("status") != "True":  # (else it has just succeeded)
            assert wl_condition(w, "Admitted").get("status") == "True", w["status"]
            assert not mpijob_suspended(kubectl, namespace, "pi")
        time.sleep(0.5)
    assert wait_finished(kubectl, namespace, "pi", 10) == "Succeeded"
    finished = wait_workload(kubectl, namespace, "pi", "Finished", timeout=30)
    assert wl_condition(finished, "Finished")["reason"] == "Succeeded", finished["status"]
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
             for p in items(kubectl, namespace, "networkpolicies")}
    assert after == before, "the user's policies untouched, none made beside them"


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


def test_explain_kueue_over_quota_the_suspended_condition_quotes_kueue(
        kubectl, kueue, start_operator, namespace, backend, queues, tmp_path):
    """Issue 51 item 1: an MPIJob Kueue holds for want of quota reads, in `kubectl get mpijob -o yaml`,
    Suspended with reason QuotaNotReserved and Kueue's own words (the LocalQueue, the flavor, the
    resource short), within seconds of Kueue writing them; the State column stays Suspended. The
    operator runs as the ServiceAccount of this checkout's manifests/rbac-namespaced/ (its list/watch
    of Workloads; the shared cluster's ClusterRole is whichever checkout applied it last)."""
    kc = namespaced_service_account_kubeconfig(kubectl, namespace, tmp_path / "kubeconfig")
    start_operator(backend, namespace, f"--leader-election-namespace={namespace}", kubeconfig=kc)
    q = queues({"a": "20m"})  # the MPIJob asks 3 x 10m: never admitted
    submit(kubectl, namespace, simulated_mpijob("big", launcher_runs="2s"), q.local)

    def pending() -> dict | None:
        x = workload(kubectl, namespace, "big")
        return x if x and wl_condition(x, "QuotaReserved").get("status") == "False" else None

    w = wait_until(pending, 30, what="Kueue's QuotaReserved=False on big's Workload")
    said = wl_condition(w, "QuotaReserved")

    def suspended() -> dict | None:
        c = conditions(kubectl, namespace, "big").get("Suspended") or {}
        return c if c.get("reason") == "QuotaNotReserved" else None

    c = wait_until(suspended, 10, interval=0.2, what="Suspended quoting Kueue, within seconds")
    assert c["status"] == "True", c
    msg = c["message"]
    assert said["message"] in msg, (msg, said)
    assert f"(LocalQueue {q.local})" in msg and w["metadata"]["name"] in msg, msg
    assert "cpu" in msg and q.flavors["a"] in msg, msg  # the resource short, in which flavor
    job = get(kubectl, namespace, "mpijob", "big")
    assert job["status"]["conditions"][-1]["type"] == "Suspended", job["status"]  # the State column
    assert mpijob_suspended(kubectl, namespace, "big") and not all_pods(kubectl, namespace, "big")
    wait_event(kubectl, namespace, "big", "QuotaNotReserved", "Normal", timeout=10)
