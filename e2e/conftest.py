"""Fixtures for end-to-end tests: the CRD and RBAC of manifests/ installed once, a kubeconfig
with the operator's ServiceAccount token (so every test runs the operator with exactly the
ClusterRole users deploy, not as an administrator), and operators started as processes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

# The Kueue modules' fixtures (e2e/test_kueue*.py), module-scoped: one Kueue per module that asks.
from kueue_fixtures import (  # noqa: F401
    kueue,
    kueue_crds,
    kueue_log,
    kueue_namespace,
    pods_ready,
    pods_ready_times,
    pools,
    queues,
)

from testsupport.kubectl import install_crd, service_account_kubeconfig
from testsupport.operator_process import Operator
from testsupport.paths import CLUSTER_DIR, ROOT

REAL_NODE = "realnode"


@pytest.fixture(scope="session")
def realnode(kubectl) -> str:
    """The real node's name, once it is Ready. Skipped, with the reason, only where this machine
    cannot run one (hack/realnode/up.sh --check) or the cluster was asked not to (REAL_NODE=0)."""
    r = kubectl("get", "node", REAL_NODE, "-o", "json", check=False)
    if r.returncode != 0:
        check = subprocess.run([str(ROOT / "hack" / "realnode" / "up.sh"), "--check"], capture_output=True,
                               text=True, env={**os.environ, "CLUSTER_DIR": str(CLUSTER_DIR)})
        if check.returncode != 0:
            pytest.skip(f"no real node on this machine: {check.stdout.strip()}")
        if os.environ.get("REAL_NODE") == "0":
            pytest.skip("REAL_NODE=0: the cluster runs without its real node")
        pytest.fail("this machine can run a real node but the cluster has none: run hack/realnode/up.sh")
    node = json.loads(r.stdout)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}.get("Ready")
    assert ready == "True", f"node {REAL_NODE} is not Ready: {node['status']['conditions']}"
    return REAL_NODE


@pytest.fixture(scope="session")
def mpi_image(realnode):
    """mpi_image(flavour) -> the image reference, built (cached) and imported into the real node."""
    from testsupport.realnode_mpi import load_images

    refs: dict[str, str] = {}

    def get(flavour: str) -> str:
        if flavour not in refs:
            refs.update(load_images(CLUSTER_DIR, flavour))
        return refs[flavour]

    return get


@pytest.fixture(scope="session")
def crd(kubectl) -> None:
    install_crd(kubectl)


@pytest.fixture(scope="session")
def operator_kubeconfig(crd, tmp_path_factory) -> str:
    return service_account_kubeconfig(tmp_path_factory.mktemp("sa") / "kubeconfig")


@pytest.fixture(params=["job", "statefulset"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def start_operator(crd, operator_kubeconfig, tmp_path) -> Iterator:
    """start_operator(backend, namespace, *extra_args) -> Operator; all stopped at the end. `kubeconfig`:
    another identity than the ServiceAccount of manifests/rbac (a namespaced one, say)."""
    started: list[Operator] = []

    def start(backend: str, namespace: str, *extra: str, name: str = "op", kubeconfig: str | None = None) -> Operator:
        op = Operator(kubeconfig or operator_kubeconfig, backend, namespace, tmp_path / f"{name}-{len(started)}.log",
                      extra)
        started.append(op)
        op.wait_ready()
        return op

    yield start
    for op in started:
        op.stop()
        print(f"\n--- operator log ({op.log_path.name}), last lines ---\n{op.tail(60)}")


@pytest.fixture
def operator(start_operator, backend, namespace) -> Operator:
    return start_operator(backend, namespace)

