"""A chatty launcher on the real node (issue 50 item 10, `chatty_launcher`; docs/architecture.md section
9.1): `mpirun ...; rc=$?; <more than 1 MiB of output>; exit $rc`, as a launcher that evaluates,
converts or uploads after its training writes, with a worker deleted while the ranks compute. Open
MPI 5's mpirun (PRRTE) mostly exits 0 after the lost daemon, and its message lies far before the
log's end. The operator reads the log from just before the loss (`sinceTime`), scanning it as it
streams: the run is never Succeeded in the attempt the loss cut short. `pytest -s` prints what
happened.
"""

from __future__ import annotations

import time

import pytest

from testsupport.kubectl import condition_statuses
from testsupport.realnode_mpi import (
    SSHD,
    apply,
    condition,
    failed_launcher_attempts,
    launcher_logs,
    mpijob,
    pods,
    wait_finished,
    wait_launcher_running,
)
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images")]

LOST = "lost communication with a remote daemon"
# After mpirun: 2,000 lines of 712 bytes, 1.4 MB (more than the 500 lines, 256 KiB of them, that
# the operator read before).
AFTER = "i=0; while [ $i -lt 2000 ]; do printf 'eval %d: %0700d\\n' $i 0; i=$((i + 1)); done"
DONE = "chatty: done"


def _running(kubectl, ns: str, name: str) -> None:
    wait_launcher_running(kubectl, ns, name)
    deadline = time.monotonic() + 120
    while condition_statuses(kubectl, ns, name).get("Running") != "True":
        assert time.monotonic() < deadline, condition_statuses(kubectl, ns, name)
        time.sleep(0.5)


def _whole(logs: str) -> str:
    return logs if DONE in logs else ""


def _worker_0(kubectl, ns: str, name: str) -> dict:
    (w,) = [p for p in pods(kubectl, ns, name, "worker")
            if p["spec"].get("hostname", p["metadata"]["name"]) == f"{name}-worker-0"
            and not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]
    return w


@pytest.mark.parametrize("backend", ["job", "statefulset"])
def test_chatty_launcher_a_loss_behind_a_megabyte_of_output_is_never_succeeded(kubectl, realnode, mpi_image,
                                                                             start_operator, namespace, backend):
    """Worker 0 is deleted 5 s into the ranks; PRRTE loses its daemon; the launcher prints 1.4 MB and
    exits with mpirun's code. Exit 0: Failed/WorkerLostDuringRun quoting PRRTE's line; exit non-zero:
    the launcher Job retries and the next attempt finishes (Succeeded after more than one attempt).
    Never Succeeded in the attempt cut short. (Before: the last 500 lines were read, PRRTE's line
    not among them: Succeeded, "its log shows no lost daemon or rank".)"""
    flavour, name = "openmpi5", "chatty"
    start_operator(backend, namespace)
    job = mpijob(name, flavour, mpi_image(flavour), worker_command=SSHD, backoff=3,
                 args=["sh", "-c", f"mpirun -n 4 /opt/pi 20000000000; rc=$?; {AFTER}; echo '{DONE}'; exit $rc"])
    t0 = time.monotonic()
    apply(kubectl, namespace, job)
    _running(kubectl, namespace, name)
    time.sleep(5)  # the ranks compute
    victim = _worker_0(kubectl, namespace, name)
    kubectl("-n", namespace, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    result = wait_finished(kubectl, namespace, name, 400)
    logs = launcher_logs(kubectl, namespace, name)
    attempts = failed_launcher_attempts(kubectl, namespace, name) + 1
    # the attempts' logs, while their pods last (a launcher Job made afresh takes its old pods along)
    after = len(logs.split(LOST, 1)[1].encode()) if LOST in logs else 0
    if result == "Failed":
        # the container's end can be reported before its runtime has written the last of its output
        logs = wait_until(lambda: _whole(launcher_logs(kubectl, namespace, name)), 60,
                          what="the launcher's output to its last line")
        after = len(logs.split(LOST, 1)[1].encode())
        assert after > 2**20, f"only {after} bytes after PRRTE's line: the test proved nothing\n{logs[-3000:]}"
        failed = condition(kubectl, namespace, name, "Failed")
        assert failed.get("reason") == "WorkerLostDuringRun", failed
        assert f"{name}-worker-0 was lost" in failed["message"] and LOST in failed["message"], failed
        what = "mpirun exited 0: Failed/WorkerLostDuringRun quoting PRRTE"
    else:
        note = condition(kubectl, namespace, name, "Succeeded").get("message", "")
        assert attempts > 1, f"Succeeded in the attempt the loss cut short: {note}"
        assert "pi is approximately" in logs.rsplit(LOST, 1)[-1], logs[-3000:]
        what = f"mpirun exited non-zero: retried, Succeeded after {attempts} attempts"
    print(f"\n[chatty_launcher] {flavour} {backend:<11} {after / 2**20:.1f} MiB after PRRTE's line; {what}; "
          f"{time.monotonic() - t0:5.1f}s after submit")
