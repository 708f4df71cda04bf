"""A drain of the real node while an MPIJob's ranks compute (issue 41 item 10; docs/architecture.md
section 11): `kubectl drain` evicts every pod of the MPIJob, launcher included, with the Eviction API.
Open MPI 5's mpirun may exit 0 on the SIGTERM (PRRTE's lost-daemon line in its log), which completes
the launcher Job: that is no finish, nor a counted failure, whatever the exit code. With
`backoffLimit: 0` the run goes on once the node is uncordoned and ends `Succeeded`, pi from every rank.

The drain takes only this MPIJob's pods (`--pod-selector`), but it cordons the whole node while it
runs: the module is marked `exclusive`: `make test` runs it alone, apart from the tests that share the node."""

from __future__ import annotations

import json
import time

import pytest

from testsupport.kubectl import condition_statuses
from testsupport.realnode_mpi import (
    SSHD,
    apply,
    condition,
    launcher_logs,
    mpijob,
    mpijob_events,
    rank_hosts,
    ranks_started,
    wait_finished,
)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images"),
              pytest.mark.exclusive]
REAL_NODE = "realnode"
RANKS = 4
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def _cases() -> list:
    core = {("openmpi5", "statefulset"), ("openmpi5", "job")}
    return [pytest.param(f, b, id=f"{f}-{b}", marks=() if (f, b) in core else (pytest.mark.mpi_matrix,))
            for f in ("openmpi5", "openmpi4") for b in ("job", "statefulset")]


def _wait(what: str, check, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.mark.parametrize(("flavour", "backend"), _cases())
def test_drained_node_every_pod_evicted_mid_run_then_uncordoned_succeeds(
        kubectl, realnode, mpi_image, operator, namespace, backend, flavour):
    """Every pod of a running MPIJob (backoffLimit 0) evicted by `kubectl drain` while its 4 ranks
    compute for about 30 s; the node uncordoned once they are gone: never Failed, Succeeded with pi
    from every rank, the launcher's end announced as not counted."""
    name = "drain"
    args = ["mpirun", "-n", str(RANKS), "sh", "-c", 'echo "rank-start $(hostname)"; exec /opt/pi 18000000000']
    apply(kubectl, namespace, mpijob(name, flavour, mpi_image(flavour), args=args, backoff=0, worker_command=SSHD))
    _wait(f"{RANKS} ranks computing", lambda: ranks_started(kubectl, namespace, name) >= RANKS, 240)
    time.sleep(3)  # the ranks compute: the drain cuts them short
    t0 = time.time()
    try:
        r = kubectl("drain", REAL_NODE, f"--pod-selector={JOB_NAME_LABEL}={name}", "--ignore-daemonsets",
                    "--delete-emptydir-data", "--timeout=180s", check=False)
        assert r.returncode == 0, r.stderr
        drained = time.time() - t0
        conds = condition_statuses(kubectl, namespace, name)
        assert conds.get("Failed") != "True" and conds.get("Succeeded") != "True", conds
    finally:
        kubectl("uncordon", REAL_NODE)
    result = wait_finished(kubectl, namespace, name, 420)
    logs = launcher_logs(kubectl, namespace, name)
    msgs = [e["message"] for e in mpijob_events(kubectl, namespace, name) if e["reason"] == "MPIJobRestarting"]
    print(f"\n[drained] {flavour} {backend:<11} drain took {drained:.1f}s; result {result} "
          f"{time.time() - t0:.1f}s after the drain began\n[drained] events: {json.dumps(msgs)}")
    assert result == "Succeeded", (condition(kubectl, namespace, name, "Failed"), logs[-3000:])
    assert "pi is approximately 3.14" in logs, logs[-3000:]
    assert sorted(rank_hosts(logs)) == list(range(RANKS)), logs[-3000:]
    assert any("was disrupted" in m and "not counted" in m for m in msgs), msgs
    assert not any("; counted" in m for m in msgs), msgs
