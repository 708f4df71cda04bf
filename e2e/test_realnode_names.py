"""names_resolve_first (issue 50 item 0), on the real node: launchers as users write them,
`command: [mpirun, -n, 4, /opt/pi]` (upstream's examples/v2beta1/pi/pi.yaml sets `command:`), which
replaces the image's entrypoint and its lookup loop, with the default launcherCreationPolicy
(AtStartup): the launcher's container must not start before every worker's name resolves, which the
operator's init container mpijob-wait-for-workers sees to (reconcilers/namewait.py,
docs/architecture.md 4.1). Before it, 7 runs in 12 failed at start (`ssh: Could not resolve
hostname`). backoffLimit 0: a start that fails ends the run Failed, no retry hides it.

NAMES_RUNS (default 3) runs one after another per MPI and backend; `pytest -s` prints each run."""

from __future__ import annotations

import os
import time

import pytest

from reconcilers.namewait import INIT_CONTAINER
from testsupport.realnode_mpi import (
    apply,
    condition,
    launcher_logs,
    mpijob,
    pods,
    wait_finished,
)

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images")]
RUNS = int(os.environ.get("NAMES_RUNS", "3"))


def _run(kubectl, ns: str, name: str, flavour: str, image: str, law: bool) -> tuple[str, str]:
    """One MPIJob whose launcher's command is mpirun itself (2 slots on each host: 2 workers, and the
    launcher with runLauncherAsWorker, whose own name is waited for too): (outcome, what to print)."""
    hosts = 3 if law else 2
    job = mpijob(name, flavour, image, args=[], launcher_as_worker=law)
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher.pop("args")
    launcher["command"] = ["mpirun", "-n", str(2 * hosts), "/opt/pi"]
    t0 = time.monotonic()
    apply(kubectl, ns, job)
    result = wait_finished(kubectl, ns, name, 300)
    wall = time.monotonic() - t0
    logs = launcher_logs(kubectl, ns, name)
    launchers = pods(kubectl, ns, name, "launcher")
    waited = ""
    for p in launchers:
        r = kubectl("-n", ns, "logs", p["metadata"]["name"], "-c", INIT_CONTAINER, check=False)
        waited = (r.stdout.strip().splitlines() or [""])[-1] if r.returncode == 0 else "(no init container)"
    if result != "Succeeded":
        why = condition(kubectl, ns, name, "Failed").get("message", "")
        tail = [ln for ln in logs.splitlines() if "resolve" in ln or "daemon" in ln][:2]
        return result, f"{result} after {wall:.1f}s: {why[:200]} | {' / '.join(tail)}"
    assert len(launchers) == 1, "the launcher was retried"
    assert "pi is approximately 3.14159" in logs and f"{2 * hosts} ranks on {hosts} hosts" in logs, logs
    return result, f"Succeeded in {wall:.1f}s; {waited}"


@pytest.mark.parametrize(("flavour", "law"), [("openmpi4", False), ("openmpi5", False), ("openmpi5", True)],
                         ids=["openmpi4", "openmpi5", "openmpi5-launcher-as-worker"])
def test_names_resolve_first_mpirun_as_command_succeeds_every_run(kubectl, realnode, mpi_image, operator,
                                                                  namespace, backend, flavour, law):
    image = mpi_image(flavour)
    outcomes = []
    for i in range(RUNS):
        result, said = _run(kubectl, namespace, f"nrf-{flavour[-1]}{'w' if law else ''}-{i}", flavour, image, law)
        mode = "launcher-as-worker" if law else "workers"
        print(f"\n[names] {flavour} {backend:<11} {mode:<18} run {i + 1}/{RUNS}: {said}")
        outcomes.append(result)
    failed = sum(r != "Succeeded" for r in outcomes)
    assert failed == 0, f"{failed} of {RUNS} runs with `command: [mpirun, ...]` did not succeed"


def test_names_resolve_first_names_that_never_resolve_are_named(kubectl, realnode, mpi_image, start_operator,
                                                               namespace, backend):
    """Workers that cannot be scheduled have no address, so no name: after --launcher-names-wait the
    launcher's init container exits 1 naming both hosts (its container never started), and the
    MPIJob's Failed message (backoffLimit 0) quotes it, as a real kubelet reports the termination."""
    start_operator(backend, namespace, "--launcher-names-wait=6")
    name = "nrf-stuck"
    job = mpijob(name, "openmpi5", mpi_image("openmpi5"), args=[])
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher.pop("args")
    launcher["command"] = ["mpirun", "-n", "4", "/opt/pi"]
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"names-resolve-first": "nowhere"}
    apply(kubectl, namespace, job)
    assert wait_finished(kubectl, namespace, name, 120) == "Failed"
    message = condition(kubectl, namespace, name, "Failed").get("message", "")
    hosts = [f"{name}-worker-{i}.{name}.{namespace}.svc" for i in range(2)]
    assert f"do not resolve (getent hosts): {hosts[0]} {hosts[1]};" in message, message
    (pod,) = pods(kubectl, namespace, name, "launcher")
    (main,) = pod["status"]["containerStatuses"]
    assert "running" not in main["state"] and "terminated" not in main["state"], main  # mpirun never started
    print(f"\n[names] {backend:<11} unresolvable workers: {message}")
