"""Gang scheduling (--gang-scheduling) against a real Coscheduling scheduler, for both worker backends.

A pool of kwok nodes of this test's own (3 nodes x 2 CPUs) holds one MPIJob of 4 one-CPU pods (a
launcher and 3 workers) at a time, not two. MPIJob A runs; B is submitted while A holds the pool:
- with gang scheduling (the scheduler-plugins scheduler, started by a fixture), no pod of B is bound
  while A runs, B shows WaitingForGang, and once A is done B's 4 pods are bound together, woken by
  A's PodGroup marked released (reconcilers/gang/lifecycle.py) rather than the scheduler's periodic retry;
- without it (the default scheduler), B gets 2 of its 4 pods bound while A runs: the partial
  placement that, with two such jobs placed at once, leaves each holding half a gang forever.
Each run prints the time from A's end to all of B's pods bound, and the operator's API writes.
Submitted together, with gang scheduling one of the two runs whole while the other has no pod bound.

Volcano: the PodGroups the operator makes are accepted by Volcano's own CRD (no Volcano scheduler).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from gang import (
    NODE_CPU,
    POOL_NODES,
    SCHEDULER_NAME,
    WORKERS,
    bound,
    bound_all,
    gang_job,
    grant_gang_rbac,
    install_crd,
    node_pool,
    podgroup_crds,
    run_a_then_b,
    second_scheduler,
    succeeded,
    wait_all_bound,
)

from reconcilers.gang import podgroup as pg
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import MPIJOBS, apply, conditions, events, get, pods, wait_condition
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.builds("scheduler-plugins")]

@pytest.fixture(scope="module")
def crds(kubectl) -> dict[str, str]:
    paths = podgroup_crds()
    install_crd(kubectl, paths["scheduler-plugins"], "podgroups.scheduling.x-k8s.io")
    install_crd(kubectl, paths["volcano"], "podgroups.scheduling.volcano.sh")
    return paths


@pytest.fixture(scope="module")
def scheduler(crds, kubectl, kubeconfig, tmp_path_factory):
    # The controller also runs an ElasticQuota reconciler and exits after 2 minutes without its CRD.
    elastic = str(Path(crds["scheduler-plugins"]).with_name("scheduling.x-k8s.io_elasticquotas.yaml"))
    install_crd(kubectl, elastic, "elasticquotas.scheduling.x-k8s.io")
    with second_scheduler(kubeconfig, tmp_path_factory.mktemp("scheduler-plugins")) as s:
        yield s


@pytest.fixture
def pool(kubectl):
    with node_pool(kubectl, POOL_NODES, NODE_CPU) as p:
        yield p


def test_with_gang_scheduling_the_second_mpijob_waits_whole(kubectl, scheduler, pool, namespace, backend,
                                                            start_operator):
    _, placement = pool
    grant_gang_rbac(kubectl, "scheduler-plugins", namespace)
    op = start_operator(backend, namespace, f"--gang-scheduling={SCHEDULER_NAME}")
    seen = run_a_then_b(kubectl, namespace, placement, op, backend, mode="coscheduling", scheduler=scheduler)
    scheduler.check_alive()

    # Not one pod of B was bound while A held the pool, and users saw why.
    assert {b for b, _ in seen["b_bound_while_a_runs"]} == {0}, seen
    assert seen["b_waiting"], seen
    # the message set when the wait began, and at most once more when the scheduler's words came
    # (phase changes and the scheduler's rewordings while waiting are no status writes)
    assert 1 <= len(seen["b_waiting"]) <= 2, seen["b_waiting"]
    for status, message in seen["b_waiting"]:
        assert status == "True" and "minMember 4, minResources cpu=4" in message, message
        assert "is Pending" in message or "is Scheduling" in message, message
    # (The State column shows the last condition, which the operator writes last (tests/unit); an
    # admission policy that reorders conditions on the cluster decides what it finally shows.)
    reasons = [e["reason"] for e in events(kubectl, namespace, "b")]
    assert pg.R_WAITING in reasons and pg.R_GANG_SCHEDULED in reasons, reasons
    assert pg.WAITING_CONDITION not in conditions(kubectl, namespace, "b")

    # Every pod went through the gang's scheduler, labelled with its PodGroup.
    for name in ("a", "b"):
        for p in pods(kubectl, namespace, name, "launcher") + pods(kubectl, namespace, name, "worker"):
            assert p["spec"]["schedulerName"] == SCHEDULER_NAME
            assert p["metadata"]["labels"][pg.POD_GROUP_LABEL] == name
    # B was woken by A's PodGroup, marked released once A's pods were off their nodes, not by the
    # scheduler's periodic retry (19-32 s after A's end, once more than 120 s, before that mark).
    assert seen["a_end_to_b_bound_s"] < 10, seen
    wait_until(lambda: get(kubectl, namespace, "podgroups.scheduling.x-k8s.io", "b") is None, 30,
               what="PodGroup b deleted when B's pods were off their nodes")
    # Each PodGroup went with its MPIJob's end: created once, marked released once, then deleted.
    writes = {v: op.metric("mpi_operator_api_writes_total", verb=v, kind="PodGroup")
              for v in ("create", "patch", "delete")}
    assert writes == {"create": 2.0, "patch": 2.0, "delete": 2.0}, writes


def test_explain_gang_that_cannot_fit_quotes_the_scheduler(kubectl, scheduler, pool, namespace, backend,
                                                           start_operator):
    """Issue 51 item 1, the gang: a gang that never fits (a launcher and 3 workers of 2 CPUs on 3 nodes
    of 2 CPUs) reads WaitingForGang with Coscheduling's own words, which it writes on the pods it turns
    away (its PodGroup has no condition), naming that pod; no pod is bound."""
    _, placement = pool
    grant_gang_rbac(kubectl, "scheduler-plugins", namespace)
    start_operator(backend, namespace, f"--gang-scheduling={SCHEDULER_NAME}")
    job = gang_job("big", placement, None)
    for rs in job["spec"]["mpiReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": NODE_CPU}}
    apply(kubectl, namespace, job)

    def quoted() -> dict | None:
        c = conditions(kubectl, namespace, "big").get(pg.WAITING_CONDITION) or {}
        return c if pg.QUOTE in (c.get("message") or "") else None

    c = wait_until(quoted, 90, what="WaitingForGang quoting the scheduler")
    assert c["status"] == "True" and c["reason"] == pg.R_WAITING, c
    named = c["message"].split(pg.QUOTE, 1)[1].split(":", 1)[0]  # "pod <name>"
    ours = {p["metadata"]["name"]: p for role in ("launcher", "worker") for p in pods(kubectl, namespace, "big", role)}
    assert named.startswith("pod ") and named[4:] in ours, (named, sorted(ours))
    turned = [x for x in ours[named[4:]]["status"].get("conditions") or [] if x["type"] == "PodScheduled"]
    assert turned and turned[0]["status"] == "False" and turned[0]["reason"] == "Unschedulable", turned
    scheduler.check_alive()
    assert bound(kubectl, namespace, "big")[0] == 0


def test_without_gang_scheduling_the_second_mpijob_is_placed_in_part(kubectl, pool, namespace, backend,
                                                                     start_operator):
    _, placement = pool
    op = start_operator(backend, namespace)
    seen = run_a_then_b(kubectl, namespace, placement, op, backend, mode="off")
    # B held 2 CPUs of the pool with 2 of its 4 pods unplaced: half a gang, waiting.
    assert (2, 2) in seen["b_bound_while_a_runs"], seen
    assert not seen["b_waiting"]
    assert all(p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"
               for p in pods(kubectl, namespace, "b", "worker"))


def test_volcano_podgroups_are_accepted_by_volcanos_crd(kubectl, crds, namespace, backend, start_operator):
    grant_gang_rbac(kubectl, "volcano", namespace)
    op = start_operator(backend, namespace, "--gang-scheduling=volcano")
    with_queue = simulated_mpijob("q", workers=WORKERS, launcher_runs=None, policy="AtStartup", run_policy={
        "schedulingPolicy": {"queue": "research", "priorityClass": "high", "minAvailable": 3}})
    plain = simulated_mpijob("plain", workers=WORKERS, launcher_runs=None, policy="AtStartup")
    for job in (with_queue, plain):
        for rs in job["spec"]["mpiReplicaSpecs"].values():
            rs["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
        apply(kubectl, namespace, job)

    kind = "podgroups.scheduling.volcano.sh"
    q = wait_until(lambda: get(kubectl, namespace, kind, "q"), 60, what="Volcano PodGroup q")
    plain_pg = wait_until(lambda: get(kubectl, namespace, kind, "plain"), 60, what="Volcano PodGroup plain")
    # minAvailable 3: the launcher and 2 workers must start together
    assert q["spec"]["minMember"] == 3 and q["spec"]["queue"] == "research"
    assert q["spec"]["priorityClassName"] == "high"
    assert q["spec"]["minResources"] == {"cpu": "1500m", "memory": "3Gi"}
    assert plain_pg["spec"]["minMember"] == WORKERS + 1
    assert plain_pg["spec"]["minResources"] == {"cpu": "2", "memory": "4Gi"}
    assert plain_pg["spec"]["queue"] == "default"  # the CRD's default, left alone by the operator
    (owner,) = q["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("MPIJob", "q", True)
    for p in wait_until(lambda: pods(kubectl, namespace, "q", "worker"), 60, what="pods of q"):
        assert p["spec"]["schedulerName"] == "volcano"
        assert p["metadata"]["annotations"][pg.VOLCANO_GROUP_ANNOTATION] == "q"

    # Steady state: no write fights the CRD's defaults.
    time.sleep(3)
    assert op.metric("mpi_operator_api_writes_total", kind="PodGroup") == 2

    # Suspend deletes the PodGroup, resume makes it afresh.
    kubectl("-n", namespace, "patch", MPIJOBS, "q", "--type=merge", "-p",
            json.dumps({"spec": {"runPolicy": {"suspend": True}}}))
    wait_until(lambda: get(kubectl, namespace, kind, "q") is None, 60, what="PodGroup q deleted on suspend")
    kubectl("-n", namespace, "patch", MPIJOBS, "q", "--type=merge", "-p",
            json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
    again = wait_until(lambda: get(kubectl, namespace, kind, "q"), 60, what="PodGroup q made again on resume")
    assert again["metadata"]["uid"] != q["metadata"]["uid"]

    # Deleting the MPIJob: the garbage collector removes its PodGroup (controller ownerReference).
    kubectl("-n", namespace, "delete", MPIJOBS, "plain", "--wait=false")
    wait_until(lambda: get(kubectl, namespace, kind, "plain") is None, 60, what="PodGroup plain collected")


# -- two MPIJobs submitted at once: the case that deadlocks without gang scheduling -----------------
# (Without it the split depends on the order the default scheduler takes the 8 pods in: 4/2 here,
# 3/3 is the deadlock. With it, whichever gang goes first goes whole and the other waits at 0.)


def submit_both(kubectl, ns: str, placement: dict, launcher_runs: str | None) -> None:
    for name in ("a", "b"):
        apply(kubectl, ns, gang_job(name, placement, launcher_runs))


def test_submitted_together_with_gang_scheduling_one_runs_whole_then_the_other(
        kubectl, scheduler, pool, namespace, backend, start_operator):
    _, placement = pool
    grant_gang_rbac(kubectl, "scheduler-plugins", namespace)
    start_operator(backend, namespace, f"--gang-scheduling={SCHEDULER_NAME}")
    submit_both(kubectl, namespace, placement, "8s")
    members = WORKERS + 1
    first = wait_until(lambda: next((n for n in ("a", "b") if bound(kubectl, namespace, n)[0] == members), None),
                       90, 0.2, what="one MPIJob with all its pods bound")
    other = "b" if first == "a" else "a"
    while not succeeded(kubectl, namespace, first):
        counts = bound_all(kubectl, namespace)  # both at one instant (gang.bound_all)
        if counts.get(first, (0, 0))[0]:
            assert counts.get(other, (0, 0))[0] == 0, f"{other} got a pod bound while {first} ran: {counts}"
        time.sleep(0.2)
    wait_all_bound(kubectl, namespace, other, scheduler, what=f"all of {other}'s pods bound after {first} ended")
    wait_condition(kubectl, namespace, other, "Succeeded", timeout=120)
    scheduler.check_alive()



# -- a suspend (as Kueue preempts) frees the pool for the gang that waits ----------------------------


def test_a_suspended_gang_makes_room_for_the_waiting_one_and_resumes_afresh(
        kubectl, scheduler, pool, namespace, backend, start_operator):
    _, placement = pool
    grant_gang_rbac(kubectl, "scheduler-plugins", namespace)
    start_operator(backend, namespace, f"--gang-scheduling={SCHEDULER_NAME}")
    members, kind = WORKERS + 1, "podgroups.scheduling.x-k8s.io"
    apply(kubectl, namespace, gang_job("a", placement, "300s"))
    wait_until(lambda: bound(kubectl, namespace, "a") == (members, 0), 90, 0.3, what="all of A's pods bound")
    first_group = get(kubectl, namespace, kind, "a")
    apply(kubectl, namespace, gang_job("b", placement, "8s"))
    wait_until(lambda: conditions(kubectl, namespace, "b").get(pg.WAITING_CONDITION, {}).get("status") == "True",
               60, 0.2, what="B waiting for its gang")

    # A is suspended: its pods stop, B is bound at once (not at the scheduler's periodic retry), and
    # A's PodGroup is released (marked, deleted) once A's pods are off their nodes.
    kubectl("-n", namespace, "patch", MPIJOBS, "a", "--type=merge", "-p",
            json.dumps({"spec": {"runPolicy": {"suspend": True}}}))
    t0 = time.monotonic()
    wait_all_bound(kubectl, namespace, "b", scheduler, what="all of B's pods bound after A's suspend")
    suspend_to_b_bound = time.monotonic() - t0
    print(f"\nFIGURE gang=coscheduling backend={backend} a_suspend_to_b_all_bound_s={suspend_to_b_bound:.2f}")
    assert suspend_to_b_bound < 10, suspend_to_b_bound
    wait_until(lambda: get(kubectl, namespace, kind, "a") is None, 30, what="A's PodGroup released")

    # Resumed while B holds the pool: A's PodGroup is made afresh, A waits whole, then runs whole.
    kubectl("-n", namespace, "patch", MPIJOBS, "a", "--type=merge", "-p",
            json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
    again = wait_until(lambda: get(kubectl, namespace, kind, "a"), 60, what="A's PodGroup made again")
    assert again["metadata"]["uid"] != first_group["metadata"]["uid"]
    deadline = time.monotonic() + 120
    while not succeeded(kubectl, namespace, "b"):
        counts = bound_all(kubectl, namespace)  # both at one instant (gang.bound_all)
        if counts.get("b", (0, 0))[0]:
            assert counts.get("a", (0, 0))[0] == 0, f"A got a pod bound while B ran: {counts}"
        assert time.monotonic() < deadline, "B did not succeed in 120 s"
        time.sleep(0.2)
    wait_until(lambda: bound(kubectl, namespace, "a") == (members, 0), 120, 0.3,
               what="all of A's pods bound after B ended")
    scheduler.check_alive()
