"""Benchmark of the informer pipeline against the local cluster (not a timed test):

- events/s through informer -> handler -> rate-limited work queue -> a worker (get/done), for
  10 000 ConfigMaps: while they are created (bounded by the API server), on the initial list of a
  fresh informer, and for the burst of DELETED events of one deletecollection;
- the store's memory per cached pod, raw and with the slim_pod transform (tracemalloc on synthetic
  pod dicts decoded from JSON, as the reflector decodes them);
- the same for Kueue's Workloads (one per MPIJob under Kueue), raw and with slim_kueue_workload,
  indexed by their MPIJob as the controller keeps them (issue 51: what watching them costs).

    python -m bench.bench_informer            # a table, then the JSON
    python -m bench.bench_informer workloads  # the Workloads' memory alone (no cluster needed)

Uses $KUBECONFIG or .cluster/kubeconfig; starts the local cluster (hack/cluster-up.sh) when it is
not up. BENCH_CONFIGMAPS overrides the count.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from client.errors import ApiError
from client.resources import CONFIGMAPS, NAMESPACES
from client.rest import RestClient
from controller.workqueue import RateLimitingQueue
from informers.informer import SharedInformer
from informers.store import Store, meta_namespace_key
from informers.transforms import slim_kueue_workload, slim_pod
from testsupport.paths import CLUSTER_DIR, ROOT

N_CONFIGMAPS = int(os.environ.get("BENCH_CONFIGMAPS", "10000"))
N_PODS = 2000
N_WORKLOADS = int(os.environ.get("BENCH_WORKLOADS", "1000"))


def _kubeconfig() -> str:
    path = os.environ.get("KUBECONFIG") or str(CLUSTER_DIR / "kubeconfig")
    client = None
    if Path(path).exists():
        try:
            client = RestClient.from_kubeconfig(path)
            client.request("GET", "/version", timeout=5)
        except Exception:
            client = None
    if client is None:
        print(">> local cluster not up: hack/cluster-up.sh", file=sys.stderr)
        subprocess.run([str(ROOT / "hack" / "cluster-up.sh")], check=True, env={**os.environ, "REAL_NODE": "0"})
        path = str(CLUSTER_DIR / "kubeconfig")
    return path


class Pipeline:
    """informer -> handler (key into the queue) -> one worker thread doing get/done."""

    def __init__(self, client: RestClient, ns: str, name: str) -> None:
        self.inf = SharedInformer(client, CONFIGMAPS, namespace=ns, name=name)
        self.queue = RateLimitingQueue(name)
        self.events = 0
        self.processed = 0
        self.lock = threading.Lock()
        self.inf.add_event_handler(self._on_add, self._on_update, self._on_delete)
        self.worker = threading.Thread(target=self._work, daemon=True)

    def _key(self, obj) -> None:
        with self.lock:
            self.events += 1
        self.queue.add(meta_namespace_key(obj))

    def _on_add(self, obj):
        self._key(obj)

    def _on_update(self, old, new):
        self._key(new)

    def _on_delete(self, obj):
        self._key(obj)

    def _work(self) -> None:
        while True:
            key, shutdown = self.queue.get()
            if shutdown:
                return
            with self.lock:
                self.processed += 1
            self.queue.done(key)

    def start(self) -> None:
        self.worker.start()
        self.inf.start()

    def wait_events(self, n: int, timeout: float = 600) -> float:
        """Waits until `n` events went through the handler and the queue is empty; returns when."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                done = self.events >= n
            if done and len(self.queue) == 0:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.events} of {n} events after {timeout}s")
            time.sleep(0.005)

    def stop(self) -> None:
        self.inf.stop()
        self.queue.shutdown()


def bench_events(path: str) -> dict:
    client = RestClient.from_kubeconfig(path, qps=0, burst=1)  # no client-side limit for the writer
    ns = f"bench-inf-{uuid.uuid4().hex[:6]}"
    client.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
    out: dict = {"configmaps": N_CONFIGMAPS}
    try:
        base = len(client.request("GET", CONFIGMAPS.path(ns))["items"])  # kube-root-ca.crt
        live = Pipeline(client, ns, "bench-live")
        live.start()
        assert live.inf.wait_for_sync(60)
        base_events = live.events

        def create(i: int) -> None:
            body = {"metadata": {"name": f"cm-{i:05d}", "labels": {"bench": "1"}},
                    "data": {"payload": "x" * 256}}
            for _ in range(5):
                try:
                    client.request("POST", CONFIGMAPS.path(ns), body=body)
                    return
                except ApiError as e:
                    if e.reason == "AlreadyExists":
                        return
                    if e.status not in (429, 500, 503, 504):
                        raise
                    time.sleep(e.retry_after or 0.1)

        t0 = time.monotonic()
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(create, range(N_CONFIGMAPS)))
        t_created = time.monotonic()
        t_seen = live.wait_events(base_events + N_CONFIGMAPS)
        out["create_per_s"] = round(N_CONFIGMAPS / (t_created - t0), 1)
        out["live_events_per_s"] = round(N_CONFIGMAPS / (t_seen - t0), 1)
        out["live_lag_after_last_create_s"] = round(t_seen - t_created, 3)

        # the initial list of a fresh informer: 10 000 adds through handler and queue
        fresh = Pipeline(client, ns, "bench-list")
        t0 = time.monotonic()
        fresh.start()
        t_sync = fresh.wait_events(N_CONFIGMAPS + base)
        out["initial_list_events_per_s"] = round((N_CONFIGMAPS + base) / (t_sync - t0), 1)
        fresh.stop()

        # a burst of DELETED events: one deletecollection, watched by the live pipeline
        before = live.events
        t0 = time.monotonic()
        client.request("DELETE", CONFIGMAPS.path(ns), query={"labelSelector": "bench=1"}, timeout=300)
        t_deleted = time.monotonic()
        t_seen = live.wait_events(before + N_CONFIGMAPS)
        out["delete_burst_events_per_s"] = round(N_CONFIGMAPS / (t_seen - t0), 1)
        out["deletecollection_s"] = round(t_deleted - t0, 3)
        out["queue_processed"] = live.processed
        live.stop()
    finally:
        with contextlib.suppress(ApiError):
            client.request("DELETE", NAMESPACES.path(None, ns))
    return out


def synthetic_pod(i: int) -> str:
    """One realistic pod as JSON: managedFields, a container with env, probes and mounts, status."""
    name = f"pi-worker-{i}"
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "bench", "uid": str(uuid.uuid4()), "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "worker",
                       "training.kubeflow.org/operator-name": "mpi-operator",
                       "batch.kubernetes.io/job-completion-index": str(i)},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi-worker",
                                 "uid": str(uuid.uuid4()), "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {f"f:l{j}": {} for j in range(6)}},
                              "f:spec": {"f:containers": {'k:{"name":"worker"}': {f"f:x{j}": {} for j in range(20)}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                 "time": "2026-01-01T00:00:05Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {f"f:s{j}": {} for j in range(12)}}},
            ],
        },
        "spec": {
            "hostname": name, "subdomain": "pi", "nodeName": "kwok-node-0", "restartPolicy": "OnFailure",
            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler", "enableServiceLinks": True, "priority": 0,
            "securityContext": {}, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "containers": [{
                "name": "worker", "image": "mpioperator/mpi-pi:openmpi", "imagePullPolicy": "IfNotPresent",
                "command": ["/usr/sbin/sshd", "-De"],
                "env": [{"name": f"ENV_{j}", "value": f"value-{j}"} for j in range(6)],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
                "volumeMounts": [{"name": "ssh-auth", "mountPath": "/root/.ssh"},
                                 {"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "readinessProbe": {"tcpSocket": {"port": 22}, "periodSeconds": 2, "timeoutSeconds": 1,
                                   "successThreshold": 1, "failureThreshold": 3},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            }],
            "volumes": [{"name": "ssh-auth", "secret": {"secretName": "pi-ssh", "defaultMode": 384,
                                                        "items": [{"key": "ssh-privatekey", "path": "id_rsa"}]}},
                        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace",
                                                        "fieldRef": {"apiVersion": "v1",
                                                                     "fieldPath": "metadata.namespace"}}]}}]}}],
        },
        "status": {
            "phase": "Running", "podIP": f"10.0.{i // 250}.{i % 250}", "hostIP": "10.0.0.1",
            "podIPs": [{"ip": f"10.0.{i // 250}.{i % 250}"}], "hostIPs": [{"ip": "10.0.0.1"}],
            "startTime": "2026-01-01T00:00:01Z", "qosClass": "Guaranteed",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2026-01-01T00:00:03Z"}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "containerStatuses": [{"name": "worker", "ready": True, "restartCount": 0, "started": True,
                                   "image": "mpioperator/mpi-pi:openmpi", "imageID": "sha256:" + "a" * 64,
                                   "containerID": "containerd://" + "b" * 64,
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}},
                                   "lastState": {}}],
        },
    }
    return json.dumps(pod)


def bytes_per_object(docs: list[str], transform, indexers: dict | None = None) -> int:
    """The store's memory per object (tracemalloc), each decoded from JSON as the reflector decodes it
    and `transform`ed (None: as it comes) before it is added."""
    store = Store(indexers)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for d in docs:
        obj = json.loads(d)
        store.add(transform(obj) if transform else obj)
        del obj
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del store
    return (after - before) // len(docs)


def bench_pod_memory(n: int = N_PODS) -> dict:
    docs = [synthetic_pod(i) for i in range(n)]
    out: dict = {"pods": n, "pod_json_bytes": sum(len(d) for d in docs) // n}
    for label, transform in (("raw", None), ("slim_pod", slim_pod)):
        out[f"bytes_per_pod_{label}"] = bytes_per_object(docs, transform)
    out["slim_ratio"] = round(out["bytes_per_pod_slim_pod"] / out["bytes_per_pod_raw"], 3)
    return out


def _container(name: str, command: list[str]) -> dict:
    return {"name": name, "image": "mpioperator/mpi-pi:openmpi", "imagePullPolicy": "IfNotPresent", "command": command,
            "env": [{"name": f"ENV_{j}", "value": f"value-{j}"} for j in range(6)],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
            "volumeMounts": [{"name": "ssh-auth", "mountPath": "/home/mpiuser/.ssh"}]}


def _pod_set(job: str, name: str, count: int, command: list[str]) -> dict:
    """A Workload's pod set: Kueue copies the replica's pod template into it."""
    return {
        "name": name, "count": count, "topologyRequest": {"podIndexLabel": "training.kubeflow.org/replica-index"},
        "template": {"metadata": {"labels": {"app": "pi"}}, "spec": {
            "containers": [_container(name, command)], "restartPolicy": "OnFailure",
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [{"name": "ssh-auth", "secret": {"secretName": f"{job}-ssh", "defaultMode": 384}}]}}}


def synthetic_workload(i: int) -> str:
    """A Kueue Workload of one MPIJob as Kueue 0.19 writes it (kueue.x-k8s.io/v1beta2): a pod set per
    replica type, each a copy of its pod template, managedFields, the conditions of a pending one with
    Kueue's quota message, and the resource requests."""
    job = f"pi-{i}"
    w = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {
            "name": f"mpijob-{job}-{i:05x}", "namespace": "bench", "uid": str(uuid.uuid4()),
            "resourceVersion": str(5000 + i), "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kueue.x-k8s.io/job-uid": str(uuid.uuid4())},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": job,
                                 "uid": str(uuid.uuid4()), "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [
                {"manager": "kueue", "operation": "Update", "apiVersion": "kueue.x-k8s.io/v1beta2",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {f"f:x{j}": {} for j in range(20)}}},
                {"manager": "kueue-admission", "operation": "Apply", "apiVersion": "kueue.x-k8s.io/v1beta2",
                 "subresource": "status", "time": "2026-01-01T00:00:01Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {f"f:s{j}": {} for j in range(8)}}},
            ],
        },
        "spec": {"active": True, "queueName": "team-a", "priority": 0, "podSets": [
            _pod_set(job, "launcher", 1, ["mpirun", "-n", "8", "/home/mpiuser/pi"]),
            _pod_set(job, "worker", 8, ["/usr/sbin/sshd", "-De"])]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                            "lastTransitionTime": "2026-01-01T00:00:01Z", "observedGeneration": 1,
                            "message": "couldn't assign flavors to pod set worker: insufficient unused quota for "
                                       "cpu in flavor default-flavor, 8 more needed"}],
            "resourceRequests": [{"name": "launcher", "resources": {"cpu": "1", "memory": "1Gi"}},
                                 {"name": "worker", "resources": {"cpu": "8", "memory": "8Gi"}}],
        },
    }
    return json.dumps(w)


def bench_workload_memory(n: int = N_WORKLOADS) -> dict:
    """Bytes per cached Kueue Workload (one per MPIJob), raw and slimmed, in a store indexed by MPIJob as
    controller/informer_wiring.py keeps them."""
    from controller.informer_wiring import POD_INDEX, _mpijob_owner

    docs = [synthetic_workload(i) for i in range(n)]
    out: dict = {"workloads": n, "workload_json_bytes": sum(len(d) for d in docs) // n}
    for label, transform in (("raw", None), ("slim", slim_kueue_workload)):
        out[f"bytes_per_workload_{label}"] = bytes_per_object(docs, transform, {POD_INDEX: _mpijob_owner})
    out["slim_total_mib"] = round(out["bytes_per_workload_slim"] * n / 2**20, 2)
    out["slim_ratio"] = round(out["bytes_per_workload_slim"] / out["bytes_per_workload_raw"], 3)
    return out


def run() -> dict:
    path = _kubeconfig()
    return {"informer_events": bench_events(path), "pod_memory": bench_pod_memory(),
            "workload_memory": bench_workload_memory()}


def _print_workloads(wl: dict) -> None:
    print(f"{'store memory per Kueue Workload (' + str(wl['workloads']) + ' MPIJobs)':<48}{'bytes':>14}")
    for k in ("workload_json_bytes", "bytes_per_workload_raw", "bytes_per_workload_slim", "slim_ratio",
              "slim_total_mib"):
        print(f"  {k:<46}{wl[k]:>14}")


def main() -> None:
    if sys.argv[1:] == ["workloads"]:
        wl = bench_workload_memory()
        _print_workloads(wl)
        print(json.dumps({"workload_memory": wl}, indent=2))
        return
    res = run()
    ev, mem = res["informer_events"], res["pod_memory"]
    print(f"{'informer pipeline (' + str(ev['configmaps']) + ' ConfigMaps)':<48}{'value':>14}")
    for k in ("create_per_s", "live_events_per_s", "live_lag_after_last_create_s", "initial_list_events_per_s",
              "delete_burst_events_per_s", "deletecollection_s"):
        print(f"  {k:<46}{ev[k]:>14}")
    print(f"{'store memory per cached pod (' + str(mem['pods']) + ' pods)':<48}{'bytes':>14}")
    for k in ("pod_json_bytes", "bytes_per_pod_raw", "bytes_per_pod_slim_pod", "slim_ratio"):
        print(f"  {k:<46}{mem[k]:>14}")
    _print_workloads(res["workload_memory"])
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
