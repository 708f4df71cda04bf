"""A drop-in for the Kubeflow MPI Operator (docs/architecture.md section 6): its command line, and
MPIJobs it started taken over.

The operator is started with the arguments of upstream's install manifest (`-alsologtostderr
--lock-namespace=mpi-operator`) and of its overlays (Go-style flags, camelCase `--kubeConfig`,
`--monitoring-port`, the queue and client limits, klog's `-v`, `$KUBEFLOW_NAMESPACE`), and must run an
MPIJob to Succeeded, serve /metrics on the monitoring port and hold its Lease in the lock namespace.
Two flags of ours are added for the shared cluster only: a Lease name and a health port of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from reconcilers.names import JOB_NAME_LABEL, JOB_ROLE_LABEL, OPERATOR_NAME_LABEL
from testsupport.builders import EXIT_CODE, RUN_FOR, simulated_mpijob
from testsupport.kubectl import apply, conditions, get, items, live, wait_condition
from testsupport.net import free_port
from testsupport.operator_process import OperatorProcess
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

UPSTREAM_BASE = ["-alsologtostderr", "--lock-namespace=mpi-operator"]


class UpstreamArgsOperator(OperatorProcess):
    """`python -m controller` with exactly the given arguments (no flags of ours added)."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path, metrics_port: int,
                 health_port: int) -> None:
        self.metrics_port, self.health_port, self.log_path = metrics_port, health_port, log_path
        self.args = [sys.executable, "-m", "controller", *args]
        self._log = open(log_path, "a")  # noqa: SIM115
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)



def test_operator_runs_with_upstreams_manifest_arguments(kubectl, crd, operator_kubeconfig, namespace, tmp_path):
    metrics_port, health_port = free_port(), free_port()
    lease = f"upstream-{uuid.uuid4().hex[:6]}"
    args = [
        *UPSTREAM_BASE,
        f"--kubeConfig={operator_kubeconfig}", f"--monitoring-port={metrics_port}",
        "--controller-queue-rate-limit=10", "--controller-queue-burst=100", "--threadiness=2",
        "--kube-api-qps=5", "--kube-api-burst=10", "--cluster-domain=cluster.local", "-v=4",
        # ours, for the shared cluster: a Lease and a health port nobody else uses
        f"--leader-election-id={lease}", f"--health-probe-bind-address=127.0.0.1:{health_port}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAMESPACE")}
    env.update(PYTHONUNBUFFERED="1", POD_NAME=lease, KUBEFLOW_NAMESPACE=namespace)  # upstream's namespace env
    op = UpstreamArgsOperator(args, env, tmp_path / "op.log", metrics_port, health_port)
    try:
        op.wait_ready()
        apply(kubectl, namespace, simulated_mpijob("pi", workers=1))
        wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=120)
        held = json.loads(kubectl("-n", "mpi-operator", "get", "lease", lease, "-o", "json").stdout)
        assert held["spec"]["holderIdentity"] == lease
        wait_until(lambda: op.metric("mpi_operator_jobs_successful_total") >= 1, timeout=30,
                   what="/metrics on the monitoring port")
        log = op.tail(400)
        assert "upstream logging flags accepted and ignored" in log and "--alsologtostderr" in log
        assert "level=debug" in log or '"level": "debug"' in log or "[debug" in log, "-v=4 means debug logs"
    finally:
        op.stop()
        kubectl("-n", "mpi-operator", "delete", "lease", lease, "--ignore-not-found", check=False)


def test_version_flag_prints_and_exits(tmp_path):
    for flag in ("--version", "-version"):
        r = subprocess.run([sys.executable, "-m", "controller", flag], capture_output=True, text=True, cwd=ROOT,
                           timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("mpijob-operator "), (r.stdout, r.stderr)


# -- MPIJobs the upstream operator started (docs/architecture.md section 6.3) -----------------------


def _owner(job: dict) -> list[dict]:
    return [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": job["metadata"]["name"],
             "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]


def upstream_children(job: dict, ns: str, workers: int) -> list[dict]:
    """What the upstream operator's controller creates for a running MPIJob `name`: ConfigMap, Secret,
    Service and launcher Job labelled `app: <name>` only, and bare worker pods."""
    name = job["metadata"]["name"]
    meta = lambda n: {"name": n, "namespace": ns, "labels": {"app": name}, "ownerReferences": _owner(job)}  # noqa: E731
    pod_labels = lambda role: {OPERATOR_NAME_LABEL: "mpi-operator", JOB_NAME_LABEL: name, JOB_ROLE_LABEL: role}  # noqa: E731
    hosts = "".join(f"{name}-worker-{i}.{name}.{ns}.svc slots=1\n" for i in range(workers))
    container = {"name": "c", "image": "mpioperator/mpi-pi:openmpi", "resources": {"requests": {"cpu": "10m"}}}
    out = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-config"),
         "data": {"hostfile": hosts, "discover_hosts.sh": "#!/bin/sh\n"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta(f"{name}-ssh"), "type": "kubernetes.io/ssh-auth",
         "data": {"ssh-privatekey": "a2V5", "ssh-publickey": "cHVi"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(name),
         "spec": {"clusterIP": "None", "selector": {OPERATOR_NAME_LABEL: "mpi-operator", JOB_NAME_LABEL: name}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(f"{name}-launcher"),
         "spec": {"backoffLimit": 6, "template": {
             "metadata": {"labels": pod_labels("launcher"), "annotations": {RUN_FOR: "8s", EXIT_CODE: "0"}},
             "spec": {"restartPolicy": "Never", "hostname": f"{name}-launcher", "subdomain": name,
                      "containers": [{**container, "command": ["mpirun", "/pi"]}]}}}},
    ]
    for i in range(workers):
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-worker-{i}", "namespace": ns, "ownerReferences": _owner(job),
                                 "labels": {**pod_labels("worker"), "training.kubeflow.org/replica-index": str(i)}},
                    "spec": {"hostname": f"{name}-worker-{i}", "subdomain": name, "restartPolicy": "Never",
                             "containers": [{**container, "command": ["/usr/sbin/sshd", "-De"]}]}})
    return out


def test_mpijob_started_by_upstream_runs_to_its_end(kubectl, start_operator, namespace, backend):
    job = simulated_mpijob("up", workers=2, policy="AtStartup")
    apply(kubectl, namespace, job)
    job = get(kubectl, namespace, "mpijob", "up")
    for obj in upstream_children(job, namespace, 2):
        kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(obj))
    up_workers = f"{JOB_NAME_LABEL}=up,{JOB_ROLE_LABEL}=worker"
    wait_until(lambda: len(live(items(kubectl, namespace, "pods", up_workers))) == 2,
               timeout=60, what="upstream's worker pods")

    start_operator(backend, namespace)
    wait_condition(kubectl, namespace, "up", "Succeeded", timeout=120)
    jobs = {j["metadata"]["name"] for j in items(kubectl, namespace, "jobs")}
    assert jobs == {"up-launcher"}, f"a second launcher or a worker Job was created: {jobs}"
    assert not items(kubectl, namespace, "statefulsets")
    launchers = items(kubectl, namespace, "pods", f"{JOB_NAME_LABEL}=up,{JOB_ROLE_LABEL}=launcher")
    assert len(launchers) == 1, "one launcher pod: upstream's"
    # upstream's children are adopted (our labels added), and the bare workers stopped at the end
    for kind, name in (("configmap", "up-config"), ("secret", "up-ssh"), ("service", "up"), ("job", "up-launcher")):
        labels = get(kubectl, namespace, kind, name)["metadata"]["labels"]
        assert labels.get(OPERATOR_NAME_LABEL) == "mpi-operator" and labels.get("app") == "up", (kind, labels)
    wait_until(lambda: not live(items(kubectl, namespace, "pods", up_workers)), timeout=60,
               what="the bare workers stopped (cleanPodPolicy Running)")
    conds = conditions(kubectl, namespace, "up")
    assert conds["Created"]["status"] == "True" and conds["Succeeded"]["status"] == "True"
    # and clean-up as usual: deleting the MPIJob deletes what upstream made
    kubectl("-n", namespace, "delete", "mpijob", "up", "--wait=true", "--timeout=60s", timeout=90)
    wait_until(lambda: get(kubectl, namespace, "job", "up-launcher") is None
               and get(kubectl, namespace, "configmap", "up-config") is None, timeout=60, what="garbage collection")
