"""Gang scheduling through Kubernetes' own Workload API (--gang-scheduling=workload), proven with the
cluster's real default kube-scheduler, for both worker backends. Run them alone with `-k workload`.

The cluster must serve the API (hack/cluster-up.sh turns it on unless WORKLOAD_API=0: the feature gate
GenericWorkload on the API server, controller manager and scheduler, scheduling.k8s.io/v1beta1 served);
the fixture `workload_api` fails, saying so, where it does not.

- A then B on a pool of kwok nodes of this test's own that holds one MPIJob, not two (e2e/gang.py):
  with the mode on, no pod of B is bound until A ends, then all of them, and B shows WaitingForGang in
  the scheduler's words; with it off, B is placed in part. Each run prints the time from A's end to
  all of B's pods bound and the operator's writes (`FIGURE` lines).
- An MPIJob that can never fit: with the mode on, no pod is ever bound and the MPIJob says why; off,
  the pods that fit are bound and the rest wait forever.
- launcherCreationPolicy WaitForWorkersReady: the gang is the workers; the launcher joins later.
- The lifecycle: suspend, resume, name reuse, delete; no write at steady state.
- A cluster that does not serve the API (a bare second kube-apiserver without the gate): the operator
  stays up and every MPIJob says why it does not start.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
from gang import (
    NODE_CPU,
    POOL_NODES,
    WORKERS,
    bare_apiserver,
    bound,
    gang_job,
    grant_gang_rbac,
    node_pool,
    run_a_then_b,
)

from reconcilers.gang import podgroup as pg
from reconcilers.gang import workload_gang as wg
from testsupport.builders import simulated_mpijob as mpijob
from testsupport.kubectl import MPIJOBS, apply, conditions, events, get, items, pods, wait_condition, wait_established
from testsupport.operator_process import Operator
from testsupport.paths import CLUSTER_DIR, CRD
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

FLAG = f"--gang-scheduling={wg.MODE}"
WORKLOADS, PODGROUPS = "workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"
DEFAULT_SCHEDULER = "default-scheduler"


@pytest.fixture(scope="module")
def workload_api(kubectl) -> None:
    served = set(kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").stdout.split())
    missing = {WORKLOADS, PODGROUPS} - served
    assert not missing, (f"this cluster does not serve {sorted(missing)}: these tests need the Workload API; "
                         "start the cluster with hack/cluster-up.sh, which turns it on unless WORKLOAD_API=0")


@pytest.fixture
def pool(kubectl):
    with node_pool(kubectl, POOL_NODES, NODE_CPU) as p:
        yield p


@pytest.fixture
def gang_operator(kubectl, workload_api, namespace, backend, start_operator):
    def start(on: bool):
        if not on:
            return start_operator(backend, namespace)
        grant_gang_rbac(kubectl, "workload", namespace)
        return start_operator(backend, namespace, FLAG)

    return start


def all_pods(kubectl, ns: str, name: str) -> list[dict]:
    return pods(kubectl, ns, name, "launcher") + pods(kubectl, ns, name, "worker")


def gone(kubectl, ns: str, kind: str, name: str) -> bool:
    return get(kubectl, ns, kind, name) is None


@pytest.mark.parametrize("mode", ["workload-on", "workload-off"])
def test_workload_gang_second_mpijob_waits_whole_or_is_placed_in_part(kubectl, pool, namespace, backend,
                                                                       gang_operator, mode):
    on = mode == "workload-on"
    _, placement = pool
    op = gang_operator(on)
    seen = run_a_then_b(kubectl, namespace, placement, op, backend, mode=wg.MODE if on else "off")
    if not on:
        # B held 2 CPUs of the pool with 2 of its 4 pods unplaced: half a gang, waiting. The cluster
        # runs with the Workload API on; pods that name no group are scheduled as without it.
        assert (2, 2) in seen["b_bound_while_a_runs"], seen
        assert not seen["b_waiting"]
        assert all("schedulingGroup" not in p["spec"] for p in all_pods(kubectl, namespace, "b"))
        assert items(kubectl, namespace, WORKLOADS) == [] and items(kubectl, namespace, PODGROUPS) == []
        return

    # Not one pod of B was bound while A held the pool, and users saw why, in the scheduler's words.
    assert {b for b, _ in seen["b_bound_while_a_runs"]} == {0}, seen
    ((status, message),) = seen["b_waiting"]  # one message, set when the wait began
    assert status == "True" and f"PodGroup {namespace}/b (minCount {WORKERS + 1}) is not scheduled" in message
    assert "Unschedulable" in message, message
    reasons = [e["reason"] for e in events(kubectl, namespace, "b")]
    assert pg.R_WAITING in reasons and pg.R_GANG_SCHEDULED in reasons, reasons
    assert pg.WAITING_CONDITION not in conditions(kubectl, namespace, "b")
    # Every pod, launcher included, named its group and went through the default scheduler.
    for name in ("a", "b"):
        for p in all_pods(kubectl, namespace, name):
            assert p["spec"]["schedulingGroup"] == {"podGroupName": name}, p["metadata"]["name"]
            assert p["spec"]["schedulerName"] == DEFAULT_SCHEDULER
    # Per MPIJob: the Workload and the PodGroup created once and deleted once when it ended, never patched.
    assert seen["workload_writes"] == {"create": 2.0, "patch": 0.0, "delete": 2.0}, seen
    assert seen["podgroup_writes"] == {"create": 2.0, "patch": 0.0, "delete": 2.0}, seen
    wait_until(lambda: gone(kubectl, namespace, PODGROUPS, "b") and gone(kubectl, namespace, WORKLOADS, "b"), 60,
               what="Workload and PodGroup b deleted once B finished (the PodGroup once its pods stopped)")


def never_fits(placement: dict) -> dict:
    """A launcher and 3 workers of 2 CPUs each on 3 nodes of 2 CPUs: 3 pods fit, the 4th never."""
    job = gang_job("big", placement, None)
    for rs in job["spec"]["mpiReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": NODE_CPU}}
    return job


@pytest.mark.parametrize("mode", ["workload-on", "workload-off"])
def test_workload_gang_that_never_fits_stays_unbound_and_says_why(kubectl, pool, namespace, backend, gang_operator,
                                                                  mode):
    on = mode == "workload-on"
    _, placement = pool
    gang_operator(on)
    apply(kubectl, namespace, never_fits(placement))
    members = WORKERS + 1
    if not on:
        wait_until(lambda: bound(kubectl, namespace, "big") == (POOL_NODES, members - POOL_NODES), 60, 0.3,
                   what="the pods that fit bound, the last one pending")
        time.sleep(5)
        assert bound(kubectl, namespace, "big") == (POOL_NODES, members - POOL_NODES)
        assert pg.WAITING_CONDITION not in conditions(kubectl, namespace, "big")
        return
    c = wait_condition(kubectl, namespace, "big", pg.WAITING_CONDITION, timeout=60)
    assert c["reason"] == pg.R_WAITING and "Unschedulable" in c["message"], c
    wait_until(lambda: bound(kubectl, namespace, "big") == (0, members), 30, 0.3, what="every pod of big created")
    for _ in range(10):  # and it stays so
        assert bound(kubectl, namespace, "big")[0] == 0
        time.sleep(0.5)
    group = get(kubectl, namespace, PODGROUPS, "big")
    scheduled = wg.scheduled_condition(group)
    assert scheduled and scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable", group["status"]
    assert [e["type"] for e in events(kubectl, namespace, "big") if e["reason"] == pg.R_WAITING] == ["Normal"]
    assert "Running" not in conditions(kubectl, namespace, "big")


def test_workload_gang_with_wait_for_workers_ready_is_the_workers_then_the_launcher(kubectl, namespace, backend,
                                                                                   gang_operator):
    gang_operator(True)
    apply(kubectl, namespace, mpijob("w", workers=3, launcher_runs="2s", policy="WaitForWorkersReady"))
    group = wait_until(lambda: get(kubectl, namespace, PODGROUPS, "w"), 60, what="PodGroup w")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}  # the workers: the launcher comes later
    workload = get(kubectl, namespace, WORKLOADS, "w")
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert workload["spec"]["controllerRef"] == {"apiGroup": "kubeflow.org", "kind": "MPIJob", "name": "w"}
    wait_condition(kubectl, namespace, "w", "Succeeded", timeout=120)
    (launcher,) = pods(kubectl, namespace, "w", "launcher")
    assert launcher["spec"]["schedulingGroup"] == {"podGroupName": "w"} and launcher["spec"].get("nodeName")


def test_workload_gang_follows_suspend_resume_name_reuse_and_delete(kubectl, namespace, backend, gang_operator):
    op = gang_operator(True)
    job = mpijob("l", workers=2, launcher_runs=None, policy="AtStartup")
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "l", "Running", timeout=90)
    uid = get(kubectl, namespace, MPIJOBS, "l")["metadata"]["uid"]
    first = {kind: get(kubectl, namespace, kind, "l") for kind in (WORKLOADS, PODGROUPS)}
    for obj in first.values():
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("MPIJob", "l", uid, True)

    # Steady state: no write.
    time.sleep(3)
    before = op.metric("mpi_operator_api_writes_total")
    time.sleep(5)
    assert op.metric("mpi_operator_api_writes_total") == before

    # Suspend: both go (the PodGroup once no pod names it); resume: made afresh, the pods run again.
    kubectl("-n", namespace, "patch", MPIJOBS, "l", "--type=merge", "-p",
            json.dumps({"spec": {"runPolicy": {"suspend": True}}}))
    wait_until(lambda: gone(kubectl, namespace, WORKLOADS, "l") and gone(kubectl, namespace, PODGROUPS, "l"), 60,
               what="Workload and PodGroup l deleted on suspend")
    kubectl("-n", namespace, "patch", MPIJOBS, "l", "--type=merge", "-p",
            json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
    wait_condition(kubectl, namespace, "l", "Suspended", status="False", timeout=60)
    wait_condition(kubectl, namespace, "l", "Running", timeout=90)
    for kind, old in first.items():
        assert get(kubectl, namespace, kind, "l")["metadata"]["uid"] != old["metadata"]["uid"]

    # The name reused at once: the new MPIJob's gang, controlled by it, once the old one's is gone.
    kubectl("-n", namespace, "delete", MPIJOBS, "l", "--wait=false")
    apply(kubectl, namespace, copy.deepcopy(job))
    new_uid = wait_until(lambda: (get(kubectl, namespace, MPIJOBS, "l") or {}).get("metadata", {}).get("uid")
                         not in (None, uid) and get(kubectl, namespace, MPIJOBS, "l")["metadata"]["uid"], 60,
                         what="MPIJob l recreated")
    wait_condition(kubectl, namespace, "l", "Running", timeout=120)
    for kind in (WORKLOADS, PODGROUPS):
        assert get(kubectl, namespace, kind, "l")["metadata"]["ownerReferences"][0]["uid"] == new_uid

    # Deleted: the garbage collector removes both.
    kubectl("-n", namespace, "delete", MPIJOBS, "l", "--wait=false")
    wait_until(lambda: gone(kubectl, namespace, WORKLOADS, "l") and gone(kubectl, namespace, PODGROUPS, "l"), 90,
               what="Workload and PodGroup l collected with the MPIJob")


def test_workload_api_not_served_every_mpijob_says_why_and_the_operator_stays_up(kubectl, crd, tmp_path):
    """A kube-apiserver of the pinned release without the GenericWorkload gate (as the release ships):
    the operator starts, stays ready, logs the error once, and every MPIJob carries WaitingForGang with
    the reason WorkloadAPIUnavailable and a Warning Event; nothing that would run pods is created."""
    with bare_apiserver(CLUSTER_DIR, tmp_path) as kubeconfig:
        def bare(*args: str, **kw):
            return kubectl(f"--kubeconfig={kubeconfig}", *args, **kw)

        assert "workloads.scheduling.k8s.io" not in bare("api-resources", "-o", "name").stdout
        bare("apply", "--server-side", "-f", str(CRD))
        wait_established(bare, "mpijobs.kubeflow.org")
        for ns in ("mpi-operator", "gate-off"):
            bare("create", "namespace", ns)
        op = Operator(kubeconfig, "job", "gate-off", tmp_path / "op.log", (FLAG,))
        try:
            op.wait_ready()
            for name in ("a", "b"):
                bare("-n", "gate-off", "apply", "-f", "-", input=json.dumps(mpijob(name)))

            def waiting(name: str) -> dict | None:
                r = bare("-n", "gate-off", "get", MPIJOBS, name, "-o", "json")
                found = {c["type"]: c for c in json.loads(r.stdout).get("status", {}).get("conditions") or []}
                return found.get(pg.WAITING_CONDITION)

            for name in ("a", "b"):
                c = wait_until(lambda name=name: waiting(name), 60, what=f"MPIJob {name} says why")
                assert (c["status"], c["reason"]) == ("True", wg.R_UNAVAILABLE), c
                assert "GenericWorkload" in c["message"] and "--runtime-config=scheduling.k8s.io/v1beta1=true" in \
                    c["message"], c
            evs = json.loads(bare("-n", "gate-off", "get", "events", "-o", "json").stdout)["items"]
            assert sorted(e["involvedObject"]["name"] for e in evs
                          if e["reason"] == wg.R_UNAVAILABLE and e["type"] == "Warning") == ["a", "b"]
            assert json.loads(bare("-n", "gate-off", "get", "jobs,statefulsets", "-o", "json").stdout)["items"] == []
            time.sleep(3)
            op.check_alive()  # no crash loop: the same process, still ready
            assert op.get("/readyz")[0] == 200
            assert op.log_path.read_text().count("gang scheduling is unavailable") == 1
        finally:
            op.stop()
            print(f"\n--- operator log ---\n{op.tail(40)}")

