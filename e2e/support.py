"""Helpers for the end-to-end tests: MPIJob manifests for simulated (kwok) pods, the operator
process, and waiting on conditions through kubectl."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))
from operator_process import OperatorProcess  # noqa: E402

from tests.waiting import wait_until  # noqa: E402

CRD = ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"
# Fully qualified: on a shared cluster another CRD may also answer to the short name "mpijob".
MPIJOBS = "mpijobs.kubeflow.org"
JOB_NAME = "training.kubeflow.org/job-name"
ROLE = "training.kubeflow.org/job-role"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
RUN_FOR = "sim.mpijob-operator.dev/run-for"
EXIT_CODE = "sim.mpijob-operator.dev/exit-code"
FAIL_AFTER = "sim.mpijob-operator.dev/fail-after"
EXIT_ON_DELETE = "sim.mpijob-operator.dev/exit-code-on-delete"


def install_crd(kubectl: Callable) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    # Right after the CRD is first created it has no conditions yet, and kubectl wait then fails at once.
    wait_until(lambda: kubectl("wait", "--for=condition=Established", "crd/mpijobs.kubeflow.org", "--timeout=30s",
                               check=False).returncode == 0, timeout=90, what="the MPIJob CRD Established")


def service_account_kubeconfig(out: Path) -> str:
    """The CRD and manifests/rbac applied, and a kubeconfig with the mpi-operator ServiceAccount's token."""
    r = subprocess.run([str(ROOT / "hack" / "operator-kubeconfig.sh"), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return str(out)


class Operator(OperatorProcess):
    """The operator for one test namespace: readable debug logs, leader election on a Lease of its
    own (or `lease`, to make replicas compete)."""

    def __init__(self, kubeconfig: str, backend: str, namespace: str, log_path: Path, extra: tuple = (),
                 lease: str | None = None) -> None:
        super().__init__(kubeconfig, backend, namespace, log_path, (
            "--log-format=console", "--log-level=debug", "--leader-elect",
            "--leader-election-namespace=mpi-operator", f"--leader-election-id={lease or 'e2e-' + namespace}",
            *extra))


def mpijob(name: str, *, workers: int = 2, launcher_runs: str | None = "3s", launcher_exit: int = 0,
           policy: str = "WaitForWorkersReady", run_policy: dict | None = None, slots: int = 1) -> dict:
    """An MPIJob for simulated pods: the launcher 'runs' `launcher_runs` then exits `launcher_exit`
    (None: it runs until deleted); workers run until stopped."""
    # mpirun stopped by SIGTERM exits 1 (seen on the real node: the image's mpirun in a deleted pod);
    # a worker with no annotation plays sshd, which exits 0 when its pod is deleted.
    launcher_ann = {EXIT_ON_DELETE: "1"}
    if launcher_runs is not None:
        launcher_ann = {RUN_FOR: launcher_runs, EXIT_CODE: str(launcher_exit)}
    container = {"name": "c", "image": "mpioperator/mpi-pi:openmpi", "resources": {"requests": {"cpu": "10m"}}}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": slots,
            "launcherCreationPolicy": policy,
            "runPolicy": {"cleanPodPolicy": "Running", **(run_policy or {})},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "metadata": {"annotations": launcher_ann},
                        "spec": {"containers": [{**copy.deepcopy(container), "command": ["mpirun", "/pi"]}]},
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [{**copy.deepcopy(container),
                                                          "command": ["/usr/sbin/sshd", "-De"]}]}},
                },
            },
        },
    }


def apply(kubectl: Callable, ns: str, obj: dict) -> None:
    kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(obj))


# Fully qualified: on a shared cluster another CRD may also be called mpijobs (another group), and
# kubectl would then resolve the short name to it.
QUALIFIED = {"mpijob": "mpijobs.v2beta1.kubeflow.org", "mpijobs": "mpijobs.v2beta1.kubeflow.org"}


def get(kubectl: Callable, ns: str, kind: str, name: str) -> dict | None:
    r = kubectl("-n", ns, "get", QUALIFIED.get(kind, kind), name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def items(kubectl: Callable, ns: str, kind: str, selector: str = "") -> list[dict]:
    args = ["-n", ns, "get", QUALIFIED.get(kind, kind), "-o", "json"] + (["-l", selector] if selector else [])
    return json.loads(kubectl(*args).stdout)["items"]


def conditions(kubectl: Callable, ns: str, name: str) -> dict[str, dict]:
    job = get(kubectl, ns, MPIJOBS, name) or {}
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}


def wait_condition(kubectl: Callable, ns: str, name: str, ctype: str, timeout: float = 90,
                   status: str = "True") -> dict:
    found: dict = {}

    def check() -> bool:
        found.update(conditions(kubectl, ns, name))
        return found.get(ctype, {}).get("status") == status

    wait_until(check, timeout, interval=0.3, what=f"MPIJob {ns}/{name} condition {ctype}={status}")
    return found[ctype]


def pods(kubectl: Callable, ns: str, name: str, role: str) -> list[dict]:
    return items(kubectl, ns, "pods", f"{JOB_NAME}={name},{ROLE}={role}")


def live(pods_: list[dict]) -> list[dict]:
    return [p for p in pods_ if p["status"].get("phase") in ("Pending", "Running")
            and not p["metadata"].get("deletionTimestamp")]


def events(kubectl: Callable, ns: str, name: str) -> list[dict]:
    return [e for e in items(kubectl, ns, "events")
            if e["involvedObject"].get("kind") == "MPIJob" and e["involvedObject"].get("name") == name]


def now() -> float:
    return time.monotonic()
