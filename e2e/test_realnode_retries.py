"""Retries on the real node, told apart by cause (docs/architecture.md section 10): a worker lost
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
from realnode_mpi import SSHD, apply, condition, load_images, mpijob, mpijob_events, pods, wait_finished

from testsupport.paths import CLUSTER_DIR

pytestmark = [pytest.mark.cluster, pytest.mark.realnode]
RANKS = 4
# About 10 s of computing for 4 ranks on 2 busy cores: long enough to lose a worker mid-run, short enough
# that the retried run (which starts over) ends soon.
INTERVALS = "6000000000"
_START = re.compile(r"^rank-start (\S+) (\d+\.\d+)$", re.M)


@pytest.fixture(scope="module")
def openmpi4(realnode) -> str:
    return load_images(CLUSTER_DIR, "openmpi4")["openmpi4"]


def _announcing(intervals: str = INTERVALS) -> list[str]:
    return ["mpirun", "-n", str(RANKS), "sh", "-c",
            f'echo "rank-start $(hostname) $(date +%s.%N)"; exec /opt/pi {intervals}']


def _starts(kubectl, ns: str, name: str) -> list[tuple[str, float]]:
    """(host, time) of every rank-start line in the launcher pods' current output."""
    out = []
    for p in pods(kubectl, ns, name, "launcher"):
        log = kubectl("-n", ns, "logs", p["metadata"]["name"], check=False).stdout
        out += [(m.group(1), float(m.group(2))) for m in _START.finditer(log)]
    return out


def _wait_ranks(kubectl, ns: str, name: str, after: float, timeout: float = 180) -> float:
    """The time (this machine's clock) at which the last of RANKS ranks started after `after`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        late = sorted(t for _, t in _starts(kubectl, ns, name) if t > after)
        if len(late) >= RANKS:
            return late[RANKS - 1]
        time.sleep(0.3)
    raise AssertionError(f"{RANKS} ranks of {ns}/{name} did not start again within {timeout}s")


def _worker(kubectl, ns: str, name: str, index: int) -> dict:
    (pod,) = [p for p in pods(kubectl, ns, name, "worker")
              if p["spec"].get("hostname", p["metadata"]["name"]) == f"{name}-worker-{index}"
              and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return pod


def _launcher_restarts(kubectl, ns: str, name: str) -> tuple[int, int]:
    """(launcher pods, in-place restarts of their first container)."""
    ps = pods(kubectl, ns, name, "launcher")
    return len(ps), sum(((p["status"].get("containerStatuses") or [{}])[0]).get("restartCount", 0) for p in ps)


def test_in_place_worker_lost_mid_run_ranks_run_again(kubectl, realnode, openmpi4, operator, namespace, backend):
    """A worker pod deleted while the ranks compute: mpirun fails, the worker comes back under its
    name, the launcher runs again and the MPIJob succeeds. Prints the time from the delete to all 4
    ranks running again, and how the launcher ran again (a new pod, or restarted in place)."""
    name = "lost"
    apply(kubectl, namespace, mpijob(name, "openmpi4", openmpi4, args=_announcing(), backoff=3, worker_command=SSHD))
    _wait_ranks(kubectl, namespace, name, 0)
    victim = _worker(kubectl, namespace, name, 0)
    t0 = time.time()
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    back = _wait_ranks(kubectl, namespace, name, t0) - t0
    assert wait_finished(kubectl, namespace, name, 300) == "Succeeded"
    launchers, restarts = _launcher_restarts(kubectl, namespace, name)
    restarting = condition(kubectl, namespace, name, "Restarting")
    print(f"\n[in_place] openmpi4 {backend:<11} worker deleted -> {RANKS} ranks running again {back:5.1f}s "
          f"({launchers} launcher pod(s), {restarts} in-place restart(s)); Restarting: {restarting.get('message')}")
    print("[in_place] events: " + json.dumps([e["message"] for e in mpijob_events(kubectl, namespace, name)
                                              if e["reason"] == "MPIJobRestarting"]))
