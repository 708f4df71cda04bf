"""The real node of the local cluster (hack/realnode/): containerd + runc + CNI bridge + kubelet +
CoreDNS, and the locally built images. These tests need no operator: plain pods prove that pods
on the bridge find each other by the operator's DNS names and that `mpirun` runs across them.
Skipped, with the reason, where the machine cannot run a real node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.conftest import CLUSTER_DIR, kubeconfig, kubectl  # noqa: E402, F401  (shared session fixtures)

NODE = "realnode"
LABEL = "mpijob-operator.dev/real-node"

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]


@pytest.fixture(scope="session")
def realnode(kubectl) -> str:  # noqa: F811
    """The real node's name, once it is Ready; skips with the reason when there is none."""
    r = kubectl("get", "node", NODE, "-o", "json", check=False)
    if r.returncode != 0:
        check = subprocess.run(
            [str(ROOT / "hack" / "realnode" / "up.sh"), "--check"],
            capture_output=True, text=True, env={**os.environ, "CLUSTER_DIR": str(CLUSTER_DIR)},
        )
        if check.returncode != 0:
            pytest.skip(f"no real node on this machine: {check.stdout.strip()}")
        pytest.skip("no real node: the cluster was started with REAL_NODE=0 (hack/realnode/up.sh adds it)")
    node = json.loads(r.stdout)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}.get("Ready")
    assert ready == "True", f"node {NODE} is not Ready: {node['status']['conditions']}"
    return NODE


def test_real_node_is_labelled_tainted_and_not_kwok(kubectl, realnode):  # noqa: F811
    node = json.loads(kubectl("get", "node", realnode, "-o", "json").stdout)
    assert node["metadata"]["labels"].get(LABEL) == "true"
    assert {"key": LABEL, "value": "true", "effect": "NoSchedule"} in node["spec"].get("taints", [])
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    images = {n for i in node["status"].get("images", []) for n in i.get("names", [])}
    assert "localhost/mpi-pi:latest" in images, images


def test_mpirun_across_plain_pods_found_by_dns(realnode):
    """Two sshd worker pods (hostname + subdomain + headless Service) and a launcher pod running
    `mpirun -n 4 --hostfile /etc/mpi/hostfile /opt/pi` over SSH: hack/realnode/smoke-test.sh."""
    ns = f"realnode-smoke-{uuid.uuid4().hex[:6]}"
    r = subprocess.run(
        [str(ROOT / "hack" / "realnode" / "smoke-test.sh")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "CLUSTER_DIR": str(CLUSTER_DIR), "NS": ns},
    )
    assert r.returncode == 0, f"smoke test failed:\n{r.stdout}\n{r.stderr}"
    assert "pi is approximately 3.14159" in r.stdout
    assert "4 ranks on 2 hosts" in r.stdout
    assert "rank 0 of 4 on pi-worker-0" in r.stdout and "rank 3 of 4 on pi-worker-1" in r.stdout
