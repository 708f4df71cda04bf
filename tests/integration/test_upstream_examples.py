"""The Kubeflow MPI Operator's own v2beta1 examples (pi with Open MPI, Intel MPI and MPICH) are
admitted by this CRD with nothing pruned or changed. Written here with what makes them particular
rather than copied: integer quantities (`cpu: 1`), an explicit `command: null`, a readiness probe on
sshd's port 2222, `sshAuthMountPath: /home/mpiuser/.ssh` with `runAsUser: 1000`, upstream's
retry-count label, `imagePullPolicy: Always`, `ttlSecondsAfterFinished` and `backoffLimit: 0`."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_manifests import subset_missing
from testsupport.kubectl import wait_established
from testsupport.paths import ROOT

pytestmark = pytest.mark.cluster


def container(name: str, image: str, **kw) -> dict:
    return {"image": image, "name": name, "securityContext": {"runAsUser": 1000},
            "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}, **kw}


def example(impl: str, image: str, launcher: dict, worker: dict, **spec) -> dict:
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": f"pi-{impl.lower()}", "labels": {"training.kubeflow.org/retry-count-limit": "3"}},
        "spec": {
            "slotsPerWorker": 1, "sshAuthMountPath": "/home/mpiuser/.ssh", "mpiImplementation": impl,
            "runPolicy": {"cleanPodPolicy": "Running", **spec.pop("run_policy", {})},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [container("mpi-launcher", image,
                                                                                           **launcher)]}}},
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [container("mpi-worker", image,
                                                                                         **worker)]}}},
            },
            **spec,
        },
    }


SSHD = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
PROBE = {"readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2}}
EXAMPLES = {
    "openmpi": example("OpenMPI", "mpioperator/mpi-pi:openmpi",
                       {"command": ["mpirun"], "args": ["-n", "2", "/home/mpiuser/pi"]},
                       {"command": SSHD[:1], "args": SSHD[1:]},
                       run_policy={"ttlSecondsAfterFinished": 60, "backoffLimit": 0}),
    "intel": example("Intel", "mpioperator/mpi-pi:intel",
                     {"imagePullPolicy": "Always", "args": ["mpirun", "-n", "2", "/home/mpiuser/pi"]},
                     {"imagePullPolicy": "Always", "command": None, "args": SSHD, **PROBE}),
    "mpich": example("MPICH", "mpioperator/mpi-pi:mpich",
                     {"imagePullPolicy": "Always", "args": ["mpirun", "-n", "2", "/home/mpiuser/pi"]},
                     {"imagePullPolicy": "Always", "command": None, "args": SSHD, **PROBE}),
}


def _without_nulls(obj):
    """What the API server keeps: a null is dropped (as Go clients drop it), everything else stays."""
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_without_nulls(v) for v in obj]
    return obj


@pytest.fixture(scope="module")
def crd(kubectl) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f",
            str(ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"))
    wait_established(kubectl, "mpijobs.kubeflow.org")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_upstream_example_is_admitted_unchanged(kubectl, crd, namespace, name):
    doc = EXAMPLES[name]
    r = kubectl("apply", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(doc))
    kept = json.loads(r.stdout)
    assert not subset_missing(_without_nulls(doc["spec"]), kept["spec"], "spec")
    assert not r.stderr.strip(), r.stderr  # no warning (unknown or duplicate field)
