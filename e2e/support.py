"""Helpers for the end-to-end tests: MPIJob manifests for simulated (kwok) pods, the operator
process, and waiting on conditions through kubectl."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.waiting import wait_until  # noqa: E402

CRD = ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"
JOB_NAME = "training.kubeflow.org/job-name"
ROLE = "training.kubeflow.org/job-role"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
RUN_FOR = "sim.mpijob-operator.dev/run-for"
EXIT_CODE = "sim.mpijob-operator.dev/exit-code"
FAIL_AFTER = "sim.mpijob-operator.dev/fail-after"


def install_crd(kubectl: Callable) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/mpijobs.kubeflow.org", "--timeout=60s")


def service_account_kubeconfig(out: Path) -> str:
    """The CRD and manifests/rbac applied, and a kubeconfig with the mpi-operator ServiceAccount's token."""
    r = subprocess.run([str(ROOT / "hack" / "operator-kubeconfig.sh"), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return str(out)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAMESPACE")}
    return {**env, "PYTHONUNBUFFERED": "1", "POD_NAME": f"op-{uuid.uuid4().hex[:6]}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Operator:
    """`python -m controller` as a separate process, with leader election on a per-test Lease."""

    def __init__(self, kubeconfig: str, backend: str, namespace: str, log_path: Path, extra: tuple = (),
                 lease: str | None = None) -> None:
        self.port = _free_port()
        self.log_path = log_path
        self.args = [
            sys.executable, "-m", "controller", f"--kubeconfig={kubeconfig}", f"--worker-backend={backend}",
            f"--namespace={namespace}", "--log-format=console", "--log-level=debug",
            f"--metrics-bind-address=127.0.0.1:{self.port}",
            f"--health-probe-bind-address=127.0.0.1:{self.port}",
            "--leader-elect", "--leader-election-namespace=mpi-operator",
            f"--leader-election-id={lease or 'e2e-' + namespace}",
            *extra,
        ]
        self._log = open(log_path, "a")  # noqa: SIM115
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env=_env())

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"operator exited {self.proc.returncode}:\n{self.tail()}"
            return self.get("/readyz")[0] == 200

        wait_until(ready, timeout, what="operator /readyz")

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
            if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
                total += float(m.group(2))
        return total

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def tail(self, n: int = 40) -> str:
        if not self._log.closed:
            self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def mpijob(name: str, *, workers: int = 2, launcher_runs: str | None = "3s", launcher_exit: int = 0,
           policy: str = "WaitForWorkersReady", run_policy: dict | None = None, slots: int = 1) -> dict:
    """An MPIJob for simulated pods: the launcher 'runs' `launcher_runs` then exits `launcher_exit`
    (None: it runs until deleted); workers run until stopped."""
    launcher_ann = {}
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


def get(kubectl: Callable, ns: str, kind: str, name: str) -> dict | None:
    r = kubectl("-n", ns, "get", kind, name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def items(kubectl: Callable, ns: str, kind: str, selector: str = "") -> list[dict]:
    args = ["-n", ns, "get", kind, "-o", "json"] + (["-l", selector] if selector else [])
    return json.loads(kubectl(*args).stdout)["items"]


def conditions(kubectl: Callable, ns: str, name: str) -> dict[str, dict]:
    job = get(kubectl, ns, "mpijob", name) or {}
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
