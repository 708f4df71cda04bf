"""A drop-in for the Kubeflow MPI Operator: its command line (docs/architecture.md, "Compatibility").

The operator is started with the arguments of upstream's install manifest (`-alsologtostderr
--lock-namespace=mpi-operator`) and of its overlays (Go-style flags, camelCase `--kubeConfig`,
`--monitoring-port`, the queue and client limits, klog's `-v`, `$KUBEFLOW_NAMESPACE`), and must run an
MPIJob to Succeeded, serve /metrics on the monitoring port and hold its Lease in the lock namespace.
Two flags of ours are added for the shared cluster only: a Lease name and a health port of its own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from support import ROOT, OperatorProcess, apply, mpijob, wait_condition

from tests.waiting import wait_until

UPSTREAM_BASE = ["-alsologtostderr", "--lock-namespace=mpi-operator"]


class UpstreamArgsOperator(OperatorProcess):
    """`python -m controller` with exactly the given arguments (no flags of ours added)."""

    def __init__(self, args: list[str], env: dict[str, str], log_path: Path, metrics_port: int,
                 health_port: int) -> None:
        self.metrics_port, self.health_port, self.log_path = metrics_port, health_port, log_path
        self.args = [sys.executable, "-m", "controller", *args]
        self._log = open(log_path, "a")  # noqa: SIM115
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_operator_runs_with_upstreams_manifest_arguments(kubectl, crd, operator_kubeconfig, namespace, tmp_path):
    metrics_port, health_port = _free_port(), _free_port()
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
        apply(kubectl, namespace, mpijob("pi", workers=1))
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
