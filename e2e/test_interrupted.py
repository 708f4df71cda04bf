"""Attempts a suspend or a disruption ended, on the real node (issue 50 items 1, 2 and 4;
docs/architecture.md section 11, "An attempt a suspend or a disruption ended" and "The record of each
attempt's end"). Open MPI 5, whose mpirun exits 0 on SIGTERM and after losing a daemon, both backends,
`backoffLimit: 0`: such an attempt is neither a finish nor a counted failure, and the run ends
`Succeeded` with pi from every rank.

- preempted: `suspend: true` patched 8 s into the ranks (Kueue's preemption), resumed 15 s later:
  never Succeeded nor Failed while suspended.
- evicted_worker: worker 1 alone evicted through the Eviction API 6 s into the ranks.
- drained_while_away: the operator SIGKILLed, the launcher evicted through the Eviction API (what
  `kubectl drain` sends for it) while it is down, the operator started again: the launcher pod was
  held for its record (its finalizer), so the run is retried free.
`pytest -s` prints each run's times and events."""

from __future__ import annotations

import json
import time

import pytest

from testsupport.kubectl import condition_statuses, get, namespaced_service_account_kubeconfig
from testsupport.realnode_mpi import (
    SSHD,
    apply,
    condition,
    launcher_logs,
    mpijob,
    mpijob_events,
    pods,
    rank_hosts,
    ranks_started,
    running_worker,
    wait_finished,
)
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images")]
RANKS = 4
FLAVOUR = "openmpi5"
FINALIZER = "mpijob-operator.dev/attempt-record"
# About 25-30 s of computing for 4 ranks on the busy cores: long enough to stop a run mid-way.
ARGS = ["mpirun", "-n", str(RANKS), "sh", "-c", 'echo "rank-start $(hostname)"; exec /opt/pi 12000000000']


def _evict(kubectl, ns: str, pod: str) -> None:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", "-", input=json.dumps(body))


def _never_ended_for(kubectl, ns: str, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conds = condition_statuses(kubectl, ns, name)
        assert conds.get("Succeeded") != "True" and conds.get("Failed") != "True", conds
        time.sleep(0.5)


def _succeeded_every_rank(kubectl, ns: str, name: str, timeout: float = 420) -> list[str]:
    result = wait_finished(kubectl, ns, name, timeout)
    logs = launcher_logs(kubectl, ns, name)
    msgs = [e["message"] for e in mpijob_events(kubectl, ns, name) if e["reason"] == "MPIJobRestarting"]
    assert result == "Succeeded", (condition(kubectl, ns, name, "Failed"), msgs, logs[-3000:])
    assert "pi is approximately 3.14" in logs, logs[-3000:]
    assert sorted(rank_hosts(logs)) == list(range(RANKS)), logs[-3000:]
    assert not any("; counted" in m for m in msgs), msgs
    return msgs


def _done(kubectl, ns: str, name: str, label: str, since: str, t0: float) -> list[str]:
    """Succeeded with pi from every rank, no pod held; prints how long after `since` (at `t0`)."""
    msgs = _succeeded_every_rank(kubectl, ns, name)
    print(f"\n{label} Succeeded {time.time() - t0:.1f}s after {since}; events: {json.dumps(msgs)}")
    _no_pod_held(kubectl, ns, name)
    return msgs


def _no_pod_held(kubectl, ns: str, name: str) -> None:
    """Once judged, no launcher pod keeps the finalizer (none would hang Terminating). The release
    follows the status write that judged it (the executor writes the status first): waited for."""
    def held() -> list[str]:
        return [p["metadata"]["name"] for p in pods(kubectl, ns, name, "launcher")
                if FINALIZER in (p["metadata"].get("finalizers") or [])]
    wait_until(lambda: not held(), 30, interval=0.5, what="every launcher pod released")


@pytest.fixture
def openmpi5(mpi_image) -> str:
    return mpi_image(FLAVOUR)


@pytest.fixture
def op(start_operator, kubectl, namespace, backend, tmp_path):
    """The operator for `namespace` alone under the ServiceAccount of manifests/rbac-namespaced/: the local
    cluster is shared, and its cluster-wide admission policy on the operator's pod writes is whichever
    checkout applied manifests/rbac last (this one's lets it remove its finalizer:
    e2e/test_pods_patch.py checks that policy). Returns a function that starts one (again)."""
    kc = namespaced_service_account_kubeconfig(kubectl, namespace, tmp_path / "kubeconfig")

    def start(name: str = "op"):
        return start_operator(backend, namespace, f"--leader-election-namespace={namespace}", kubeconfig=kc,
                              name=name)

    yield start  # (the namespace fixture releases a pod a failed test left held)



def _start(kubectl, ns: str, name: str, image: str) -> None:
    apply(kubectl, ns, mpijob(name, FLAVOUR, image, args=ARGS, backoff=0, worker_command=SSHD))
    wait_until(lambda: ranks_started(kubectl, ns, name) >= RANKS, 240, interval=0.3, what=f"{RANKS} ranks computing")


def test_preempted(kubectl, realnode, openmpi5, op, namespace, backend):
    op()
    name = "preempted"
    _start(kubectl, namespace, name, openmpi5)
    time.sleep(8)
    t0 = time.time()
    kubectl("-n", namespace, "patch", "mpijob", name, "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
    _never_ended_for(kubectl, namespace, name, 15)
    assert condition_statuses(kubectl, namespace, name).get("Suspended") == "True"
    kubectl("-n", namespace, "patch", "mpijob", name, "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
    _done(kubectl, namespace, name, f"[preempted] {FLAVOUR} {backend:<11}", "the suspend", t0)


def test_evicted_worker(kubectl, realnode, openmpi5, op, namespace, backend):
    op()
    name = "evicted"
    _start(kubectl, namespace, name, openmpi5)
    time.sleep(6)
    t0 = time.time()
    _evict(kubectl, namespace, running_worker(kubectl, namespace, name, 1)["metadata"]["name"])
    msgs = _done(kubectl, namespace, name, f"[evicted_worker] {FLAVOUR} {backend:<11}", "the eviction", t0)
    assert any(f"worker {name}-worker-1 was disrupted" in m and "not counted" in m for m in msgs), msgs


def test_drained_while_away(kubectl, realnode, openmpi5, op, namespace, backend):
    first = op()
    name = "away"
    _start(kubectl, namespace, name, openmpi5)
    time.sleep(6)
    (launcher,) = [p for p in pods(kubectl, namespace, name, "launcher") if p["status"].get("phase") == "Running"]
    assert FINALIZER in launcher["metadata"].get("finalizers", []), launcher["metadata"]
    first.kill()
    t0 = time.time()
    _evict(kubectl, namespace, launcher["metadata"]["name"])
    # the launcher's mpirun ends on the SIGTERM; its pod, deleted, stays (held) until the operator is back
    wait_until(lambda: (get(kubectl, namespace, "pod", launcher["metadata"]["name"]) or {}).get("status", {})
               .get("phase") in ("Succeeded", "Failed"), 90, interval=0.3, what="the evicted launcher to end")
    time.sleep(3)  # the Job controller records it meanwhile (Complete on an exit 0)
    still = get(kubectl, namespace, "pod", launcher["metadata"]["name"])
    assert still is not None and still["metadata"].get("deletionTimestamp"), still
    op("op2")
    msgs = _succeeded_every_rank(kubectl, namespace, name)
    print(f"\n[drained_while_away] {FLAVOUR} {backend:<11} launcher exited "
          f"{still['status']['containerStatuses'][0]['state'].get('terminated', {}).get('exitCode')}; "
          f"Succeeded {time.time() - t0:.1f}s after the eviction; events: {json.dumps(msgs)}")
    assert any(f"launcher pod {launcher['metadata']['name']} was disrupted" in m and "not counted" in m
               for m in msgs), msgs
    assert get(kubectl, namespace, "pod", launcher["metadata"]["name"]) is None
    _no_pod_held(kubectl, namespace, name)


def test_evicted_after_finish(kubectl, realnode, openmpi5, op, namespace, backend):
    """The operator SIGKILLed while the ranks compute; the launcher finishes (pi from every rank, exit 0),
    then is evicted through the Eviction API (it gets DisruptionTarget though it had Succeeded), before
    any verdict was written; the operator started again: the pod, held, shows it ended by itself (its
    end written before its delete), so the MPIJob is Succeeded with that one attempt, not run again."""
    first = op()
    name = "finished"
    _start(kubectl, namespace, name, openmpi5)
    (launcher,) = [p for p in pods(kubectl, namespace, name, "launcher") if p["status"].get("phase") == "Running"]
    first.kill()
    pod = launcher["metadata"]["name"]
    wait_until(lambda: (get(kubectl, namespace, "pod", pod) or {}).get("status", {}).get("phase") == "Succeeded",
               240, interval=0.5, what="the launcher to finish")
    logs = launcher_logs(kubectl, namespace, name)  # (read now: the evicted pod goes once judged)
    assert "pi is approximately 3.14" in logs and sorted(rank_hosts(logs)) == list(range(RANKS)), logs[-3000:]
    _evict(kubectl, namespace, pod)
    evicted = get(kubectl, namespace, "pod", pod)
    assert evicted is not None and any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])
    t0 = time.time()
    op("op2")
    result = wait_finished(kubectl, namespace, name, 240)
    msgs = [e["message"] for e in mpijob_events(kubectl, namespace, name) if e["reason"] == "MPIJobRestarting"]
    print(f"\n[evicted_after_finish] {FLAVOUR} {backend:<11} {result} {time.time() - t0:.1f}s after the restart; "
          f"events: {json.dumps(msgs)}")
    assert result == "Succeeded", condition(kubectl, namespace, name, "Failed")
    assert not msgs, msgs  # no attempt announced: the one that finished is the verdict
    _no_pod_held(kubectl, namespace, name)
    job = get(kubectl, namespace, "mpijobs.kubeflow.org", name)
    assert (job["status"]["replicaStatuses"].get("Launcher") or {}).get("failed", 0) == 0, job["status"]
