"""MultiKueue with this operator, both worker backends: a manager cluster (the shared local
cluster, with Kueue's MultiKueue controller and this operator) dispatches an MPIJob whose
runPolicy.managedBy is kueue.x-k8s.io/multikueue to a worker cluster (a second local control
plane, hack/worker-cluster-up.sh, with its own Kueue and this operator), where it runs; Kueue
copies the worker's status back. The manager's operator must leave that MPIJob alone: no pods, no
children, no Events, no status of its own.

The manager reaches the worker's API server through a TCP relay (e2e/relay.py), so a test can
lose the worker cluster from the manager's side, as a partition or a dead cluster looks to it,
while the worker goes on. Nothing may then run twice: one MPIJob in the worker, one launcher pod.

Kueue's webhooks are not installed (e2e/kueue.py): the MPIJobs are created as its webhook and a
user would make them, suspended, with the queue-name label and managedBy."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pytest
from kueue import (
    MULTIKUEUE,
    KueueProcess,
    cluster_queue,
    local_queue,
    multikueue_objects,
    resource_flavor,
    wait_workload,
    wl_condition,
    workload,
)
from kueue_fixtures import SESSION, create, install_crds, release, submit
from relay import Relay
from worker_cluster import HACK, WorkerCluster

from reconcilers.names import JOB_NAME_LABEL
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import MPIJOBS, apply, conditions, events, get, install_crd, items, now, wait_condition
from testsupport.operator_process import Operator
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.builds("kueue")]
KINDS_OF_CHILDREN = ("pods", "jobs.batch", "statefulsets.apps", "services", "configmaps", "secrets",
                     "podgroups.scheduling.x-k8s.io")


@pytest.fixture(scope="module")
def worker() -> Iterator[WorkerCluster]:
    """The second control plane: started here if it is not up, and then stopped after."""
    cluster = WorkerCluster()
    cluster.up()
    if cluster.started_here:
        print(f"\nworker cluster started in {cluster.start_s:.1f}s")
    yield cluster
    print(f"\nworker cluster RSS: {cluster.rss_mib()} MiB")
    if cluster.started_here and os.environ.get("KEEP_WORKER_CLUSTER") != "1":
        cluster.down()


@dataclass
class WorkerSide:
    cluster: WorkerCluster
    operator_kubeconfig: str
    kueue: KueueProcess


@pytest.fixture(scope="module")
def worker_side(worker, tmp_path_factory) -> Iterator[WorkerSide]:
    """What a worker cluster of MultiKueue runs: the MPIJob CRD and this operator's RBAC, Kueue's
    CRDs and Kueue itself (it admits the workloads the manager creates there)."""
    install_crd(worker.kubectl)
    out = tmp_path_factory.mktemp("worker-sa") / "kubeconfig"
    r = subprocess.run([str(HACK / "operator-kubeconfig.sh"), str(out)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "CLUSTER_DIR": str(worker.dir)})
    assert r.returncode == 0, r.stderr
    binary = install_crds(worker.kubectl)
    ns = f"kueue-e2e-{SESSION}-worker"
    worker.kubectl("create", "namespace", ns, check=False)
    proc = KueueProcess(binary, worker.kubeconfig, tmp_path_factory.mktemp("kueue-worker"), ns)
    try:
        try:
            proc.wait_ready()
        except AssertionError:
            print(f"\n--- worker kueue log ({proc.log_path}) ---\n{proc.tail(80)}")
            raise
        yield WorkerSide(worker, str(out), proc)
    finally:
        proc.stop()
        worker.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def relay(worker) -> Iterator[Relay]:
    server = urlparse(worker.server())
    r = Relay((server.hostname, server.port))
    yield r
    r.close()


@pytest.fixture(scope="module")
def multikueue(kubectl, kueue, kueue_namespace, worker_side, relay) -> Iterator[str]:
    """The manager's side: the worker's kubeconfig (through the relay) in a Secret of Kueue's
    namespace, a MultiKueueCluster, MultiKueueConfig and AdmissionCheck named alike; its name once
    the cluster is connected and the check active."""
    name = f"kueue-e2e-{SESSION}-mk"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": kueue_namespace},
              "stringData": {"kubeconfig": worker_side.cluster.flat_kubeconfig(f"https://{relay.address}")}}
    kubectl("apply", "-f", "-", input=json.dumps(secret))
    made: list[tuple[str, str]] = []
    kinds = ("multikueueclusters", "multikueueconfigs", "admissionchecks")
    try:
        for kind, obj in zip(kinds, multikueue_objects(name, name), strict=True):
            create(kubectl, f"{kind}.kueue.x-k8s.io", obj, made)
        wait_until(lambda: cluster_active(kubectl, name) == "True", 60, what="MultiKueueCluster Active")
        wait_until(lambda: condition_of(kubectl, "admissionchecks.kueue.x-k8s.io", name, "Active") == "True",
                   60, what="the MultiKueue AdmissionCheck Active")
        yield name
    finally:
        for kind, n in reversed(made):
            release(kubectl, None, kind, [n])


def condition_of(kubectl, kind: str, name: str, ctype: str) -> str | None:
    obj = get(kubectl, "", kind, name) or {}
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype),
                None)


def cluster_active(kubectl, name: str) -> str | None:
    return condition_of(kubectl, "multikueueclusters.kueue.x-k8s.io", name, "Active")


@pytest.fixture
def mk_queue(kubectl, kueue, multikueue, worker_side, namespace, backend, start_operator,
             tmp_path) -> Iterator[Operator]:
    """The queue `q` in both clusters for this test's namespace: in the manager a ClusterQueue with
    the MultiKueue admission check; in the worker the same namespace, a ClusterQueue and this
    operator (the same backend) for it. Yields the worker's operator."""
    worker = worker_side.cluster
    tag = uuid.uuid4().hex[:6]
    made: list[tuple[str, str]] = []
    flavor, cq = f"kueue-e2e-{tag}-mk", f"kueue-e2e-{tag}-mk"
    # The manager runs no pods: its flavor selects no node, only counts quota.
    create(kubectl, "resourceflavors.kueue.x-k8s.io", resource_flavor(flavor, {}, None), made)
    create(kubectl, "clusterqueues.kueue.x-k8s.io",
           cluster_queue(cq, namespace, {flavor: "4"}, admission_checks=(multikueue,)), made)
    apply(kubectl, namespace, local_queue("q", cq))

    worker.kubectl("create", "namespace", namespace)
    for obj in (resource_flavor(flavor, {}, None), cluster_queue(cq, namespace, {flavor: "4"})):
        worker.kubectl("apply", "-f", "-", input=json.dumps(obj))
    worker.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(local_queue("q", cq)))
    op = Operator(worker_side.operator_kubeconfig, backend, namespace, tmp_path / "worker-operator.log")
    try:
        op.wait_ready()
        yield op
    finally:
        op.stop()
        print(f"\n--- worker operator log, last lines ---\n{op.tail(40)}")
        kubectl("-n", namespace, "delete", MPIJOBS, "--all", "--wait=false", check=False)
        release(kubectl, namespace, "workloads.kueue.x-k8s.io",
                [w["metadata"]["name"] for w in items(kubectl, namespace, "workloads.kueue.x-k8s.io")])
        for kind, name in reversed(made):
            release(kubectl, None, kind, [name])
        worker.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        worker.kubectl("delete", "clusterqueues.kueue.x-k8s.io", cq, "resourceflavors.kueue.x-k8s.io", flavor,
                       "--wait=false", check=False)


def dispatched(name: str, **extra) -> dict:
    job = simulated_mpijob(name, **extra)
    job["spec"]["runPolicy"]["managedBy"] = MULTIKUEUE
    return job


def nothing_of_ours_in_the_manager(kubectl, ns: str, name: str) -> None:
    """The manager's operator left the MPIJob alone: no child object, no Event of its own."""
    uid = get(kubectl, ns, MPIJOBS, name)["metadata"]["uid"]
    for kind in KINDS_OF_CHILDREN:
        r = kubectl("-n", ns, "get", kind, "-o", "json", check=False)
        if r.returncode != 0:  # a kind this cluster does not serve
            continue
        owned = [o["metadata"]["name"] for o in json.loads(r.stdout)["items"]
                 if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
                 or (o["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name]
        assert not owned, f"the manager has {kind} of the MPIJob: {owned}"
    ours = [e["reason"] for e in events(kubectl, ns, name) if e.get("reportingComponent") == "mpi-operator"]
    assert not ours, f"the manager's operator recorded Events for an MPIJob it does not manage: {ours}"


@dataclass
class WorkerWatch:
    """Polls the worker cluster in the background: every MPIJob uid and launcher pod uid seen
    under the name, so that a second copy, even a short-lived one, is caught."""

    cluster: WorkerCluster
    ns: str
    name: str
    mpijobs: set[str] = field(default_factory=set)
    launchers: set[str] = field(default_factory=set)
    workloads: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self._poll()
            except Exception as e:  # a poll that failed must not end the watch unseen
                self.errors.append(repr(e))

    def _poll(self) -> None:
        job = get(self.cluster.kubectl, self.ns, MPIJOBS, self.name)
        if job:
            self.mpijobs.add(job["metadata"]["uid"])
        for p in items(self.cluster.kubectl, self.ns, "pods",
                       f"{JOB_NAME_LABEL}={self.name},training.kubeflow.org/job-role=launcher"):
            self.launchers.add(p["metadata"]["uid"])
        self.workloads |= {w["metadata"]["uid"] for w in items(self.cluster.kubectl, self.ns,
                                                               "workloads.kueue.x-k8s.io")}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        # The worker's API server stays up in these tests: a poll that failed hid what it would have seen.
        assert not self.errors, self.errors[:3]


def test_kueue_multikueue_mpijob_runs_in_the_worker_cluster_and_succeeds_in_the_manager(
        kubectl, kueue, operator, namespace, backend, multikueue, mk_queue, worker_side, pods_ready):
    worker = worker_side.cluster
    t0 = now()
    submit(kubectl, namespace, dispatched("pi", launcher_runs="4s"), "q")
    watch = WorkerWatch(worker, namespace, "pi")
    try:
        remote = wait_until(lambda: get(worker.kubectl, namespace, MPIJOBS, "pi"), 60, what="the worker's MPIJob")
        # MultiKueue clears managedBy in the worker's copy: there, the MPI operator runs it.
        assert not remote["spec"]["runPolicy"].get("managedBy"), remote["spec"]["runPolicy"]
        wait_condition(worker.kubectl, namespace, "pi", "Running", timeout=60)
        running = wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
        w = pods_ready(namespace, "pi")
        assert w["status"].get("clusterName") == multikueue, w["status"]
        nothing_of_ours_in_the_manager(kubectl, namespace, "pi")

        done = wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
        took = now() - t0
        manager_job = get(kubectl, namespace, MPIJOBS, "pi")
        assert manager_job["spec"]["runPolicy"]["managedBy"] == MULTIKUEUE
        # The worker's status, as the worker's operator wrote it.
        assert manager_job["status"]["replicaStatuses"]["Launcher"].get("succeeded") == 1, manager_job["status"]
        assert done["reason"] and running["reason"], (done, running)
        finished = wait_workload(kubectl, namespace, "pi", "Finished", timeout=60)
        assert wl_condition(finished, "Finished")["reason"] == "Succeeded", finished["status"]
        nothing_of_ours_in_the_manager(kubectl, namespace, "pi")
        # The manager's Workload finished, MultiKueue deletes its objects in the worker.
        wait_until(lambda: not get(worker.kubectl, namespace, MPIJOBS, "pi"), 60, what="the worker's copy deleted")
    finally:
        watch.stop()
    assert len(watch.mpijobs) == 1 and len(watch.launchers) == 1, (watch.mpijobs, watch.launchers)
    print(f"\nMultiKueue {backend}: submitted to the manager -> Succeeded there in {took:.1f}s")


def test_kueue_multikueue_worker_cluster_lost_mid_run_then_back_runs_nothing_twice(
        kubectl, kueue, operator, namespace, backend, multikueue, mk_queue, worker_side, relay):
    """The manager loses the worker cluster (every connection to its API server reset, new ones
    refused: a partition, or the worker's control plane gone, as the manager sees either) while
    the worker goes on and finishes the job. Stopping the worker's whole control plane instead
    would also stop kwok, its simulated nodes, whose pods then never finish: a real node's
    kubelet keeps its containers running through a control-plane outage."""
    worker = worker_side.cluster
    submit(kubectl, namespace, dispatched("pi", launcher_runs="15s"), "q")
    watch = WorkerWatch(worker, namespace, "pi")
    try:
        wait_condition(kubectl, namespace, "pi", "Running", timeout=60)
        wait_workload(kubectl, namespace, "pi", "Admitted", timeout=30)

        relay.cut()
        t_cut = now()
        wait_until(lambda: cluster_active(kubectl, multikueue) == "False", 90, what="the worker cluster seen lost")
        lost_after = now() - t_cut
        seen = get(kubectl, "", "multikueueclusters.kueue.x-k8s.io", multikueue)["status"]["conditions"]
        # While it is lost, the manager's MPIJob keeps the last status copied, and Kueue keeps the
        # Workload admitted (until workerLostTimeout, 15 minutes by default): nothing is evicted,
        # suspended or dispatched again.
        wait_condition(worker.kubectl, namespace, "pi", "Succeeded", timeout=60)
        during = conditions(kubectl, namespace, "pi")
        assert during["Running"]["status"] == "True" and "Succeeded" not in during, during
        w = workload(kubectl, namespace, "pi")
        assert wl_condition(w, "Admitted").get("status") == "True", w["status"]
        assert wl_condition(w, "Evicted").get("status") != "True", w["status"]
        assert w["status"]["clusterName"] == multikueue, w["status"]
        checks = {c["name"]: c["state"] for c in w["status"].get("admissionChecks") or []}
        assert checks == {multikueue: "Ready"}, w["status"]
        assert not get(kubectl, namespace, MPIJOBS, "pi")["spec"]["runPolicy"].get("suspend")
        down_for = now() - t_cut

        relay.restore()
        t_back = now()
        wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=180)
        synced_after = now() - t_back
        assert cluster_active(kubectl, multikueue) == "True"
        wait_workload(kubectl, namespace, "pi", "Finished", timeout=60)
        nothing_of_ours_in_the_manager(kubectl, namespace, "pi")
    finally:
        relay.restore()
        watch.stop()
    assert len(watch.mpijobs) == 1, watch.mpijobs
    assert len(watch.launchers) == 1, watch.launchers
    assert len(watch.workloads) == 1, watch.workloads
    active = next(c for c in seen if c["type"] == "Active")
    print(f"\nMultiKueue {backend}, worker lost: seen lost {lost_after:.1f}s after the cut "
          f"({active['reason']}: {active['message'][:160]}); the manager's MPIJob showed Running for the "
          f"{down_for:.0f}s the worker was away while the worker finished it; back -> Succeeded in the "
          f"manager {synced_after:.1f}s after the worker came back; one MPIJob, one launcher pod, one Workload "
          f"in the worker")
