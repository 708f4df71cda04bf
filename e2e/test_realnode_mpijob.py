"""MPIJobs that really run `mpirun` on the real node, through the operator, with both worker
backends (hack/realnode/pi-mpijob.yaml: 2 workers x 2 slots, `mpirun -n 4` of /opt/pi).

The operator runs as a process with the ServiceAccount of manifests/ (fixtures in e2e/conftest.py).
Skipped, with the reason, only where the machine cannot run a real node. The wall time from
submission to Succeeded is printed (`pytest -s`)."""

from __future__ import annotations

import copy
import json
import time

import pytest
import yaml

from testsupport.kubectl import role_pods, wait_finished
from testsupport.paths import ROOT
from testsupport.realnode_mpi import failed_launcher_attempts

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
MANIFEST = ROOT / "hack" / "realnode" / "pi-mpijob.yaml"


def _mpijob(name: str, *, args: list[str] | None = None, backoff: int | None = None,
            policy: str | None = None, worker_command: list[str] | None = None) -> dict:
    job = copy.deepcopy(yaml.safe_load(MANIFEST.read_text()))
    job["metadata"]["name"] = name
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    if args is not None:
        launcher["args"] = args
    if backoff is not None:
        job["spec"]["runPolicy"]["backoffLimit"] = backoff
    if policy is not None:
        job["spec"]["launcherCreationPolicy"] = policy
    if worker_command is not None:
        w = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        w["command"] = worker_command
        w.pop("args", None)
    return job


def _launcher_logs(kubectl, ns: str, name: str) -> str:
    """The output of every launcher pod (attempt) of the MPIJob, through the API server."""
    return "\n".join(kubectl("-n", ns, "logs", p["metadata"]["name"]).stdout
                     for p in role_pods(kubectl, ns, name, "launcher"))


def _wait_workers_stopped(kubectl, ns: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [p["metadata"]["name"] for p in role_pods(kubectl, ns, name, "worker")
                   if p["status"].get("phase") in ("Running", "Pending")
                   and not p["metadata"].get("deletionTimestamp")]
        if not running:
            return
        time.sleep(0.5)
    raise AssertionError(f"workers still running after the MPIJob finished: {running}")


def test_pi_by_mpirun_succeeds(kubectl, realnode, operator, namespace, backend):
    t0 = time.monotonic()
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(_mpijob("pi")))
    assert wait_finished(kubectl, namespace, "pi", 240) == "Succeeded"
    wall = time.monotonic() - t0
    logs = _launcher_logs(kubectl, namespace, "pi")
    print(f"\n[{backend}] real MPIJob submit -> Succeeded: {wall:.1f}s\n{logs}")
    assert "pi is approximately 3.14159" in logs and "4 ranks on 2 hosts" in logs, logs
    _wait_workers_stopped(kubectl, namespace, "pi")


def test_failing_program_retries_to_backoff_limit_then_fails(kubectl, realnode, operator, namespace, backend):
    """backoffLimit 1: two attempts, then Failed/BackoffLimitExceeded. The status counts both (the last
    pod restarted in place is stopped with the MPIJob, as the Job API stops an OnFailure pod)."""
    args = ["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi", "1000", "--exit-code", "1"]
    job = _mpijob("pi-fail", args=args, backoff=1)
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    assert wait_finished(kubectl, namespace, "pi-fail", 240) == "Failed"
    mpijob = json.loads(kubectl("-n", namespace, "get", "mpijobs.kubeflow.org", "pi-fail", "-o", "json").stdout)
    failed = next(c for c in mpijob["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and "failed 2 time(s)" in failed["message"], failed
    assert mpijob["status"]["replicaStatuses"]["Launcher"]["failed"] == 2, mpijob["status"]
    # both attempts ran: restarted in place (one pod, one restart) where the cluster admits container
    # restart rules, else a new pod per retry (both failed pods are kept)
    launchers = role_pods(kubectl, namespace, "pi-fail", "launcher")
    ran = sum(1 + ((p["status"].get("containerStatuses") or [{}])[0]).get("restartCount", 0) for p in launchers)
    assert ran == 2, launchers
    _wait_workers_stopped(kubectl, namespace, "pi-fail")


def test_at_startup_launcher_reaches_slow_workers(kubectl, realnode, operator, namespace, backend):
    """AtStartup: the launcher starts with the workers; their names resolve before they are Ready
    (publishNotReadyAddresses) and ssh retries until their sshd listens, 8 s late here."""
    job = _mpijob("pi-slow", policy="AtStartup", worker_command=[
        "sh", "-c", "sleep 8; exec /usr/sbin/sshd -De -f /home/mpiuser/.sshd_config"])
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    assert wait_finished(kubectl, namespace, "pi-slow", 240) == "Succeeded"
    assert "4 ranks on 2 hosts" in _launcher_logs(kubectl, namespace, "pi-slow")


SSHD = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]  # as upstream's examples: `command:`


def _wait_launcher_running(kubectl, ns: str, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # until the ranks are computing
        if any(p["status"].get("phase") == "Running" for p in role_pods(kubectl, ns, name, "launcher")):
            return
        time.sleep(0.5)
    raise AssertionError(f"no launcher of {ns}/{name} Running after {timeout}s")


def _ready_workers(kubectl, ns: str, name: str) -> list[dict]:
    return [p for p in role_pods(kubectl, ns, name, "worker")
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def test_worker_killed_mid_run_launcher_retries(kubectl, realnode, operator, namespace, backend):
    """A worker running sshd as its `command:` is deleted during the run: sshd exits 0 and the pod
    ends Succeeded (an Indexed Job counts its index as completed). mpirun breaks; the worker comes
    back under the same name, and the launcher Job's retry succeeds."""
    args = ["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi", "40000000000"]
    job = _mpijob("pi-kill", args=args, backoff=3, worker_command=SSHD)
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    _wait_launcher_running(kubectl, namespace, "pi-kill")
    time.sleep(5)
    # Worker 0 by hostname: a StatefulSet pod is named so, an Indexed Job pod has a random suffix.
    (victim,) = [p for p in role_pods(kubectl, namespace, "pi-kill", "worker")
                 if p["spec"].get("hostname") == "pi-kill-worker-0" and p["status"].get("phase") == "Running"]
    t0 = time.monotonic()
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    deadline = t0 + 120
    while time.monotonic() < deadline:
        ws = _ready_workers(kubectl, namespace, "pi-kill")
        if len(ws) == 2 and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in ws}:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the deleted worker did not come back Ready")
    print(f"\n[{backend}] real worker deleted -> both workers Ready again: {time.monotonic() - t0:.1f}s")
    assert wait_finished(kubectl, namespace, "pi-kill", 300) == "Succeeded"
    assert failed_launcher_attempts(kubectl, namespace, "pi-kill") >= 1, "no launcher attempt failed"
    assert "4 ranks on 2 hosts" in _launcher_logs(kubectl, namespace, "pi-kill")


@pytest.mark.parametrize("policy", ["AtStartup", "WaitForWorkersReady"])
def test_suspend_and_resume_mid_run_succeeds(kubectl, realnode, operator, namespace, backend, policy):
    """Kueue's preemption on a real node: suspended mid-run, every worker's sshd (`command:`) exits 0;
    the resume flips only `suspend`, and the run starts afresh with every worker and succeeds."""
    args = ["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi", "20000000000"]
    job = _mpijob("pi-sus", args=args, backoff=3, policy=policy, worker_command=SSHD)
    kubectl("-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
    _wait_launcher_running(kubectl, namespace, "pi-sus")
    patch = lambda v: kubectl("-n", namespace, "patch", "mpijob", "pi-sus", "--type=merge",  # noqa: E731
                              "-p", json.dumps({"spec": {"runPolicy": {"suspend": v}}}))
    patch(True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        alive = [p for p in role_pods(kubectl, namespace, "pi-sus", "worker") + role_pods(kubectl, namespace, "pi-sus",
                                                                                 "launcher")
                 if p["status"].get("phase") in ("Pending", "Running")]
        if not alive:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"pods still running while suspended: {[p['metadata']['name'] for p in alive]}")
    t0 = time.monotonic()
    patch(False)
    assert wait_finished(kubectl, namespace, "pi-sus", 300) == "Succeeded"
    print(f"\n[{backend}/{policy}] resume -> Succeeded on the real node: {time.monotonic() - t0:.1f}s")
    logs = _launcher_logs(kubectl, namespace, "pi-sus")
    assert "pi is approximately 3.14159" in logs and "4 ranks on 2 hosts" in logs, logs
