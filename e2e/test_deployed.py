"""The operator deployed as users deploy it: its image (built without Docker here), the Deployment of
manifests/ (through the manifests/local overlay) with two replicas on the real node, in-cluster
config through the `kubernetes` Service, leader election, probes, non-root with a read-only root
filesystem; an MPIJob runs `mpirun` to Succeeded through it, and the standby takes over when the
leader's pod is deleted. The overlay scopes the operator to the namespace mpijob-deployed, so it
never reconciles the MPIJobs of the other tests' operators. The CRD and RBAC stay afterwards: the
other tests' operators use that ServiceAccount."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml
from support import ROOT, wait_condition

from tests.cluster_fixtures import CLUSTER_DIR
from tests.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
NS = "mpi-operator"
JOBS_NS = "mpijob-deployed"
SELECTOR = "app.kubernetes.io/name=mpi-operator"


def _hack(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLUSTER_DIR": str(CLUSTER_DIR), "PIP_PYTHON": str(ROOT / ".venv" / "bin" / "python")}
    env.pop("KUBECONFIG", None)
    return subprocess.run([str(ROOT / "hack" / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                          timeout=900)


@pytest.fixture(scope="module")
def deployed(kubectl, realnode, crd) -> Iterator[str]:
    t0 = time.monotonic()
    r = _hack("deploy.sh", "deploy")
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"\n[deployed] make deploy (image cached or built, rollout of 2 replicas): {time.monotonic() - t0:.1f}s")
    yield JOBS_NS
    kubectl("delete", "-k", str(ROOT / "manifests" / "local"), "--ignore-not-found", "--wait=true", timeout=180)


def operator_pods(kubectl) -> list[dict]:
    return json.loads(kubectl("-n", NS, "get", "pods", "-l", SELECTOR, "-o", "json").stdout)["items"]


def leader(kubectl) -> str:
    lease = json.loads(kubectl("-n", NS, "get", "lease", "mpi-operator", "-o", "json").stdout)
    return lease["spec"].get("holderIdentity") or ""


def ready(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def pi_job(name: str) -> dict:
    job = yaml.safe_load((ROOT / "hack" / "realnode" / "pi-mpijob.yaml").read_text())
    job["metadata"] = {"name": name, "namespace": JOBS_NS}
    return job


def test_two_replicas_ready_on_the_real_node_one_leader(kubectl, deployed):
    pods = wait_until(lambda: [p for p in operator_pods(kubectl) if ready(p)] if
                      len([p for p in operator_pods(kubectl) if ready(p)]) == 2 else None, 120, what="2 Ready")
    assert {p["spec"]["nodeName"] for p in pods} == {"realnode"}
    assert wait_until(lambda: leader(kubectl) in {p["metadata"]["name"] for p in pods}, 60, what="a leader")
    for p in pods:
        sc = p["spec"]["containers"][0]["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True, sc
        name = p["metadata"]["name"]
        uid = kubectl("-n", NS, "exec", name, "--", "id", "-u").stdout.strip()
        assert uid == "65532", uid
        ro = kubectl("-n", NS, "exec", name, "--", "touch", "/opt/x", check=False)
        assert ro.returncode != 0 and "Read-only file system" in ro.stderr, ro.stderr
        # in-cluster config: the ServiceAccount token, through the `kubernetes` Service
        env = kubectl("-n", NS, "exec", name, "--", "printenv", "KUBERNETES_SERVICE_HOST").stdout.strip()
        assert env == "10.96.0.1", env
    logs = kubectl("-n", NS, "logs", leader(kubectl)).stdout
    assert '"event": "caches synced"' in logs and '"event": "became leader"' in logs, logs[-2000:]


def test_pi_by_mpirun_through_the_deployed_operator(kubectl, deployed):
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", input=json.dumps(pi_job("pi")))
    wait_condition(kubectl, JOBS_NS, "pi", "Succeeded", timeout=240)
    print(f"\n[deployed] real MPIJob submit -> Succeeded through the Deployment: {time.monotonic() - t0:.1f}s")
    pods = json.loads(kubectl("-n", JOBS_NS, "get", "pods", "-l", "training.kubeflow.org/job-name=pi,"
                              "training.kubeflow.org/job-role=launcher", "-o", "json").stdout)["items"]
    logs = "\n".join(kubectl("-n", JOBS_NS, "logs", p["metadata"]["name"]).stdout for p in pods)
    assert "pi is approximately 3.14159" in logs, logs


def test_the_standby_takes_over_when_the_leader_pod_is_deleted(kubectl, deployed):
    old = wait_until(lambda: leader(kubectl), 60, what="a leader")
    t0 = time.monotonic()
    kubectl("-n", NS, "delete", "pod", old, "--wait=false")
    job = pi_job("after-failover")
    kubectl("apply", "-f", "-", input=json.dumps(job))
    wait_condition(kubectl, JOBS_NS, "after-failover", "Created", timeout=120)
    took = time.monotonic() - t0
    new = leader(kubectl)
    assert new and new != old, (old, new)
    print(f"\n[deployed] leader pod deleted -> first status write by the new leader ({new}): {took:.1f}s")
    wait_condition(kubectl, JOBS_NS, "after-failover", "Succeeded", timeout=240)
