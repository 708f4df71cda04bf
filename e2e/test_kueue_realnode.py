"""Kueue 0.19.2 preempting an MPIJob that really runs, on the real node (issue 50 item 1;
docs/architecture.md section 11, "An attempt a suspend or a disruption ended"). Open MPI 5's mpirun
exits 0 on the SIGTERM Kueue's suspend brings, so the attempt it ended looks like a finish: it must
be neither a finish nor a counted failure, and the re-admitted run starts afresh.

The ClusterQueue's one flavor is the real node (its label and the toleration for its taint, as
hack/realnode/up.sh sets them) with room for the low-priority MPIJob or the high one, not both. Like
e2e/test_kueue.py, every cluster-scoped object has a name of its own, is usable only from the test's
namespace, and is deleted after. `pytest -s` prints the times."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from kueue import (
    cluster_queue,
    local_queue,
    mpijob_suspended,
    resource_flavor,
    wait_workload,
    wl_condition,
    workload_priority_class,
)
from kueue import workload as kueue_workload
from kueue_fixtures import release, submit

from testsupport.kubectl import apply, condition_statuses, get, items, namespaced_service_account_kubeconfig
from testsupport.realnode_mpi import (
    ON_REAL_NODE,
    SSHD,
    launcher_logs,
    mpijob,
    pods,
    rank_hosts,
    ranks_started,
    wait_finished,
)
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("kueue"),
              pytest.mark.builds("mpi-images")]
FLAVOUR = "openmpi5"
RANKS = 4
REAL_NODE_LABEL, = ON_REAL_NODE["nodeSelector"]
# Each pod of hack/realnode/pi-mpijob.yaml asks 100m and 64Mi: the low MPIJob (launcher and 2 workers)
# 300m, the high one (launcher and 1 worker) 200m; 400m holds one of them.
QUOTA = {"cpu": "400m", "memory": "1Gi"}
# About 25-30 s of computing for 4 ranks on the busy cores: long enough to be preempted mid-way.
LOW = ["mpirun", "-n", str(RANKS), "sh", "-c", 'echo "rank-start $(hostname)"; exec /opt/pi 12000000000']
HIGH = ["mpirun", "-n", "1", "/opt/pi", "100000000"]


def _as_command(job: dict, command: list[str]) -> dict:
    """The launcher's command is mpirun itself, as users write it (upstream's pi.yaml)."""
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher.pop("args", None)
    launcher["command"] = command
    return job


def _launcher_exits(kubectl, ns: str, name: str) -> dict[str, int]:
    """pod -> its launcher container's exit code, of the launcher pods that have ended (printed: the
    exit Open MPI 5's mpirun took on the preemption's SIGTERM)."""
    return {p["metadata"]["name"]: cs["state"]["terminated"]["exitCode"] for p in pods(kubectl, ns, name, "launcher")
            for cs in p["status"].get("containerStatuses") or [] if "terminated" in cs.get("state", {})}


@pytest.fixture
def real_node_queue(kubectl, kueue, namespace) -> Iterator[dict[str, str]]:
    """A flavor on the real node, a preempting ClusterQueue for `namespace` alone, its LocalQueue `q`
    and two WorkloadPriorityClasses: {"queue", "low", "high"}; all deleted after."""
    tag = f"kueue-e2e-{uuid.uuid4().hex[:6]}"
    flavor = resource_flavor(f"{tag}-realnode", {REAL_NODE_LABEL: "true"}, REAL_NODE_LABEL)
    cq = cluster_queue(tag, namespace, {}, preempt=True)
    cq["spec"]["resourceGroups"] = [{"coveredResources": sorted(QUOTA), "flavors": [
        {"name": flavor["metadata"]["name"], "resources": [{"name": r, "nominalQuota": q} for r, q in QUOTA.items()]}]}]
    low, high = workload_priority_class(f"{tag}-low", 100), workload_priority_class(f"{tag}-high", 1000)
    made = [("resourceflavors.kueue.x-k8s.io", flavor), ("clusterqueues.kueue.x-k8s.io", cq),
            ("workloadpriorityclasses.kueue.x-k8s.io", low), ("workloadpriorityclasses.kueue.x-k8s.io", high)]
    try:
        for _, obj in made:
            kubectl("apply", "-f", "-", input=json.dumps(obj))
        apply(kubectl, namespace, local_queue("q", tag))
        yield {"queue": "q", "low": low["metadata"]["name"], "high": high["metadata"]["name"]}
    finally:
        kubectl("-n", namespace, "delete", "mpijobs", "--all", "--wait=false", check=False)
        release(kubectl, namespace, "workloads.kueue.x-k8s.io",
                [w["metadata"]["name"] for w in items(kubectl, namespace, "workloads.kueue.x-k8s.io")])
        for kind, obj in reversed(made):
            release(kubectl, None, kind, [obj["metadata"]["name"]])


@pytest.fixture
def op(start_operator, kubectl, namespace, backend, tmp_path):
    """The operator for `namespace` alone under manifests/rbac-namespaced/'s ServiceAccount (as in
    e2e/test_interrupted.py: the cluster-wide admission policy on pod writes is whichever checkout
    applied manifests/rbac last, and this one's lets the operator release its held pods)."""
    kc = namespaced_service_account_kubeconfig(kubectl, namespace, tmp_path / "kubeconfig")
    return start_operator(backend, namespace, f"--leader-election-namespace={namespace}", kubeconfig=kc)


def test_preempted_by_kueue_on_the_real_node_succeeds_after_readmission_without_a_failure(
        kubectl, realnode, mpi_image, kueue, real_node_queue, op, namespace, backend):
    image, q = mpi_image(FLAVOUR), real_node_queue
    low = _as_command(mpijob("low", FLAVOUR, image, args=[], backoff=0, worker_command=SSHD), LOW)
    submit(kubectl, namespace, low, q["queue"], q["low"])
    wait_until(lambda: ranks_started(kubectl, namespace, "low") >= RANKS, 240, interval=0.3,
               what=f"{RANKS} ranks of low computing")
    time.sleep(5)
    high = _as_command(mpijob("high", FLAVOUR, image, args=[], workers=1, slots=1, backoff=0,
                              worker_command=SSHD), HIGH)
    t0 = time.time()
    submit(kubectl, namespace, high, q["queue"], q["high"])
    w = wait_workload(kubectl, namespace, "low", "Preempted", timeout=60)
    assert wl_condition(w, "Preempted")["reason"] == "InClusterQueue", w["status"]
    preempted = time.time() - t0

    # Kueue marks the Workload Preempted first, then suspends the MPIJob. From then until Kueue
    # resumes it (once high has finished): never ended, shown Suspended.
    wait_until(lambda: mpijob_suspended(kubectl, namespace, "low"), 30, interval=0.2, what="low suspended")
    shown_suspended, deadline, exits = False, time.monotonic() + 300, {}
    while mpijob_suspended(kubectl, namespace, "low"):
        exits.update(_launcher_exits(kubectl, namespace, "low"))
        assert time.monotonic() < deadline, f"low never re-admitted: {condition_statuses(kubectl, namespace, 'high')}"
        conds = condition_statuses(kubectl, namespace, "low")
        assert conds.get("Succeeded") != "True" and conds.get("Failed") != "True", conds
        shown_suspended |= conds.get("Suspended") == "True"
        time.sleep(0.5)
    assert shown_suspended, "low never showed Suspended while preempted"
    assert condition_statuses(kubectl, namespace, "high").get("Succeeded") == "True"
    readmitted = time.time() - t0

    result = wait_finished(kubectl, namespace, "low", 420)
    job = get(kubectl, namespace, "mpijobs.kubeflow.org", "low")
    logs = launcher_logs(kubectl, namespace, "low")
    assert result == "Succeeded", (job["status"], logs[-3000:])
    assert "pi is approximately 3.14" in logs and sorted(rank_hosts(logs)) == list(range(RANKS)), logs[-3000:]
    assert ((job["status"].get("replicaStatuses") or {}).get("Launcher") or {}).get("failed", 0) == 0, job["status"]
    finished = wait_workload(kubectl, namespace, "low", "Finished", timeout=30)
    assert wl_condition(finished, "Finished")["reason"] == "Succeeded", finished["status"]
    assert wl_condition(kueue_workload(kubectl, namespace, "high"), "Finished").get("status") == "True"
    print(f"\n[preempted by kueue] {FLAVOUR} {backend:<11} preempted {preempted:.1f}s, re-admitted {readmitted:.1f}s, "
          f"Succeeded {time.time() - t0:.1f}s after the high-priority MPIJob was submitted; "
          f"the preempted launcher's exit: {exits or 'not seen'}")
