"""Launcher log reads apart from the reconciles (issue 50 item 8, `log_reads_apart`; docs/architecture.md
section 9.1), against the real API server: launchers on a node whose kubelet endpoint accepts
connections and never answers, as a kubelet that hangs does. The API server relays each `pods/log`
there and waits; the operator reads on reader threads of its own (controller/logreader.py), so
another MPIJob's status is written at once, and the hanging reads end in the outcome the verdict
already has for a log it cannot read.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from client.rest import RestClient
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import MPIJOBS, apply, conditions, events, get, pods, wait_condition
from testsupport.net import free_port
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

HUNG = 4  # launchers whose log hangs: as many as the operator's reconcile threads (--threadiness 4)


class Tarpit:
    """A TCP port that accepts every connection and never sends a byte: a kubelet that hangs. Counts
    the connections open now and in all."""

    def __init__(self) -> None:
        self.port = free_port()
        self.sock = socket.create_server(("127.0.0.1", self.port), backlog=64)
        self.held: list[socket.socket] = []
        self.accepted = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.held.append(conn)
                self.accepted += 1

    def open_now(self) -> int:
        """Connections still open from the other side (the API server gives up on some)."""
        with self.lock:
            alive = []
            for c in self.held:
                try:
                    c.setblocking(False)
                    gone = c.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    c.close()
                else:
                    alive.append(c)
            self.held = alive
            return len(alive)

    def close(self) -> None:
        self.sock.close()
        with self.lock:
            for c in self.held:
                c.close()


@pytest.fixture
def hanging_node(kubectl, namespace) -> Iterator[tuple[str, Tarpit]]:
    """A Node that no kubelet runs, whose kubelet endpoint (127.0.0.1:<tarpit>) never answers;
    tainted so that nothing else lands there."""
    pit = Tarpit()
    name = f"logs-hang-{namespace}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"logs-hang": namespace}},
            "spec": {"taints": [{"key": "logs.mpijob-operator.dev/hang", "effect": "NoSchedule"}]}}
    kubectl("apply", "-f", "-", input=json.dumps(node))
    status = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                       {"type": "Hostname", "address": name}],
                         "daemonEndpoints": {"kubeletEndpoint": {"Port": pit.port}}}}
    kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    yield name, pit
    for pod in json.loads(kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)["items"]:
        if pod["spec"].get("nodeName") == name:
            kubectl("-n", namespace, "delete", "pod", pod["metadata"]["name"], "--force", "--grace-period=0",
                    check=False)
    kubectl("delete", "node", name, "--wait=false", check=False)
    pit.close()


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exit_0(kubectl, namespace: str, pod: dict) -> None:
    """What a kubelet reports of a launcher whose mpirun exited 0: the pod Succeeded."""
    spec = pod["spec"]
    done = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _stamp(),
                                      "finishedAt": _stamp()}}} for c in spec["containers"]]
    init = [{**s, "name": c["name"], "image": c["image"]}
            for s, c in zip([done[0]] * len(spec.get("initContainers") or []), spec.get("initContainers") or [],
                            strict=True)]
    status = {"status": {"phase": "Succeeded", "startTime": _stamp(), "containerStatuses": done,
                         "initContainerStatuses": init}}
    kubectl("-n", namespace, "patch", "pod", pod["metadata"]["name"], "--subresource=status", "--type=merge",
            "-p", json.dumps(status))


def _hung_job(name: str, node: str) -> dict:
    """An Open MPI MPIJob whose workers are kwok's and whose launcher is bound to the hanging node."""
    job = simulated_mpijob(name, workers=1, launcher_runs=None)
    spec = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    spec["nodeName"] = node
    spec["tolerations"] = [{"operator": "Exists"}]
    return job


def test_log_reads_apart_a_hanging_kubelet_holds_no_reconcile(kubectl, kubeconfig, start_operator, namespace,
                                                              hanging_node):
    """HUNG launchers (as many as the reconcile threads) exit 0 on a node whose kubelet hangs: the
    verdict of each waits on its log, the API server's relay to that node hangs. Another MPIJob made
    then has its status written within a second; the hanging reads end, after about a minute of
    tries, in the outcome of a log that cannot be read (no loss seen: Succeeded, said so, with a
    Warning Event). (Before: the reads ran in the 4 reconcile threads, up to 15 s a try, 7 tries: no
    other MPIJob was reconciled meanwhile.)"""
    node, pit = hanging_node
    start_operator("job", namespace)
    names = [f"hung-{i}" for i in range(HUNG)]
    for name in names:
        apply(kubectl, namespace, _hung_job(name, node))
    for name in names:
        (pod,) = wait_until(lambda n=name: pods(kubectl, namespace, n, "launcher"), 60, what=f"{name}'s launcher pod")
        assert pod["spec"]["nodeName"] == node
        _exit_0(kubectl, namespace, pod)
    wait_until(lambda: pit.open_now() >= HUNG, 90, interval=0.2,
               what=f"{HUNG} log reads hanging on the node (the verdicts wait on them)")

    client = RestClient.from_kubeconfig(kubeconfig, qps=0, burst=1)
    path = f"/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs"
    t0 = time.monotonic()
    client.request("POST", path, body=simulated_mpijob("other", workers=1, launcher_runs=None))
    written = None
    while time.monotonic() - t0 < 30:
        if (client.request("GET", f"{path}/other").get("status") or {}).get("conditions"):
            written = time.monotonic() - t0
            break
        time.sleep(0.02)
    hanging = pit.open_now()
    print(f"\n[log_reads_apart] {HUNG} log reads hanging ({hanging} still open): another MPIJob's status "
          f"written {written if written is None else round(written, 2)}s after its create")
    assert written is not None and written < 1.0, f"the status written after {written}s"
    assert hanging >= 1, "no read was hanging any more: the test proved nothing"
    assert not any(conditions(kubectl, namespace, n).get("Succeeded") for n in names)

    for name in names:  # the verdict's path for a log that cannot be read: no loss seen -> a success said so
        done = wait_condition(kubectl, namespace, name, "Succeeded", timeout=240)
        assert "the launcher's log could not be read" in done["message"], done
        # (the Event follows the status write that made the condition: wait for it, do not race it)
        wait_until(lambda n=name: any(e["reason"] == "LauncherLogUnreadable" and e["type"] == "Warning"
                                      for e in events(kubectl, namespace, n)),
                   30, what=f"{name}'s LauncherLogUnreadable Warning")
    assert get(kubectl, namespace, MPIJOBS, "other") is not None
    print(f"[log_reads_apart] the node accepted {pit.accepted} log reads in all for {HUNG} launcher pods")
