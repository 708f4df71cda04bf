"""Kueue's topology-aware scheduling (TAS) of MPIJobs, both worker backends: kwok nodes of this
run's own labelled with a block and a rack, a Topology (block, rack, hostname) and a TAS
ResourceFlavor over them. Kueue admits an MPIJob on a topology domain, puts a scheduling gate and
its workload's labels in the MPIJob's pod templates, and once the pods exist removes the gate
from each pod with a nodeSelector naming the node Kueue chose for that pod's rank. A rank is read
from the pod label training.kubeflow.org/replica-index (set by this project's
MutatingAdmissionPolicy, manifests/admission/) minus an offset: the launcher's count within a
pod-set group, or Kueue's pod-index-offset annotation with runLauncherAsWorker.

So the operator must carry the gate, labels and annotations Kueue put in the MPIJob's templates
onto every pod, and the pods must carry upstream's replica-index; then every worker lands on the
node Kueue assigned to its rank, and all of them in the rack asked for.

Every node is tainted (only this run's flavor tolerates it) and every cluster-scoped object has a
name of its own and is deleted after, like e2e/test_kueue.py's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kueue import (
    HOSTNAME,
    PODSET_GROUP,
    REQUIRED_TOPOLOGY,
    TOPOLOGY_GATE,
    cluster_queue,
    local_queue,
    podset_assignment,
    resource_flavor,
    topology,
    topology_ranks,
    wait_workload,
)
from kueue_fixtures import (
    LABEL_PREFIX,
    SESSION,
    TAINT,
    create,
    kwok_node,
    release,
    running_pods,
    submit,
    wait_nodes_ready,
)

from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, install_replica_index_policy, items, wait_condition
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.builds("kueue")]
BLOCK = f"{LABEL_PREFIX}/block"
RACK = f"{LABEL_PREFIX}/rack"
TAS_LABEL = f"{LABEL_PREFIX}/tas"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
# block -> its racks; two nodes a rack, two CPUs a node: a rack holds exactly four 1-CPU pods,
# so an MPIJob of four such pods fits in one rack only across both its nodes, and a rank order
# that disagreed with Kueue's would put a pod on the wrong node.
RACKS = {"b1": ("r1", "r2"), "b2": ("r3",)}
NODES_PER_RACK = 2
NODE_CPU = "2"


@dataclass
class Tas:
    topology: str
    nodes: dict[str, tuple[str, str]]  # node -> (block, rack)
    flavor_labels: dict[str, str]


@pytest.fixture(scope="module")
def replica_index_policy(kubectl) -> None:
    install_replica_index_policy(kubectl)


@pytest.fixture(scope="module")
def tas(kubectl, kueue) -> Iterator[Tas]:
    """The nodes, labelled block/rack/hostname, and the Topology over them."""
    flavor_labels = {TAS_LABEL: SESSION}
    nodes = {f"kueue-e2e-{SESSION}-{block}-{rack}-{i}": (block, f"{block}-{rack}")
             for block, racks in RACKS.items() for rack in racks for i in range(NODES_PER_RACK)}
    name = f"kueue-e2e-{SESSION}-tas"
    try:
        for node, (block, rack) in nodes.items():
            labels = {**flavor_labels, BLOCK: block, RACK: rack}
            kubectl("apply", "-f", "-", input=json.dumps(kwok_node(node, labels, cpu=NODE_CPU)))
        wait_nodes_ready(kubectl, list(nodes))
        kubectl("apply", "-f", "-", input=json.dumps(topology(name, [BLOCK, RACK, HOSTNAME])))
        yield Tas(name, nodes, flavor_labels)
    finally:
        release(kubectl, None, "topologies.kueue.x-k8s.io", [name])
        kubectl("delete", "node", *nodes, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture
def tas_queue(kubectl, kueue, tas, namespace) -> Iterator[str]:
    """A TAS flavor over this run's nodes, a ClusterQueue only this test's namespace may use, and
    the LocalQueue `q`; deleted after, once this test's pods have left the nodes (Kueue counts the
    pods it finds on a node against what it can place there)."""
    tag = uuid.uuid4().hex[:6]
    made: list[tuple[str, str]] = []
    flavor = f"kueue-e2e-{tag}-tas"
    create(kubectl, "resourceflavors.kueue.x-k8s.io",
           resource_flavor(flavor, tas.flavor_labels, TAINT, topology=tas.topology), made)
    create(kubectl, "clusterqueues.kueue.x-k8s.io", cluster_queue(f"kueue-e2e-{tag}", namespace, {flavor: "32"}), made)
    apply(kubectl, namespace, local_queue("q", f"kueue-e2e-{tag}"))
    yield "q"
    kubectl("-n", namespace, "delete", "mpijobs", "--all", "--wait=false", check=False)
    release(kubectl, namespace, "workloads.kueue.x-k8s.io",
            [w["metadata"]["name"] for w in items(kubectl, namespace, "workloads.kueue.x-k8s.io")])
    wait_until(lambda: not items(kubectl, namespace, "pods"), 60, what="this test's pods gone")
    for kind, name in reversed(made):
        release(kubectl, None, kind, [name])


def one_cpu(job: dict, *roles: str) -> dict:
    for role in roles:
        container = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        container["resources"] = {"requests": {"cpu": "1"}}
    return job


def annotate(job: dict, role: str, annotations: dict[str, str]) -> dict:
    job["spec"]["mpiReplicaSpecs"][role]["template"].setdefault("metadata", {}).setdefault(
        "annotations", {}).update(annotations)
    return job


def placements(pods: list[dict], role: str) -> dict[int, dict]:
    """replica-index -> pod, for the pods of one role (each must carry the label)."""
    found = {int(p["metadata"]["labels"][REPLICA_INDEX]): p for p in pods
             if p["metadata"]["labels"]["training.kubeflow.org/job-role"] == role}
    return dict(sorted(found.items()))


def check_rank(pod: dict, rank_to_domain: list[dict[str, str]], rank: int, tas: Tas) -> str:
    """The pod runs on the node Kueue assigned to its rank, ungated with that node's selector."""
    node = rank_to_domain[rank][HOSTNAME]
    name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == node, (name, rank, pod["spec"]["nodeName"], rank_to_domain)
    assert pod["spec"]["nodeSelector"].get(HOSTNAME) == node, (name, pod["spec"]["nodeSelector"])
    assert TOPOLOGY_GATE not in {g["name"] for g in pod["spec"].get("schedulingGates") or []}, name
    rack = tas.nodes[node][1]
    role, index = pod["metadata"]["labels"]["training.kubeflow.org/job-role"], pod["metadata"]["labels"][REPLICA_INDEX]
    return f"{role} {index} (rank {rank}) -> {node} ({rack})"


@pytest.mark.parametrize("launcher_as_worker", [False, True], ids=["launcher-apart", "launcher-as-worker"])
def test_kueue_topology_required_rack_puts_every_worker_in_one_rack_in_rank_order(
        kubectl, kueue, operator, namespace, backend, replica_index_policy, tas, tas_queue, pods_ready,
        launcher_as_worker):
    job = annotate(one_cpu(simulated_mpijob("pi", workers=4, launcher_runs="8s"), "Worker"), "Worker",
                   {REQUIRED_TOPOLOGY: RACK})
    job["spec"]["runLauncherAsWorker"] = launcher_as_worker
    submit(kubectl, namespace, job, tas_queue)
    w = wait_workload(kubectl, namespace, "pi", "Admitted", timeout=60)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    pods_ready(namespace, "pi")

    ranks = topology_ranks(podset_assignment(w, "worker")["topologyAssignment"])
    assert len(ranks) == 4, ranks
    # upstream's indexes: workers 0..3, or 1..4 when the launcher is rank 0 (Kueue subtracts the
    # pod-index-offset its webhook put on the Worker template).
    offset = 1 if launcher_as_worker else 0
    workers = placements(running_pods(kubectl, namespace, "pi", 4), "worker")
    assert list(workers) == [i + offset for i in range(4)], list(workers)
    seen = [check_rank(p, ranks, index - offset, tas) for index, p in workers.items()]
    racks = {tas.nodes[p["spec"]["nodeName"]][1] for p in workers.values()}
    assert len(racks) == 1, seen
    assert len({p["spec"]["nodeName"] for p in workers.values()}) == NODES_PER_RACK, seen
    print(f"\nworkers of {backend}/{'launcher-as-worker' if launcher_as_worker else 'launcher-apart'}: "
          + "; ".join(seen))
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    wait_workload(kubectl, namespace, "pi", "Finished", timeout=30)


def test_kueue_topology_podset_group_puts_the_launcher_and_its_workers_in_one_rack(
        kubectl, kueue, operator, namespace, backend, replica_index_policy, tas, tas_queue, pods_ready):
    # The launcher is rank 0 and one of the four 1-CPU pods the rack must hold with its 3 workers.
    group = {REQUIRED_TOPOLOGY: RACK, PODSET_GROUP: "mpi"}
    job = one_cpu(simulated_mpijob("pi", workers=3, launcher_runs="8s"), "Launcher", "Worker")
    job = annotate(annotate(job, "Launcher", group), "Worker", group)
    job["spec"]["runLauncherAsWorker"] = True
    submit(kubectl, namespace, job, tas_queue)
    w = wait_workload(kubectl, namespace, "pi", "Admitted", timeout=60)
    wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
    pods_ready(namespace, "pi")

    pods = running_pods(kubectl, namespace, "pi", 3)
    (launcher,) = placements(pods, "launcher").values()
    seen = [check_rank(launcher, topology_ranks(podset_assignment(w, "launcher")["topologyAssignment"]), 0, tas)]
    # In a group Kueue ranks the larger pod set after the smaller: worker replica-index i+1 is its
    # rank i among the workers.
    worker_ranks = topology_ranks(podset_assignment(w, "worker")["topologyAssignment"])
    workers = placements(pods, "worker")
    assert list(workers) == [1, 2, 3], list(workers)
    seen += [check_rank(p, worker_ranks, index - 1, tas) for index, p in workers.items()]
    racks = {tas.nodes[p["spec"]["nodeName"]][1] for p in pods}
    assert len(racks) == 1, seen
    print(f"\nlauncher and workers of {backend} (one group): " + "; ".join(seen))
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    wait_workload(kubectl, namespace, "pi", "Finished", timeout=30)
