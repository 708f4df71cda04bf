"""Kueue as a process next to the local cluster, for e2e/test_kueue.py: built by hack/build-kueue.sh
(cached like the control plane), its CRDs applied from the Go module cache, run out of the
cluster with the admin kubeconfig and a Configuration that enables only the MPIJob framework.

Kueue's webhooks are not installed (they would need a Service reaching this machine), so the
tests do what its MPIJob webhook does: create MPIJobs suspended, with the queue-name label (and,
for topology-aware scheduling with runLauncherAsWorker, the workers' pod-index offset).

The Configuration is Kueue's default where the tests allow: WaitForPodsReady is on by default
since v0.19 (30-minute timeout, the recovery timeout the same), and every admitted MPIJob here
must get its `Running` condition (Kueue's PodsReady) far inside it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from testsupport.kubectl import get, items
from testsupport.net import free_port
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
API = "kueue.x-k8s.io/v1beta2"
# Hard-coded in Kueue's main.go: with internal cert management off it will not start without a
# certificate here, even though nothing here scrapes its metrics over TLS.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Kueue's defaults (v0.19): WaitForPodsReady on, admission -> PodsReady within 30 minutes, and a
# job whose PodsReady turns False again must recover within the same time, or it is evicted.
PODS_READY_TIMEOUT_S = 1800
RECOVERY_TIMEOUT_S = PODS_READY_TIMEOUT_S
# The controller name of MultiKueue: an MPIJob with runPolicy.managedBy set to it is dispatched to
# a worker cluster, and the MPI operator of the manager cluster must leave it alone.
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
# Topology-aware scheduling (TAS): annotations on a replica's pod template, read by Kueue.
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
POD_INDEX_OFFSET = "kueue.x-k8s.io/pod-index-offset"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
HOSTNAME = "kubernetes.io/hostname"


def build() -> tuple[Path, Path]:
    """(kueue binary, CRD directory): built on the first call on a machine, cached after."""
    r = subprocess.run([str(ROOT / "hack" / "build-kueue.sh")], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"hack/build-kueue.sh failed:\n{r.stderr[-3000:]}"
    binary, crds = r.stdout.strip().splitlines()[-2:]
    return Path(binary), Path(crds)



def self_signed_cert(directory: Path) -> None:
    """tls.crt/tls.key for 127.0.0.1 (Kueue's webhook and metrics servers refuse to start without)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "tls.crt").exists() and (directory / "tls.key").exists():
        return
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "3650", "-subj", "/CN=kueue-e2e", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
                   check=True, capture_output=True, timeout=60)


def configuration(namespace: str, certs: Path, ports: dict[str, int]) -> dict:
    """What this machine needs (listeners on free local ports, no leader election, certificates of
    our own, only MPIJobs); everything else, waitForPodsReady included, is Kueue's default."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": namespace,
        # Only MPIJobs with the queue-name label: other engineers' MPIJobs on the shared cluster
        # are never suspended or given Workloads.
        "manageJobsWithoutQueueName": False,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        # MultiKueue labels what it creates in worker clusters with its origin and garbage-collects
        # by it: one of this run's own, so that no other manager's objects are ever touched.
        "multiKueue": {"origin": namespace},
        "integrations": {"frameworks": ["kubeflow.org/mpijob"]},
        # On, its visibility server binds 0.0.0.0:8082, shared by every engineer on this machine.
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 50, "burst": 100},
    }


class KueueProcess:
    def __init__(self, binary: Path, kubeconfig: str, workdir: Path, namespace: str) -> None:
        self.log_path = workdir / "kueue.log"
        self.ports = {"health": free_port(), "metrics": free_port(), "webhook": free_port()}
        certs = workdir / "webhook-certs"
        self_signed_cert(certs)
        try:
            self_signed_cert(METRICS_CERT_DIR)
        except PermissionError as e:
            raise AssertionError(f"Kueue needs a certificate in {METRICS_CERT_DIR} (hard-coded) and this user "
                                 f"cannot write it: run as root, or create tls.crt/tls.key there once") from e
        config = workdir / "kueue-config.json"
        config.write_text(json.dumps(configuration(namespace, certs, self.ports), indent=1))
        self.started = time.monotonic()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}",
                                          "--zap-log-level=2"], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"kueue exited with {self.proc.returncode}:\n{self.tail(40)}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['health']}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 120) -> float:
        wait_until(self.ready, timeout, interval=0.5, what="kueue /readyz")
        return time.monotonic() - self.started

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)

    def tail(self, n: int = 60) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines() if self.log_path.exists() else []
        return "\n".join(lines[-n:])


# -- objects ----------------------------------------------------------------------------------------


def resource_flavor(name: str, node_labels: dict[str, str], taint_key: str | None,
                    topology: str | None = None) -> dict:
    """Kueue injects nodeLabels as the pods' nodeSelector and tolerations as their tolerations;
    with a topology, the flavor is topology-aware (Kueue places each pod on a node itself)."""
    spec: dict = {"nodeLabels": node_labels}
    if taint_key:
        spec["tolerations"] = [{"key": taint_key, "operator": "Exists", "effect": "NoSchedule"}]
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def topology(name: str, levels: list[str]) -> dict:
    """Node label keys from the highest level to the lowest (kubernetes.io/hostname last)."""
    return {"apiVersion": API, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def cluster_queue(name: str, namespace: str, flavors: dict[str, str], preempt: bool = False,
                  admission_checks: tuple[str, ...] = ()) -> dict:
    """flavors: flavor name -> cpu quota, tried in this order. Only `namespace` may use it."""
    spec: dict = {
        # Without the webhook nobody defaults it, and a nil selector admits no namespace at all.
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": f, "resources": [{"name": "cpu", "nominalQuota": q}]} for f, q in flavors.items()]}],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Never"}
    if admission_checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": a} for a in admission_checks]}
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def multikueue_objects(name: str, kubeconfig_secret: str) -> list[dict]:
    """The manager side of MultiKueue for one worker cluster, whose kubeconfig is in the Secret
    `kubeconfig_secret` (key `kubeconfig`) of Kueue's namespace: MultiKueueCluster,
    MultiKueueConfig, and the AdmissionCheck a ClusterQueue names to dispatch its workloads."""
    return [
        {"apiVersion": API, "kind": "MultiKueueCluster", "metadata": {"name": name},
         "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": kubeconfig_secret}}}},
        {"apiVersion": API, "kind": "MultiKueueConfig", "metadata": {"name": name}, "spec": {"clusters": [name]}},
        {"apiVersion": API, "kind": "AdmissionCheck", "metadata": {"name": name},
         "spec": {"controllerName": MULTIKUEUE,
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": name}}},
    ]


def local_queue(name: str, cluster_queue_name: str) -> dict:
    return {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": cluster_queue_name}}


def workload_priority_class(name: str, value: int) -> dict:
    return {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def queued(job: dict, queue: str, priority_class: str | None = None) -> dict:
    """What Kueue's MPIJob webhook would make of `job`: suspended, in `queue`; with
    runLauncherAsWorker and no pod-set group, the workers' ranks offset by one (the launcher is
    rank 0) in the annotation Kueue's topology-aware placement reads."""
    job["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    if priority_class:
        job["metadata"]["labels"][PRIORITY_LABEL] = priority_class
    job["spec"]["runPolicy"]["suspend"] = True
    specs = job["spec"]["mpiReplicaSpecs"]
    launcher_meta = specs["Launcher"]["template"].get("metadata") or {}
    if job["spec"].get("runLauncherAsWorker") and PODSET_GROUP not in (launcher_meta.get("annotations") or {}):
        specs["Worker"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[POD_INDEX_OFFSET] = "1"
    return job


# -- Kueue's view -----------------------------------------------------------------------------------


def workload(kubectl, ns: str, mpijob_name: str) -> dict | None:
    """The Workload Kueue made for the MPIJob (owned by it)."""
    for w in items(kubectl, ns, "workloads.kueue.x-k8s.io"):
        if any(o.get("kind") == "MPIJob" and o.get("name") == mpijob_name
               for o in w["metadata"].get("ownerReferences", [])):
            return w
    return None


def wl_condition(w: dict | None, ctype: str) -> dict:
    return next((c for c in ((w or {}).get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def wait_workload(kubectl, ns: str, name: str, ctype: str, status: str = "True", timeout: float = 60) -> dict:
    def check() -> dict | None:
        w = workload(kubectl, ns, name)
        return w if wl_condition(w, ctype).get("status") == status else None

    return wait_until(check, timeout, interval=0.5, what=f"Workload of {ns}/{name}: {ctype}={status}")


def admitted_flavors(w: dict) -> set[str]:
    assignments = ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments", [])
    return {f for a in assignments for f in (a.get("flavors") or {}).values()}


def _epoch(rfc3339: str) -> float:
    return datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def admitted_to_pods_ready(w: dict) -> float:
    """Seconds from the Workload's last admission to its PodsReady, by the times Kueue recorded
    (1 s resolution): what WaitForPodsReady's timeout is measured against."""
    admitted, ready = wl_condition(w, "Admitted"), wl_condition(w, "PodsReady")
    assert admitted.get("status") == "True" and ready.get("status") == "True", w.get("status")
    return _epoch(ready["lastTransitionTime"]) - _epoch(admitted["lastTransitionTime"])


def topology_ranks(assignment: dict) -> list[dict[str, str]]:
    """A PodSet's topologyAssignment (v1beta2, compressed in slices) as one entry per rank: rank
    i is placed in the i-th domain's labels, each domain repeated by its pod count, in order."""
    levels, ranks = assignment["levels"], []
    for piece in assignment["slices"]:
        for i in range(piece["domainCount"]):
            labels = {level: _value_at(values, i) for level, values in zip(levels, piece["valuesPerLevel"],
                                                                          strict=True)}
            counts = piece["podCounts"]
            count = counts["universal"] if "universal" in counts else counts["individual"][i]
            ranks.extend([labels] * count)
    return ranks


def _value_at(values: dict, i: int) -> str:
    if "universal" in values:
        return values["universal"]
    ind = values["individual"]
    return (ind.get("prefix") or "") + ind["roots"][i] + (ind.get("suffix") or "")


def podset_assignment(w: dict, podset: str) -> dict:
    return next(a for a in w["status"]["admission"]["podSetAssignments"] if a["name"] == podset)


def set_active(kubectl, ns: str, workload_name: str, active: bool) -> None:
    kubectl("-n", ns, "patch", "workloads.kueue.x-k8s.io", workload_name, "--type=merge",
            "-p", json.dumps({"spec": {"active": active}}))


def mpijob_suspended(kubectl, ns: str, name: str) -> bool:
    return bool(((get(kubectl, ns, "mpijob", name) or {}).get("spec") or {}).get("runPolicy", {}).get("suspend"))
