"""The Kubeflow MPI Operator (Go) v0.8.2 as a process beside this one, for `make bench`'s side-by-side
runs (bench/side_by_side.py; docs/architecture.md section 7.1):

- built from its Go module by hack/build-mpi-operator-go.sh (cached; nothing of its source is kept);
- authorized by upstream's ClusterRole, read from the downloaded module at run time, renamed (the
  local cluster already has this operator's ClusterRole `mpi-operator`) and bound to this operator's
  ServiceAccount only while a Go run lasts: both operators then have the same identity, and the API
  server's audit log (bench/apiserver_meter.py, which records that ServiceAccount alone) meters both;
- scoped to the run's namespace, its leader election Lease (always on in v0.8.2) in a namespace of
  its own so that neither the Lease nor the leader Event counts as one of the run's writes;
- the same flags as this operator (threadiness, QPS, burst), and its work-queue limit (a token bucket
  of 10/s, burst 100 by default: `--controller-queue-rate-limit`, `--controller-queue-burst`) raised
  far above what the cluster does, so that it is not the bottleneck.

    binary, module = build()
    with bound_role(client, module):
        op = GoOperatorProcess(binary, sa_kubeconfig, "ns", "ns-lock", Path("go.log"))
        op.wait_ready(); ...; op.stop()
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from client.errors import ApiError
from client.rest import RestClient
from testsupport.operator_process import LoggedProcess, Sample
from testsupport.paths import ROOT

VERSION = "0.8.2"
# The health port is fixed in v0.8.2's cmd/mpi-operator/app/server.go (no flag): one Go operator at a time.
HEALTH_PORT = 8080
ROLE_NAME = "mpijob-operator-bench-upstream-mpi-operator"
SERVICE_ACCOUNT = ("mpi-operator", "mpi-operator")  # namespace, name: this operator's (manifests/rbac)
# Its work queue's token bucket, raised so that it never waits: the benchmark measures the operator,
# not a default meant to protect a shared API server.
QUEUE_FLAGS = ("--controller-queue-rate-limit=100000", "--controller-queue-burst=100000")
READY_LINE = "Started workers"  # logged once its informers synced and its workers run


def build() -> tuple[str, Path]:
    """(the mpi-operator binary, the module's directory): hack/build-mpi-operator-go.sh, cached."""
    r = subprocess.run([str(ROOT / "hack" / "build-mpi-operator-go.sh")], capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"hack/build-mpi-operator-go.sh failed ({r.returncode}):\n{r.stderr[-3000:]}")
    binary, module = r.stdout.split()[-2:]
    return binary, Path(module)


def cluster_role(manifest: str, name: str = ROLE_NAME) -> dict:
    """Upstream's operator ClusterRole (the document named mpi-operator of its manifests/base/cluster-role.yaml,
    which also holds the aggregated user roles), renamed to `name`, its rules unchanged."""
    for doc in yaml.safe_load_all(manifest):
        if doc and doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == "mpi-operator":
            return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "mpijob-operator-bench"}},
                    "rules": doc["rules"]}
    raise ValueError("no ClusterRole mpi-operator in the manifest")


def binding(name: str = ROLE_NAME, sa: tuple[str, str] = SERVICE_ACCOUNT) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "mpijob-operator-bench"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "namespace": sa[0], "name": sa[1]}]}


def flags(kubeconfig: str, namespace: str, lock_namespace: str, common: Iterable[str]) -> list[str]:
    """The Go operator's command-line arguments: `common` are the flags both operators get
    (--threadiness, --kube-api-qps, --kube-api-burst); others of this operator's are dropped."""
    shared = [f for f in common if f.split("=")[0] in ("--threadiness", "--kube-api-qps", "--kube-api-burst")]
    return [f"--kubeConfig={kubeconfig}", f"--namespace={namespace}", f"--lock-namespace={lock_namespace}",
            *shared, *QUEUE_FLAGS]


_RBAC = "/apis/rbac.authorization.k8s.io/v1"


@contextlib.contextmanager
def bound_role(client: RestClient, module: Path) -> Iterator[None]:
    """Upstream's ClusterRole bound to the ServiceAccount while the block runs, removed after: the
    ServiceAccount keeps this operator's least privilege for everyone else's tests."""
    role = cluster_role((module / "manifests" / "base" / "cluster-role.yaml").read_text())
    for path, body in ((f"{_RBAC}/clusterroles", role), (f"{_RBAC}/clusterrolebindings", binding())):
        try:
            client.request("POST", path, body=body)
        except ApiError as e:
            if e.status != 409:
                raise
            client.request("PUT", f"{path}/{body['metadata']['name']}", body=body)
    try:
        yield
    finally:
        for path in (f"{_RBAC}/clusterrolebindings", f"{_RBAC}/clusterroles"):
            with contextlib.suppress(ApiError):
                client.request("DELETE", f"{path}/{ROLE_NAME}")


class GoOperatorProcess(LoggedProcess):
    """The Go operator for one namespace, its klog output in a log file; what bench_operator.run_one
    asks of an operator process (OperatorProcess's shape; it has no /metrics of ours)."""

    what = "the Go operator"

    def __init__(self, binary: str, kubeconfig: str, namespace: str, lock_namespace: str, log_path: Path,
                 common_flags: Iterable[str]) -> None:
        # KUBECONFIG would override --kubeConfig (server.go): only the ServiceAccount's counts
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self._start([binary, *flags(kubeconfig, namespace, lock_namespace, common_flags)], log_path, env=env)

    def wait_ready(self, timeout: float = 90) -> float:
        """Seconds until it logged that its workers started (leader, caches synced)."""
        t0 = time.monotonic()
        while READY_LINE not in self.log_path.read_text(errors="replace"):
            self.check_alive()
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the Go operator not ready after {timeout}s; log {self.log_path}:\n{self.tail()}")
            time.sleep(0.1)
        return time.monotonic() - t0

    def metrics(self) -> list[Sample]:
        return []  # its own counts are not this operator's metrics; the audit log meters both

