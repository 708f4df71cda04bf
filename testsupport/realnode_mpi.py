"""Helpers for MPIJobs that really run on the real node with any of the MPI images
(hack/images/build.sh: openmpi4, openmpi5, mpich, intel): the manifest, waiting, the launcher's
output, the hostfile, and where the ranks ran. Used by the e2e tests and bench/recovery.py.

Ranks that announce themselves (`announcing`: each prints `rank-start <host> <time>` before it
computes) tell from the launcher's output when every rank runs again after a failure (`wait_ranks`);
their clock is this machine's, the real node being this machine."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import yaml

from testsupport.kubectl import (
    MPIJOBS,
    get,
    items,
    pod_log,
    wait_finished,  # noqa: F401 (used by the tests through this module)
)
from testsupport.kubectl import role_pods as pods
from testsupport.paths import ROOT

MANIFEST = ROOT / "hack" / "realnode" / "pi-mpijob.yaml"
# The image flavours and the mpiImplementation each one needs.
IMPLEMENTATION = {"openmpi4": "OpenMPI", "openmpi5": "OpenMPI", "mpich": "MPICH", "intel": "Intel"}
SSHD = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
# A pod spec's placement on the real node: its label, and a toleration for its taint (hack/realnode/up.sh).
ON_REAL_NODE = {"nodeSelector": {"mpijob-operator.dev/real-node": "true"},
                "tolerations": [{"key": "mpijob-operator.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}]}
_RANK = re.compile(r"^rank (\d+) of (\d+) on (\S+)$", re.M)
_START = re.compile(r"^rank-start (\S+) (\d+\.\d+)$", re.M)


def load_images(cluster_dir: Path, *flavours: str) -> dict[str, str]:
    """flavour -> the image reference unique to its inputs, built if needed (cached) and imported into
    the real node's containerd (hack/realnode/images.sh)."""
    r = subprocess.run([str(ROOT / "hack" / "realnode" / "images.sh"), *flavours], capture_output=True,
                       text=True, timeout=3600, env={**os.environ, "CLUSTER_DIR": str(cluster_dir)})
    assert r.returncode == 0, f"hack/realnode/images.sh {' '.join(flavours)} failed:\n{r.stderr[-3000:]}"
    refs = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines() if line.strip()}
    assert set(flavours) <= set(refs), r.stdout
    return refs


def mpijob(name: str, flavour: str, image: str, *, args: list[str], launcher_as_worker: bool = False,
           workers: int = 2, slots: int = 2, backoff: int = 0, worker_command: list[str] | None = None,
           policy: str | None = None) -> dict:
    """hack/realnode/pi-mpijob.yaml with the flavour's image and mpiImplementation, and the launcher's
    `args` (after the image's ENTRYPOINT, which waits until the hostfile's names resolve)."""
    job = copy.deepcopy(yaml.safe_load(MANIFEST.read_text()))
    job["metadata"]["name"] = name
    spec = job["spec"]
    spec["mpiImplementation"] = IMPLEMENTATION[flavour]
    spec["slotsPerWorker"] = slots
    spec["runPolicy"]["backoffLimit"] = backoff
    if launcher_as_worker:
        spec["runLauncherAsWorker"] = True
    if policy:
        spec["launcherCreationPolicy"] = policy
    spec["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    for rtype in ("Launcher", "Worker"):
        c = spec["mpiReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]
        c["image"] = image
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["args"] = args
    if worker_command is not None:
        w = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        w["command"] = worker_command
        w.pop("args", None)
    return job


def apply(kubectl: Callable, ns: str, obj: dict) -> None:
    kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(obj))


def condition(kubectl: Callable, ns: str, name: str, ctype: str) -> dict:
    job = get(kubectl, ns, MPIJOBS, name)
    assert job is not None, f"MPIJob {ns}/{name} not found"
    return next((c for c in job.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def mpijob_events(kubectl: Callable, ns: str, name: str) -> list[dict]:
    return items(kubectl, ns, "events", fields=f"involvedObject.kind=MPIJob,involvedObject.name={name}")


def failed_launcher_attempts(kubectl: Callable, ns: str, name: str) -> int:
    """Launcher attempts that failed: those the MPIJob's status counts (`replicaStatuses.Launcher.failed`:
    in new pods, in place, and in a launcher Job made afresh after a lost worker on the Job backend,
    whose old pods went with it: docs/architecture.md 11), and no fewer than the pods show (failed
    pods and their containers' restarts in place)."""
    launchers = pods(kubectl, ns, name, "launcher")
    shown = sum(p["status"].get("phase") == "Failed" for p in launchers) + sum(
        cs.get("restartCount", 0) for p in launchers for cs in p["status"].get("containerStatuses") or [])
    job = get(kubectl, ns, MPIJOBS, name)
    assert job is not None, f"MPIJob {ns}/{name} not found"
    counted = (((job.get("status") or {}).get("replicaStatuses") or {}).get("Launcher") or {}).get("failed") or 0
    return max(counted, shown)


def launcher_logs(kubectl: Callable, ns: str, name: str) -> str:
    """The output of every launcher pod (attempt) of the MPIJob, oldest first."""
    ps = sorted(pods(kubectl, ns, name, "launcher"), key=lambda p: p["metadata"]["creationTimestamp"])
    return "\n".join(pod_log(kubectl, p) for p in ps)


def wait_launcher_running(kubectl: Callable, ns: str, name: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [p for p in pods(kubectl, ns, name, "launcher") if p["status"].get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")]
        if running:
            return running[0]
        time.sleep(0.5)
    raise AssertionError(f"no launcher of {ns}/{name} Running after {timeout}s")


def ready_workers(kubectl: Callable, ns: str, name: str) -> list[dict]:
    return [p for p in pods(kubectl, ns, name, "worker")
            if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


def hostfile_hosts(kubectl: Callable, ns: str, name: str) -> list[str]:
    """The hostfile's host names (`host slots=N` or `host:N`), as the operator wrote them."""
    cm = json.loads(kubectl("-n", ns, "get", "configmap", f"{name}-config", "-o", "json").stdout)
    lines = [ln.split()[0] for ln in cm["data"]["hostfile"].splitlines() if ln.strip()]
    return [ln.split(":")[0] for ln in lines]


def rank_hosts(output: str) -> dict[int, str]:
    """rank -> the host it reported (`rank r of N on HOST`, printed by rank 0 of /opt/pi or pi.py),
    from the last run in `output`."""
    found: dict[int, str] = {}
    for m in _RANK.finditer(output):
        found[int(m.group(1))] = m.group(3)
    return found


def placement(output: str) -> Counter:
    """Ranks per host (short names) of the run in `output`."""
    return Counter(h.split(".")[0] for h in rank_hosts(output).values())


def short(host: str) -> str:
    return host.split(".")[0]


def announcing(ranks: int, intervals: str) -> list[str]:
    """The launcher's args: `ranks` ranks of /opt/pi over `intervals` samples, each printing
    `rank-start <host> <epoch seconds>` first."""
    return ["mpirun", "-n", str(ranks), "sh", "-c",
            f'echo "rank-start $(hostname) $(date +%s.%N)"; exec /opt/pi {intervals}']


def parse_starts(log: str) -> list[tuple[str, float]]:
    """(host, time) of every `rank-start` line in `log`."""
    return [(m.group(1), float(m.group(2))) for m in _START.finditer(log)]


def rank_starts(kubectl: Callable, ns: str, name: str) -> list[tuple[str, float]]:
    """(host, time) of every rank-start line in the launcher pods' current output."""
    out = []
    for p in pods(kubectl, ns, name, "launcher"):
        out += parse_starts(pod_log(kubectl, p))
    return out


def all_started(starts: list[tuple[str, float]], ranks: int, after: float) -> float | None:
    """The time the last of `ranks` ranks started after `after`, or None while fewer have."""
    late = sorted(t for _, t in starts if t > after)
    return late[ranks - 1] if len(late) >= ranks else None


def wait_ranks(kubectl: Callable, ns: str, name: str, ranks: int, after: float, timeout: float = 180) -> float:
    """The time (this machine's clock) at which the last of `ranks` ranks started after `after`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = all_started(rank_starts(kubectl, ns, name), ranks, after)
        if done is not None:
            return done
        time.sleep(0.3)
    raise AssertionError(f"{ranks} ranks of {ns}/{name} did not start again within {timeout}s")


def running_worker(kubectl: Callable, ns: str, name: str, index: int) -> dict:
    """Worker `index`'s pod, Running and not being deleted (under either operator's labels)."""
    (pod,) = [p for p in pods(kubectl, ns, name, "worker")
              if p["spec"].get("hostname", p["metadata"]["name"]) == f"{name}-worker-{index}"
              and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return pod


def ranks_started(kubectl: Callable, ns: str, name: str) -> int:
    """`rank-start` lines in the current launcher pods' output."""
    n = 0
    for p in pods(kubectl, ns, name, "launcher"):
        n += kubectl("-n", ns, "logs", p["metadata"]["name"], check=False).stdout.count("rank-start ")
    return n
