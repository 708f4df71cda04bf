"""Issue 24 against the real API server: the controller (in this process, so that the test can
stop a watch or hang a worker where the fault needs it) with the operator's ServiceAccount, in a
namespace of its own; pods are kwok's, or none (a dead node's).

Items: 1 refusal (a namesake seen in a relist), 2 standby (a replica that does not lead keeps
nothing), 5 refusal retries inside the queue's rate, 8 terminating (a predecessor's pod on a dead
node), 10 healthz, 11 secret_data.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from client.rest import RestClient
from controller import health
from controller import mpijob_controller as mc
from controller.config import Options
from controller.executor import Executor
from informers import reflector as reflector_mod
from informers.factory import InformerFactory
from reconcilers import predecessor
from testsupport.builders import refuse_jobs_policy
from testsupport.builders import simulated_mpijob as mpijob
from testsupport.kubectl import MPIJOBS, apply, conditions, events, get, wait_condition
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


class Running:
    """One in-process controller: its informers, and its workers once it leads."""

    def __init__(self, kubeconfig: str, namespace: str, lead: bool, **opts) -> None:
        self.client = RestClient.from_kubeconfig(kubeconfig, qps=50, burst=100)
        self.opts = Options(namespace=namespace, **opts)
        self.factory = InformerFactory(self.client, namespace=namespace)
        self.executor = Executor(self.client, lambda: True, "mpi-operator", f"test-{uuid.uuid4().hex[:6]}")
        self.ctrl = mc.MPIJobController(self.opts, self.factory, self.executor)
        self.factory.start()
        assert self.factory.wait_for_cache_sync(60)
        if lead:
            self.ctrl.run_workers()

    def stop(self) -> None:
        self.ctrl.shutdown(5)
        self.factory.stop()


@pytest.fixture
def controllers(operator_kubeconfig, namespace) -> Iterator:
    made: list[Running] = []

    def start(lead: bool = True, **opts) -> Running:
        made.append(Running(operator_kubeconfig, namespace, lead, **opts))
        return made[-1]

    yield start
    for r in made:
        r.stop()


def kget(kubectl, ns: str, kind: str, name: str) -> dict | None:
    return get(kubectl, ns, kind, name)


# -- item 1 ---------------------------------------------------------------------------------------


def test_refusal_not_inherited_by_a_namesake_seen_in_a_relist(kubectl, controllers, namespace, monkeypatch):
    """MPIJob `pi` is refused for good (imagePullPolicy the API server refuses: 422, Failed/ChildRefused).
    While the operator's MPIJob watch is down, `pi` is deleted and created again with a good spec (a
    new uid, generation 1 again). The relist shows the new one as an update of the old: no delete
    event. Before the fix the refusal, keyed by ns/name and compared by generation only, made the
    new MPIJob Failed/ChildRefused without a try; it must run."""
    run = controllers()
    bad = mpijob("pi", launcher_runs="2s", policy="AtStartup")
    bad["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    apply(kubectl, namespace, bad)
    assert wait_condition(kubectl, namespace, "pi", "Failed", timeout=30)["reason"] == "ChildRefused"
    old_uid = kget(kubectl, namespace, MPIJOBS, "pi")["metadata"]["uid"]

    # The watch goes down and stays down until released; then it comes back with 410 Gone, so the
    # reflector relists (what a long outage does).
    refl = run.ctrl.mpijobs.reflector
    release = threading.Event()
    real_watch = refl._watch

    def down_then_expired() -> None:
        release.wait(120)
        monkeypatch.setattr(refl, "_watch", real_watch)
        raise reflector_mod._Expired("too old resource version (the test's outage)")

    monkeypatch.setattr(refl, "_watch", down_then_expired)
    refl.disconnect()
    kubectl("-n", namespace, "delete", MPIJOBS, "pi", "--wait=true", timeout=60)
    apply(kubectl, namespace, mpijob("pi", launcher_runs="2s", policy="AtStartup"))
    new = kget(kubectl, namespace, MPIJOBS, "pi")
    assert new["metadata"]["uid"] != old_uid and new["metadata"]["generation"] == 1
    wait_until(lambda: run.ctrl.mpijobs.store.get(f"{namespace}/pi") is not None, 5)
    release.set()
    wait_until(lambda: (run.ctrl.mpijobs.store.get(f"{namespace}/pi") or {}).get("metadata", {}).get("uid")
               == new["metadata"]["uid"], 60, what="the relist to show the new MPIJob")
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    assert "ChildRefused" not in json.dumps(conditions(kubectl, namespace, "pi"))


# -- item 2 ---------------------------------------------------------------------------------------


def test_standby_keeps_no_memory_and_no_queue(kubectl, controllers, namespace):
    """A leader runs MPIJobs whose pods come and go; a standby (informers on, never leading) sees the
    same events. Before the fix each pod event added to the standby's pace map and queue, and only a
    sync (leader only) removed them: one entry per deleted MPIJob for the life of the standby."""
    controllers()
    standby = controllers(lead=False)
    names = [f"s{i}" for i in range(6)]
    for name in names:
        apply(kubectl, namespace, mpijob(name, workers=2, launcher_runs="1s", policy="AtStartup"))
    for name in names:
        wait_condition(kubectl, namespace, name, "Succeeded", timeout=120)
    kubectl("-n", namespace, "delete", MPIJOBS, "--all", "--wait=true", timeout=120)
    wait_until(lambda: not standby.ctrl.pods.store.list(), 120, what="the MPIJobs' pods gone")
    time.sleep(mc.POD_EVENT_BATCH_SECONDS + 0.5)
    q = standby.ctrl.queue
    assert len(q) == 0 and q.waiting_len() == 0, (len(q), q.waiting_len())
    assert len(standby.ctrl.memory) == 0


# -- item 5 ---------------------------------------------------------------------------------------


@pytest.fixture
def refuse_blocked_jobs(kubectl, namespace) -> Iterator[str]:
    """A ValidatingAdmissionPolicy (what a webhook that refuses would do) that forbids Jobs named
    blocked-* in this namespace only: 403 Forbidden, a transient refusal (Blocked, retried)."""
    name = f"issue24-block-{namespace}"
    kubectl("apply", "-f", "-", input=json.dumps(refuse_jobs_policy(name, namespace, "the test")))
    probe = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "blocked-probe"},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}
    # The policy takes a moment to be enforced.
    wait_until(lambda: "blocked by the test" in kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-",
                                                        input=json.dumps(probe), check=False).stderr,
               30, what="the admission policy enforced")
    yield name
    kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
    kubectl("delete", "validatingadmissionpolicy", name, check=False)


def test_refusal_retries_stay_inside_the_queue_rate(kubectl, controllers, namespace, refuse_blocked_jobs):
    """40 MPIJobs whose Jobs an admission policy refuses (403: Blocked, retried). With the queue's
    overall rate at 2/s, their retries must stay at about 2/s. Before the fix the per-MPIJob cap of
    10 s bypassed the bucket: 40 MPIJobs retried 4 times a second, however low --queue-qps was."""
    run = controllers(queue_qps=2.0, queue_burst=5)

    def refusals() -> float:  # refused writes so far (this process's operator metric)
        return REGISTRY.get_sample_value("mpi_operator_reconcile_errors_total", {"reason": "Forbidden"}) or 0.0

    before = refusals()
    for i in range(40):
        apply(kubectl, namespace, mpijob(f"blocked-{i}", workers=1, launcher_runs="1s", policy="AtStartup"))
    def blocked() -> int:  # MPIJobs refused at least once, as the controller's cache shows them
        return sum(1 for j in run.ctrl.mpijobs.store.list() if any(
            c.get("type") == "Blocked" and c.get("status") == "True" for c in (j.get("status") or {}).get(
                "conditions") or []))

    wait_until(lambda: blocked() == 40 and refusals() - before >= 40, 180, what="every MPIJob Blocked")
    time.sleep(20)  # past the fast first retries: the steady state
    start, window = refusals(), 30.0
    time.sleep(window)
    rate = (refusals() - start) / window
    assert rate <= 2.0 * 1.25, f"{rate:.1f} refused retries/s with --queue-qps=2"
    assert conditions(kubectl, namespace, "blocked-0")["Blocked"]["status"] == "True"


# -- item 8 ---------------------------------------------------------------------------------------


@pytest.fixture
def dead_node(kubectl, namespace) -> Iterator[str]:
    """A Node that no kubelet (and no kwok) runs: a pod bound to it never starts, and once deleted
    stays Terminating, as on a node that died. Tainted so that nothing else is scheduled there."""
    name = f"issue24-dead-{namespace}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"issue24": "dead"}},
            "spec": {"taints": [{"key": "issue24.mpijob-operator.dev/dead", "effect": "NoSchedule"}]}}
    kubectl("apply", "-f", "-", input=json.dumps(node))
    yield name
    # Free the test's pods, then the node.
    for pod in json.loads(kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)["items"]:
        if pod["spec"].get("nodeName") == name:
            kubectl("-n", namespace, "delete", "pod", pod["metadata"]["name"], "--force", "--grace-period=0",
                    check=False)
    kubectl("delete", "node", name, "--wait=false", check=False)


def test_terminating_predecessor_pod_is_named_on_the_mpijob(kubectl, controllers, namespace, dead_node,
                                                             monkeypatch):
    """`pi` has a worker on a dead node; `pi` is deleted (the worker pod stays Terminating: no kubelet
    confirms) and created again. Before the fix the new `pi` waited for that pod for ever, without a
    word. Past the bound (120 s; 5 s here) it says so: WaitingForPredecessor=True and one Warning
    Event naming the pod; once the pod is removed, it runs and the condition goes."""
    monkeypatch.setattr(predecessor, "STUCK_SECONDS", 5.0)
    controllers()
    old = mpijob("pi", workers=1, launcher_runs="2s", policy="WaitForWorkersReady")
    worker_spec = old["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker_spec["nodeName"] = dead_node
    worker_spec["terminationGracePeriodSeconds"] = 1  # 0 would delete the pod at once, unconfirmed
    apply(kubectl, namespace, old)
    pod = wait_until(lambda: [p for p in json.loads(kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)[
        "items"] if p["spec"].get("nodeName") == dead_node], 60, what="the worker pod on the dead node")[0]
    pod_name = pod["metadata"]["name"]
    kubectl("-n", namespace, "delete", MPIJOBS, "pi", "--wait=true", timeout=60)
    wait_until(lambda: (kget(kubectl, namespace, "pod", pod_name) or {}).get("metadata", {}).get(
        "deletionTimestamp"), 60, what="the old worker pod Terminating")
    apply(kubectl, namespace, mpijob("pi", workers=1, launcher_runs="2s", policy="WaitForWorkersReady"))
    cond = wait_condition(kubectl, namespace, "pi", "WaitingForPredecessor", timeout=60)
    assert cond["reason"] == "PredecessorPodStuck" and f"{namespace}/{pod_name}" in cond["message"], cond
    warned = wait_until(lambda: [e for e in events(kubectl, namespace, "pi") if e["reason"] == "PredecessorPodStuck"],
                        20, what="the Warning Event")
    assert pod_name in warned[0]["message"]
    assert "Running" not in conditions(kubectl, namespace, "pi")
    kubectl("-n", namespace, "delete", "pod", pod_name, "--force", "--grace-period=0")
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    assert "WaitingForPredecessor" not in conditions(kubectl, namespace, "pi")
    assert len([e for e in events(kubectl, namespace, "pi") if e["reason"] == "PredecessorPodStuck"]) == 1


# -- item 10 --------------------------------------------------------------------------------------


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_fails_when_a_worker_hangs_or_the_informers_stop(kubectl, controllers, namespace, monkeypatch):
    """/healthz served as the operator serves it (controller/__main__.py: healthz=ctrl.healthy).
    Before the fix it always answered ok: a worker hung in a reconcile, or informers that stopped,
    never made the kubelet restart the process."""
    monkeypatch.setattr(mc, "WORKER_HANG_SECONDS", 2.0)
    run = controllers(threadiness=1)
    servers = health.Servers()
    ports = servers.start(None, ("127.0.0.1", 0), healthz=run.ctrl.healthy, readyz=lambda: (True, "ok"))
    try:
        assert _healthz(ports["probes"]) == (200, "ok\n")
        hang = threading.Event()
        real_apply = run.executor.apply

        def hanging(job, plan):
            if job["metadata"]["name"] == "hang":
                hang.wait(60)
            return real_apply(job, plan)

        run.executor.apply = hanging  # type: ignore[method-assign]
        apply(kubectl, namespace, mpijob("hang", workers=1))
        _, text = wait_until(lambda: (r := _healthz(ports["probes"]))[0] == 503 and r, 30,
                             what="/healthz failing on the hung worker")
        assert f"{namespace}/hang" in text and "hung" in text, text
        hang.set()
        wait_until(lambda: _healthz(ports["probes"])[0] == 200, 30, what="/healthz ok again")
        run.factory.stop()
        _, text = wait_until(lambda: (r := _healthz(ports["probes"]))[0] == 503 and r, 30,
                             what="/healthz failing on stopped informers")
        assert "informers stopped" in text, text
    finally:
        servers.stop()


# -- item 11 --------------------------------------------------------------------------------------


def test_secret_data_not_in_the_informer_cache(kubectl, controllers, namespace):
    """The SSH Secret is created with its private key; the operator's cache of it holds the keys'
    names only. Before the fix every private key of the cluster sat in the Secret informer's cache.
    The plan still sees a Secret with both keys: no delete/re-create loop."""
    run = controllers()
    apply(kubectl, namespace, mpijob("pi", workers=1, launcher_runs="2s", policy="AtStartup"))
    wait_condition(kubectl, namespace, "pi", "Succeeded", timeout=90)
    server_copy = kget(kubectl, namespace, "secret", "pi-ssh")
    assert server_copy["data"]["ssh-privatekey"]  # the key is on the API server...
    cached = run.ctrl.secrets.store.get(f"{namespace}/pi-ssh")
    assert set(cached["data"]) == {"ssh-privatekey", "ssh-publickey"}
    dumped = json.dumps(run.ctrl.secrets.store.list())
    assert server_copy["data"]["ssh-privatekey"] not in dumped and "PRIVATE KEY" not in dumped  # ...not here
    time.sleep(3)
    assert kget(kubectl, namespace, "secret", "pi-ssh")["metadata"]["uid"] == server_copy["metadata"]["uid"]
