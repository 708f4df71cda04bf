"""Shared fixtures. The local cluster (hack/cluster-up.sh) is started once per test session,
only when a test asks for it, and stopped at the end only if this session started it."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testsupport.kubectl import Kubectl, release_held_pods, runner
from testsupport.paths import CLUSTER_DIR, ROOT


def _healthy(kubeconfig: Path) -> bool:
    kubectl = CLUSTER_DIR / "bin" / "kubectl"
    if not (kubeconfig.exists() and kubectl.exists()):
        return False
    r = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz"],
        capture_output=True, text=True, timeout=20,
    )
    return r.returncode == 0


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    """Path of an admin kubeconfig for the local cluster (started here if it is not up)."""
    path = CLUSTER_DIR / "kubeconfig"
    started = False
    if not _healthy(path) and os.environ.get("PYTEST_XDIST_WORKER"):
        # One worker's session may end while the others still use the cluster: under pytest-xdist
        # the cluster is started before the workers (hack/test.sh, make test) and stopped after them.
        pytest.fail(f"the local cluster ({path}) is not up: start it before pytest -n (make cluster-up), or "
                    "run make test, which does")
    if not _healthy(path):
        subprocess.run([str(ROOT / "hack" / "cluster-up.sh")], check=True, timeout=3600)
        started = True
    yield str(path)
    if started and os.environ.get("KEEP_CLUSTER") != "1":
        subprocess.run([str(ROOT / "hack" / "cluster-down.sh")], check=False, timeout=300)


@pytest.fixture(scope="session")
def kubectl(kubeconfig: str) -> Kubectl:
    """Runs the cluster's kubectl; `kubectl("get", "pods", input=yaml, check=False)`."""
    return runner(kubeconfig)


@pytest.fixture(scope="session")
def get_json(kubectl: Kubectl) -> Callable[..., dict]:
    def get(*args: str) -> dict:
        return json.loads(kubectl("get", *args, "-o", "json").stdout)

    return get


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)
    release_held_pods(kubectl, name)

