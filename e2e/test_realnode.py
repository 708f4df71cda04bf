"""The real node of the local cluster (hack/realnode/): containerd + runc + CNI bridge + kubelet +
CoreDNS, and the locally built images. These tests need no operator: plain pods prove that pods
on the bridge find each other by the operator's DNS names and that `mpirun` runs across them.
Skipped, with the reason, where the machine cannot run a real node."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from testsupport.kubectl import release_held_pods
from testsupport.paths import CLUSTER_DIR, ROOT
from testsupport.realnode_mpi import ON_REAL_NODE

NODE = "realnode"
LABEL = "mpijob-operator.dev/real-node"

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]



def test_real_node_is_labelled_tainted_and_not_kwok(kubectl, realnode):
    node = json.loads(kubectl("get", "node", realnode, "-o", "json").stdout)
    assert node["metadata"]["labels"].get(LABEL) == "true"
    assert {"key": LABEL, "value": "true", "effect": "NoSchedule"} in node["spec"].get("taints", [])
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    images = {n for i in node["status"].get("images", []) for n in i.get("names", [])}
    assert "localhost/mpi-pi:latest" in images, images


def _smoke(ns: str, backend: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(ROOT / "hack" / "realnode" / "smoke-test.sh")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CLUSTER_DIR": str(CLUSTER_DIR), "NS": ns, "BACKEND": backend, **env},
    )


@pytest.mark.parametrize("backend", ["pods", "statefulset", "job"])
def test_mpirun_across_pods_found_by_dns(realnode, backend):
    """Two sshd workers (plain Pods, or the operator's StatefulSet or Indexed Job rendered by
    hand) and a launcher running `mpirun -n 4 --hostfile /etc/mpi/hostfile /opt/pi` over SSH,
    all found by their DNS names: hack/realnode/smoke-test.sh."""
    p = _smoke(f"realnode-smoke-{backend[:3]}-{uuid.uuid4().hex[:6]}", backend)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, f"smoke test failed:\n{out}\n{err}"
    assert "pi is approximately 3.14159" in out and "4 ranks on 2 hosts" in out, out
    assert "on pi-worker-0" in out and "on pi-worker-1" in out, out


@pytest.mark.parametrize("backend", ["statefulset", "job"])
def test_worker_killed_mid_run_retry_succeeds(kubectl, realnode, backend):
    """Plain pods, no operator. A worker deleted during `mpirun` fails the launcher's attempt. A
    StatefulSet brings the worker back under the same name and the launcher Job's retry succeeds.
    An Indexed Job does not: the stopped sshd exits 0, the pod ends Succeeded, the index counts as
    completed and is never run again (with `podReplacementPolicy: Failed`, as the operator's worker
    Job has: without it the Job controller counts a deleted pod still running as failed and runs
    its index again before the kubelet reports how it ended, a race CI lost once). That is what a
    real node does, and why the operator recreates such a worker Job itself
    (e2e/test_realnode_mpijob.py shows it doing so)."""
    ns = f"realnode-kill-{backend[:3]}-{uuid.uuid4().hex[:6]}"
    p = _smoke(ns, backend, KEEP="1", PI_INTERVALS="40000000000")  # ~25 s of computing
    try:
        sel = "training.kubeflow.org/job-role=worker," + (
            "statefulset.kubernetes.io/pod-name=pi-worker-0" if backend == "statefulset"
            else "batch.kubernetes.io/job-completion-index=0")
        # Only once a rank runs there: deleted earlier (mpirun's ssh still retrying while the
        # workers start), a StatefulSet's worker is back before mpirun reaches it and nothing fails
        # (seen in CI once in 5 runs).
        _wait_rank_on(kubectl, ns, sel)
        kubectl("-n", ns, "delete", "pod", "-l", sel, "--wait=false")
        if backend == "job":
            _index_completed_and_never_rerun(kubectl, ns)
            return
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, f"no successful retry:\n{out}\n{err}"
        assert "4 ranks on 2 hosts" in out
        failed = kubectl("-n", ns, "get", "job", "pi-launcher", "-o", "jsonpath={.status.failed}").stdout
        assert failed and int(failed) >= 1, "the killed worker did not fail the first attempt"
    finally:
        p.kill()
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        release_held_pods(kubectl, ns)


def _wait_rank_on(kubectl, ns: str, selector: str, timeout: float = 120) -> None:
    """Until a process of /opt/pi (a rank) runs in the pod `selector` picks. The pattern is written
    so that it does not match the grep looking for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        name = kubectl("-n", ns, "get", "pods", "-l", selector, "-o", "jsonpath={.items[0].metadata.name}",
                       check=False).stdout.strip()
        if name:
            r = kubectl("-n", ns, "exec", name, "--", "sh", "-c", "grep -ls '/opt/p[i]' /proc/[0-9]*/cmdline",
                        check=False)
            if r.stdout.strip():
                return
        time.sleep(0.5)
    raise AssertionError(f"no rank of /opt/pi ran in the pod of {selector} within {timeout:.0f}s")


def _index_completed_and_never_rerun(kubectl, ns: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = kubectl("-n", ns, "get", "job", "pi-worker", "-o", "jsonpath={.status.completedIndexes}").stdout
        if done:
            break
        time.sleep(0.5)
    # completed: its pod (deleted, so gone by now) exited 0, as sshd does on SIGTERM
    assert done == "0", f"the deleted worker's index was not counted as completed: {done!r}"
    for _ in range(10):  # and the Job controller never runs index 0 again
        phases = kubectl("-n", ns, "get", "pods", "-l", "batch.kubernetes.io/job-completion-index=0",
                         "-o", "jsonpath={.items[*].status.phase}").stdout.split()
        assert not {"Pending", "Running"} & set(phases), phases
        time.sleep(1)


BRIDGE = "mpijob-br0"  # the real node's pod bridge, its gateway CoreDNS's address (hack/lib/realnode.sh)


def _sleeper(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {**ON_REAL_NODE, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "localhost/mpi-pi:latest", "imagePullPolicy": "IfNotPresent",
                                     "command": ["sleep", "infinity"]}]}}


def _host_veth(kubectl, ns: str, pod: str) -> str:
    """The host side of the pod's eth0: the interface whose index is the pod's eth0 `iflink`."""
    iflink = kubectl("-n", ns, "exec", pod, "--", "cat", "/sys/class/net/eth0/iflink").stdout.strip()
    (name,) = [d.name for d in Path("/sys/class/net").iterdir()
               if (d / "ifindex").exists() and (d / "ifindex").read_text().strip() == iflink]
    return name


def _lookup(kubectl, ns: str, pod: str) -> tuple[int, float]:
    """A name lookup in `pod` through its resolv.conf (CoreDNS at the gateway): exit code, seconds."""
    t = time.monotonic()
    r = kubectl("-n", ns, "exec", pod, "--", "timeout", "4", "getent", "hosts",
                "kubernetes.default.svc.cluster.local", check=False, timeout=30)
    return r.returncode, time.monotonic() - t


# Alone (make test's second phase): it gives a port of the real node's bridge, which every pod there
# uses, the lowest MAC address there can be.
@pytest.mark.exclusive
def test_gateway_keeps_its_mac_when_the_pod_holding_the_lowest_goes(kubectl, realnode, namespace):
    """A Linux bridge without a MAC address of its own takes the lowest of its ports'. The pod whose
    host-side veth held it took the gateway's address with it when it was deleted, and every other
    pod's ARP entry for the gateway, their DNS server, pointed nowhere until it expired: 30-45 s of
    name lookups timing out right after a pod was replaced (a launcher's ssh to a replaced worker,
    issue 35; 24 of 386 lookups lost over 29.9 s in a churn of 12 pods). hack/realnode/up.sh pins the
    bridge's MAC. Here the victim's veth is given the lowest MAC there can be, the other pod learns the
    gateway's, the victim goes, and the other pod's next lookup must answer at once."""
    mac = Path(f"/sys/class/net/{BRIDGE}/address").read_text().strip()
    for name in ("asker", "victim"):
        kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(_sleeper(name)))
    kubectl("-n", namespace, "wait", "--for=condition=Ready", "pod/asker", "pod/victim", "--timeout=120s", timeout=130)
    subprocess.run(["ip", "link", "set", _host_veth(kubectl, namespace, "victim"), "address", "02:00:00:00:00:01"],
                   check=True)
    code, _ = _lookup(kubectl, namespace, "asker")  # the asker's ARP entry for the gateway, fresh
    assert code == 0, "the name does not resolve from a pod at all"
    kubectl("-n", namespace, "delete", "pod", "victim", "--wait=true", timeout=60)
    code, took = _lookup(kubectl, namespace, "asker")
    assert Path(f"/sys/class/net/{BRIDGE}/address").read_text().strip() == mac, "the gateway's MAC moved"
    assert code == 0, f"the lookup after the victim's delete failed (exit {code}) in {took:.1f} s"
    print(f"\n[gateway] MAC {mac} kept; the lookup after the delete answered in {took:.2f} s")
