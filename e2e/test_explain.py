"""Issue 51, on the local cluster: every MPIJob explains itself. Each cause is made for real, kwok for
scheduling, the real node (its kubelet and containerd) for what a kubelet reports, and each test
asserts what a user reads in `kubectl get mpijob NAME -o yaml` (docs/operations.md, "Why is my MPIJob
not running?"): the condition Waiting while it is held, the Restarting and Failed messages naming the
pod, its node and the cause."""

from __future__ import annotations

import json
import time

import pytest

from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, get, items
from testsupport.paths import CLUSTER_DIR
from testsupport.realnode_mpi import SSHD, launcher_logs, load_images, mpijob, pods
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


def _yaml_conditions(kubectl, ns: str, name: str) -> dict[str, dict]:
    """The conditions as `kubectl get mpijob NAME -o yaml` shows them (read as JSON)."""
    job = json.loads(kubectl("-n", ns, "get", "mpijob", name, "-o", "json").stdout)
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}


def _waiting(kubectl, ns: str, name: str, reason: str, timeout: float = 120) -> dict:
    def seen():
        c = _yaml_conditions(kubectl, ns, name).get("Waiting")
        return c if c and c["status"] == "True" and c["reason"] == reason else None
    return wait_until(seen, timeout, 1.0, what=f"Waiting/{reason} on {ns}/{name}")


def _warnings(kubectl, ns: str, name: str, reason: str) -> list[str]:
    evs = items(kubectl, ns, "events", fields=f"involvedObject.kind=MPIJob,involvedObject.name={name}")
    return [e["message"] for e in evs if e["reason"] == reason and e["type"] == "Warning"]


# -- kwok: the scheduler ----------------------------------------------------------------------------


def test_explain_node_selector_no_node_has(kubectl, operator, namespace, backend):
    job = simulated_mpijob("nosel", workers=2)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"explain.example/none": "x"}
    apply(kubectl, namespace, job)
    c = _waiting(kubectl, namespace, "nosel", "Unschedulable")
    worker_pods = sorted(p["metadata"]["name"] for p in pods(kubectl, namespace, "nosel", "worker"))
    assert c["message"].startswith(f"pods {', '.join(worker_pods)} cannot be scheduled; the scheduler: 0/"), c
    assert "didn't match Pod's node affinity/selector" in c["message"], c
    job_now = get(kubectl, namespace, "mpijob", "nosel")
    # (the State column's order is the cluster-wide condition-order policy's, which other branches sharing this
    # cluster apply in their own version: tests/integration/test_state_column.py checks it with this one)
    assert _warnings(kubectl, namespace, "nosel", "Unschedulable"), "a Warning Event with it"
    # held: nothing more is written while the scheduler keeps trying (it retries every few seconds)
    rv = job_now["metadata"]["resourceVersion"]
    time.sleep(15)
    assert get(kubectl, namespace, "mpijob", "nosel")["metadata"]["resourceVersion"] == rv, "a write while held"


# -- the real node: the kubelet ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def image(realnode) -> str:
    return load_images(CLUSTER_DIR, "openmpi4")["openmpi4"]


def _pi(name: str, image: str, **kw) -> dict:
    return mpijob(name, "openmpi4", image, args=["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi"],
                  **kw)


def _worker_container(job: dict) -> dict:
    return job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


@pytest.mark.realnode
def test_explain_worker_image_that_does_not_exist(kubectl, operator, namespace, backend, image):
    job = _pi("noimg", image)
    _worker_container(job)["image"] = "localhost/explain-does-not-exist:1"
    apply(kubectl, namespace, job)
    c = _waiting(kubectl, namespace, "noimg", "ImagePullFailed")
    assert "container worker cannot pull image localhost/explain-does-not-exist:1" in c["message"], c
    assert "node realnode" in c["message"] and "(pod noimg-worker-" in c["message"], c
    assert "the kubelet: ErrImagePull" in c["message"] or "the kubelet: ImagePullBackOff" in c["message"], c


@pytest.mark.realnode
def test_explain_secret_that_does_not_exist(kubectl, operator, namespace, backend, image):
    """An env var from a Secret that does not exist: CreateContainerConfigError, the Secret named."""
    job = _pi("nosecret", image)
    _worker_container(job)["env"] = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "explain-missing",
                                                                                      "key": "token"}}}]
    apply(kubectl, namespace, job)
    c = _waiting(kubectl, namespace, "nosecret", "ContainerConfigError")
    assert 'secret "explain-missing" not found' in c["message"] and "container worker cannot be created" in c["message"]


@pytest.mark.realnode
def test_explain_secret_volume_that_does_not_exist(kubectl, operator, namespace, image):
    """A Secret volume that does not exist: the kubelet says so only in its Events (FailedMount), so
    the condition says, after 90 s, that the containers have not started and which Secret it mounts."""
    job = _pi("novol", image)
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["volumes"] = [{"name": "creds", "secret": {"secretName": "explain-missing-vol"}}]
    _worker_container(job)["volumeMounts"] = [{"name": "creds", "mountPath": "/creds"}]
    apply(kubectl, namespace, job)
    c = _waiting(kubectl, namespace, "novol", "ContainersNotStarted", timeout=200)
    assert "has not started its containers since" in c["message"] and "secret explain-missing-vol" in c["message"]


@pytest.mark.realnode
@pytest.mark.parametrize("backend", ["statefulset"])  # the Job backend's workers do not restart in place
def test_explain_worker_sshd_exits_1_at_start(kubectl, operator, namespace, backend, image):
    """StatefulSet backend (its pods restart in place): CrashLoopBackOff with the last exit code, while
    the launcher waits for the workers (WaitForWorkersReady)."""
    job = _pi("crash", image, worker_command=["sh", "-c", "exit 1"], policy="WaitForWorkersReady", backoff=3)
    apply(kubectl, namespace, job)
    c = _waiting(kubectl, namespace, "crash", "CrashLoopBackOff", timeout=200)
    assert "container worker keeps failing: its last run ended with exit code 1 (container worker)" in c["message"], c
    assert "node realnode" in c["message"], c


@pytest.mark.realnode
def test_explain_launcher_oomkilled_backoff_0(kubectl, operator, namespace, backend, image):
    """The launcher's main process grows past its memory limit: Failed, the message naming the pod, its
    node, OOMKilled and the limit."""
    job = mpijob("oom", "openmpi4", image, args=["tail", "/dev/zero"], backoff=0)
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["resources"] = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
    apply(kubectl, namespace, job)

    def failed():
        c = _yaml_conditions(kubectl, namespace, "oom").get("Failed")
        return c if c and c["status"] == "True" else None
    c = wait_until(failed, 240, 1.0, what="Failed")
    names = [p["metadata"]["name"] for p in pods(kubectl, namespace, "oom", "launcher")]
    assert any(f"(pod {n}, node realnode)" in c["message"] for n in names), (names, c)
    assert "OOMKilled" in c["message"] and "64Mi" in c["message"], c
    assert "node realnode" in c["message"], c


@pytest.mark.realnode
def test_explain_worker_oomkilled_mid_run(kubectl, operator, namespace, backend, image):
    """Worker 1 grows past its memory limit while the ranks compute: the Restarting message names it,
    its pod and node, OOMKilled and the limit."""
    # worker 1's main process grows past the limit 20 s in (its sshd beside it serves the ranks till then)
    sshd = " ".join(SSHD)
    grow = f'case "$(hostname)" in *-worker-1) {sshd} & sleep 20; exec tail /dev/zero;; *) exec {sshd};; esac'

    job = mpijob("woom", "openmpi4", image, backoff=3, worker_command=["sh", "-c", grow], policy="WaitForWorkersReady",
                 args=["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi", "60000000000"])
    _worker_container(job)["resources"] = {"requests": {"cpu": "100m", "memory": "32Mi"},
                                           "limits": {"memory": "96Mi"}}
    apply(kubectl, namespace, job)

    def named():
        msgs = [*_warnings(kubectl, namespace, "woom", "MPIJobRestarting"),
                *(c.get("message", "") for c in _yaml_conditions(kubectl, namespace, "woom").values())]
        return [m for m in msgs if "worker woom-worker-1 (pod " in m and "OOMKilled" in m]
    try:
        found = wait_until(named, 240, 1.0, what="the OOMKilled worker named")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{launcher_logs(kubectl, namespace, 'woom')[-3000:]}") from None
    assert any("node realnode" in m and "limit 96Mi" in m for m in found), found
