"""Pods carry upstream's labels, training.kubeflow.org/replica-index among them, with upstream's
values (docs/architecture.md section 6.4): the worker and launcher objects rendered by
reconcilers/desired.py are created for real, the Job and StatefulSet controllers make the pods, and
the MutatingAdmissionPolicy of manifests/admission/ labels them at admission.

Worker i: i, or i+1 with runLauncherAsWorker; the launcher: 0 only with runLauncherAsWorker.
"""

from __future__ import annotations

import json

import pytest

from reconcilers import desired
from reconcilers.defaults import with_defaults
from reconcilers.types import Config
from tests.crd_fuzz import base_mpijob
from testsupport.kubectl import install_replica_index_policy
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

UPSTREAM_LABELS = ("training.kubeflow.org/operator-name", "training.kubeflow.org/job-name",
                   "training.kubeflow.org/job-role")
INDEX = "training.kubeflow.org/replica-index"
WORKERS = 3


@pytest.fixture(scope="module")
def policy(kubectl) -> None:
    install_replica_index_policy(kubectl)


def _unowned(obj: dict) -> dict:
    """Without the ownerReference to an MPIJob that does not exist (the garbage collector would
    delete the object at once)."""
    obj["metadata"].pop("ownerReferences", None)
    return obj


def _pods(kubectl, ns: str, role: str) -> list[dict]:
    r = kubectl("-n", ns, "get", "pods", "-l", f"training.kubeflow.org/job-role={role}", "-o", "json")
    return json.loads(r.stdout)["items"]


@pytest.mark.parametrize("backend", ["job", "statefulset"])
@pytest.mark.parametrize("launcher_as_worker", [False, True])
def test_pods_get_upstreams_replica_index(kubectl, policy, namespace, backend, launcher_as_worker):
    job = base_mpijob("pi")
    job["metadata"].update(namespace=namespace, uid="00000000-0000-0000-0000-000000000000")
    job["spec"]["runLauncherAsWorker"] = launcher_as_worker
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = WORKERS
    job = with_defaults(job)
    config = Config(worker_backend=backend)
    for obj in (desired.workers(job, config), desired.launcher(job, config)):
        kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(_unowned(obj)))

    def labelled() -> bool:
        workers, launchers = _pods(kubectl, namespace, "worker"), _pods(kubectl, namespace, "launcher")
        return len(workers) == WORKERS and len(launchers) >= 1
    wait_until(labelled, timeout=60, what="launcher and worker pods")

    offset = 1 if launcher_as_worker else 0
    index_label = "batch.kubernetes.io/job-completion-index" if backend == "job" else "apps.kubernetes.io/pod-index"
    got = sorted((int(p["metadata"]["labels"][index_label]), p["metadata"]["labels"].get(INDEX))
                 for p in _pods(kubectl, namespace, "worker"))
    assert got == [(i, str(i + offset)) for i in range(WORKERS)]
    for pod in _pods(kubectl, namespace, "worker") + _pods(kubectl, namespace, "launcher"):
        labels = pod["metadata"]["labels"]
        assert all(k in labels for k in UPSTREAM_LABELS), labels
    for launcher in _pods(kubectl, namespace, "launcher"):
        assert launcher["metadata"]["labels"].get(INDEX) == ("0" if launcher_as_worker else None)
