"""Retries on the real node, told apart by cause (docs/architecture.md section 11): a worker lost
mid-run and the time until every rank runs again (`in_place`), disruptions that use no retry
(`disruption`), and `restartPolicy: ExitCode` (`exit_code`). Open MPI 4 (the image the real node
always has), both worker backends. `pytest -s` prints each figure.

The ranks announce themselves: the launcher runs `mpirun -n 4 sh -c 'echo rank-start <host>
<time>; exec /opt/pi N'`, so the time from a failure to all ranks running again is read off the
launcher's output (the ranks' clock is this machine's: the real node is this machine)."""

from __future__ import annotations

import json
import re
import time

import pytest

from reconcilers.failure.ledger import LEDGER
from testsupport.kubectl import get
from testsupport.paths import CLUSTER_DIR
from testsupport.realnode_mpi import (
    SSHD,
    announcing,
    apply,
    condition,
    load_images,
    mpijob,
    mpijob_events,
    pods,
    running_worker,
    wait_finished,
    wait_ranks,
)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
# `make test` runs the StatefulSet backend's disruption and exit-code cases and both backends'
# in_place case; the Job backend's disruption and exit-code cases,
# which e2e/test_retries_kwok.py also runs on kwok, are marked mpi_matrix (`make e2e-mpis`).
STS_ONLY = [pytest.param("job", marks=pytest.mark.mpi_matrix), "statefulset"]
RANKS = 4
# About 10 s of computing for 4 ranks on 2 busy cores: long enough to lose a worker mid-run, short enough
# that the retried run (which starts over) ends soon.
INTERVALS = "6000000000"


@pytest.fixture(scope="module")
def openmpi4(realnode) -> str:
    return load_images(CLUSTER_DIR, "openmpi4")["openmpi4"]


def _announcing(intervals: str = INTERVALS) -> list[str]:
    return announcing(RANKS, intervals)


def _wait_ranks(kubectl, ns: str, name: str, after: float) -> float:
    return wait_ranks(kubectl, ns, name, RANKS, after)


def _launcher_restarts(kubectl, ns: str, name: str) -> tuple[int, int]:
    """(launcher pods, in-place restarts of their first container)."""
    ps = pods(kubectl, ns, name, "launcher")
    return len(ps), sum(((p["status"].get("containerStatuses") or [{}])[0]).get("restartCount", 0) for p in ps)


def _restart_rules(kubectl, ns: str) -> bool:
    """The API server keeps a container's restartPolicy (the ContainerRestartRules gate is on)."""
    container = {"name": "c", "image": "x", "restartPolicy": "OnFailure"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": ns},
           "spec": {"restartPolicy": "Never", "containers": [container]}}
    r = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False)
    return r.returncode == 0 and json.loads(r.stdout)["spec"]["containers"][0].get("restartPolicy") == "OnFailure"


def _evict(kubectl, ns: str, pod: str) -> None:
    """What `kubectl drain` does for each pod of the node: the pods/eviction subresource."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", "-f", "-", input=json.dumps(body))


def _restarting(kubectl, ns: str, name: str) -> list[str]:
    return [e["message"] for e in mpijob_events(kubectl, ns, name) if e["reason"] == "MPIJobRestarting"]


def test_in_place_worker_lost_mid_run_ranks_run_again(kubectl, realnode, openmpi4, operator, namespace, backend):
    """A worker pod deleted while the ranks compute: mpirun fails, the worker comes back under its
    name, the launcher runs again and the MPIJob succeeds, the loss counted once (1 of 3 retries, the
    launcher Job's ledger). Where the cluster admits container restart rules, the launcher container
    restarts in place (one pod, the same launcher Job) with either backend: on the Job backend the
    worker Job is made afresh meanwhile and the Service leaves the old workers' names out. Elsewhere
    the Job backend makes the launcher Job afresh, with the new workers and not after its Job's
    backoff (docs/architecture.md section 11). The failure is named
    (attempt, exit code, counted) in an Event. Prints the time from the delete to all 4 ranks
    running again (the figures are bench/recovery.py's)."""
    name = "lost"
    apply(kubectl, namespace, mpijob(name, "openmpi4", openmpi4, args=_announcing(), backoff=3, worker_command=SSHD))
    _wait_ranks(kubectl, namespace, name, 0)
    victim = running_worker(kubectl, namespace, name, 0)
    first_launcher_job = get(kubectl, namespace, "job", f"{name}-launcher")["metadata"]["uid"]
    t0 = time.time()
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    back = _wait_ranks(kubectl, namespace, name, t0) - t0
    assert wait_finished(kubectl, namespace, name, 300) == "Succeeded"
    launchers, restarts = _launcher_restarts(kubectl, namespace, name)
    msgs = _restarting(kubectl, namespace, name)
    print(f"\n[in_place] openmpi4 {backend:<11} worker deleted -> {RANKS} ranks running again {back:5.1f}s "
          f"({launchers} launcher pod(s), {restarts} in-place restart(s))\n[in_place] events: {json.dumps(msgs)}")
    launcher_job = get(kubectl, namespace, "job", f"{name}-launcher")
    book = json.loads(launcher_job["metadata"]["annotations"][LEDGER])
    assert (book["failed"], book["counted"]) == (1, 1), book  # one loss, one counted retry
    in_place = _restart_rules(kubectl, namespace)
    assert (launchers, restarts) == ((1, 1) if in_place else (1, 0) if backend == "job" else (2, 0))
    assert (launcher_job["metadata"]["uid"] != first_launcher_job) == (backend == "job" and not in_place)
    how = ("the launcher restarts in place" if in_place else "the launcher Job is made afresh" if backend == "job"
           else "the launcher Job starts a new pod")
    assert any(re.search(r"launcher attempt 1 \(pod \S+, node \S+\) failed: exit code \d+.*counted, 1 of 3 retries", m)
               and how in m for m in msgs), msgs
    assert not any("2 of 3 retries" in m for m in msgs), msgs
    # the delete ended the worker (its sshd, stopped, exits 0): never told as an exit of its own
    assert any(f"worker {name}-worker-0 (pod " in m and "was lost (deleted)" in m for m in msgs), msgs
    assert not any("ended with exit code 0" in m for m in msgs), msgs


@pytest.mark.parametrize("backend", STS_ONLY)
def test_disruption_evicted_launcher_then_worker_with_backoff_limit_0_succeeds(
        kubectl, realnode, openmpi4, start_operator, namespace, backend):
    """backoffLimit 0, the Eviction API as `kubectl drain` uses it: the launcher pod evicted mid-run
    (the Job ignores it and makes a new pod), then a worker evicted mid-run (mpirun loses the host
    and fails; the operator saw the worker's DisruptionTarget while that attempt ran and does not
    count it). The MPIJob succeeds, and says why it restarted each time. Prints the times from each
    eviction to all ranks running again."""
    start_operator(backend, namespace)
    name = "drained"
    apply(kubectl, namespace, mpijob(name, "openmpi4", openmpi4, args=_announcing(), backoff=0, worker_command=SSHD))
    _wait_ranks(kubectl, namespace, name, 0)
    (first,) = pods(kubectl, namespace, name, "launcher")
    t0 = time.time()
    _evict(kubectl, namespace, first["metadata"]["name"])
    launcher_back = _wait_ranks(kubectl, namespace, name, t0) - t0
    t1 = time.time()
    _evict(kubectl, namespace, running_worker(kubectl, namespace, name, 1)["metadata"]["name"])
    worker_back = _wait_ranks(kubectl, namespace, name, t1) - t1
    result = wait_finished(kubectl, namespace, name, 300)
    msgs = _restarting(kubectl, namespace, name)
    print(f"\n[disruption] openmpi4 {backend:<11} launcher evicted -> ranks running again {launcher_back:5.1f}s; "
          f"worker evicted -> {worker_back:5.1f}s\n[disruption] events: {json.dumps(msgs)}")
    assert result == "Succeeded", condition(kubectl, namespace, name, "Failed")
    assert any(f"launcher pod {first['metadata']['name']} was disrupted (EvictionByEvictionAPI" in m
               and "not counted" in m for m in msgs), msgs
    assert any(f"worker {name}-worker-1 was disrupted (EvictionByEvictionAPI" in m and "; not counted" in m
               for m in msgs), msgs
    lj = get(kubectl, namespace, "job", f"{name}-launcher")
    assert lj["status"].get("failed", 0) <= 1 and lj["spec"]["backoffLimit"] >= 2, (lj["spec"], lj["status"])


@pytest.mark.parametrize("backend", STS_ONLY)
@pytest.mark.parametrize(("script", "backoff", "reason", "attempts"), [
    ("exit 3", 3, "PermanentExitCode3", 1),  # 1-127: permanent, with 3 retries left
    # 137: retried once, counted. SIGKILL to a child: the container's first process (PID 1 of its
    # namespace) ignores a SIGKILL sent from inside. `$$$$`: Kubernetes reads `$$` in args as `$`.
    ("sh -c 'kill -9 $$$$'; exit $?", 1, "BackoffLimitExceeded", 2),
])
def test_exit_code_launcher_exits(kubectl, realnode, openmpi4, start_operator, namespace, backend, script, backoff,
                                  reason, attempts):
    """restartPolicy ExitCode, a launcher alone (no workers): exit 3 fails the MPIJob at once, the
    reason saying the code is permanent and the message naming it; killed by SIGKILL (137) it is
    retried, in place where the StatefulSet backend restarts it so, else in a new pod, and counted."""
    start_operator(backend, namespace)
    name = "code"
    job = mpijob(name, "openmpi4", openmpi4, args=["sh", "-c", script], backoff=backoff, workers=0)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "ExitCode"
    apply(kubectl, namespace, job)
    assert wait_finished(kubectl, namespace, name, 120) == "Failed"
    failed = condition(kubectl, namespace, name, "Failed")
    code = 3 if script == "exit 3" else 137
    assert failed["reason"] == reason and f"code {code}" in failed["message"], failed
    launchers, restarts = _launcher_restarts(kubectl, namespace, name)
    assert launchers + restarts == attempts, (launchers, restarts)
    if attempts > 1:
        msgs = _restarting(kubectl, namespace, name)
        # 137: the kubelet's signal named beside the code (reconcilers/explain/ends.py)
        assert any(f"exit code {code} (signal 9, SIGKILL); counted, 1 of 1 retries" in m for m in msgs), msgs
