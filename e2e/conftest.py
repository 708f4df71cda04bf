"""Fixtures for end-to-end tests: the CRD and RBAC of manifests/ installed once, a kubeconfig
with the operator's ServiceAccount token (so every test runs the operator with exactly the
ClusterRole users deploy, not as an administrator), and operators started as processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import ROOT, Operator, install_crd, service_account_kubeconfig

from tests.conftest import CLUSTER_DIR  # noqa: F401


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
    """start_operator(backend, namespace, *extra_args) -> Operator; all stopped at the end."""
    started: list[Operator] = []

    def start(backend: str, namespace: str, *extra: str, name: str = "op") -> Operator:
        op = Operator(operator_kubeconfig, backend, namespace, tmp_path / f"{name}-{len(started)}.log", extra)
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


__all__ = ["ROOT"]
