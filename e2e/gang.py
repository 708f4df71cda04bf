"""Gang scheduling on the local cluster: the PodGroup CRDs (from the pinned Go modules), the
scheduler-plugins scheduler with Coscheduling and its PodGroup controller as processes on
127.0.0.1, and a private pool of kwok nodes that only this test's pods can land on."""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from testsupport.net import free_port
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

SCHEDULER_NAME = "mpijob-gang-scheduler"
POOL_LABEL = "mpijob-operator.dev/gang-pool"
GANG_ROLES = {"scheduler-plugins": "mpi-operator-gang-scheduler-plugins", "volcano": "mpi-operator-gang-volcano"}



def _script(name: str, timeout: float) -> list[str]:
    r = subprocess.run([str(ROOT / "hack" / name)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"hack/{name} failed:\n{r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()


def podgroup_crds() -> dict[str, str]:
    sp, volcano = _script("podgroup-crds.sh", 600)
    return {"scheduler-plugins": sp, "volcano": volcano}


def install_crd(kubectl: Callable, path: str, name: str) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=mpijob-operator-tests", "-f", path)
    kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s", timeout=90)


def grant_gang_rbac(kubectl: Callable, flavor: str, namespace: str) -> None:
    """The operator's PodGroup ClusterRole (manifests/gang-scheduling/<flavor>/), bound in the test's
    namespace only: the operator runs with --namespace, and the ServiceAccount's cluster-wide rules,
    which tests/integration/test_manifests.py checks on the same cluster, stay as they are."""
    kubectl("apply", "-f", str(ROOT / "manifests" / "gang-scheduling" / flavor / "cluster_role.yaml"))
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "mpi-operator-gang", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": GANG_ROLES[flavor]},
               "subjects": [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": "mpi-operator"}]}
    kubectl("apply", "-f", "-", input=json.dumps(binding))


@dataclass
class SecondScheduler:
    name: str
    procs: list[subprocess.Popen]
    logs: list[Path]

    def check_alive(self) -> None:
        for p, log in zip(self.procs, self.logs, strict=True):
            if p.poll() is not None:
                raise RuntimeError(f"{log.name} exited with {p.returncode}:\n{log.read_text()[-3000:]}")


def scheduler_config(kubeconfig: str, name: str) -> str:
    """A KubeSchedulerConfiguration with one profile, `name`, that gang-schedules through
    Coscheduling (its multiPoint registers queueSort, preFilter, postFilter, permit, reserve, and the
    default queue sort is replaced by the plugin's, which keeps a gang's pods together)."""
    return f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: {kubeconfig}
  qps: 100
  burst: 200
profiles:
- schedulerName: {name}
  plugins:
    multiPoint:
      enabled:
      - name: Coscheduling
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: 10
"""


@contextlib.contextmanager
def second_scheduler(kubeconfig: str, workdir: Path) -> Iterator[SecondScheduler]:
    """The scheduler-plugins scheduler and controller (hack/build-scheduler-plugins.sh), every
    listener on 127.0.0.1, stopped (by their own pids) at the end."""
    bin_dir = Path(_script("build-scheduler-plugins.sh", 1800)[-1])
    cfg = workdir / "scheduler.yaml"
    cfg.write_text(scheduler_config(kubeconfig, SCHEDULER_NAME))
    sched_port = free_port()
    commands = {
        "scheduler": [str(bin_dir / "scheduler"), f"--config={cfg}", "--bind-address=127.0.0.1",
                      f"--secure-port={sched_port}", f"--authentication-kubeconfig={kubeconfig}",
                      f"--authorization-kubeconfig={kubeconfig}", "--v=2",
                      # A gang the Coscheduling plugin rejected is requeued on a pod Add or a PodGroup
                      # change only, not when the pods in its way go: in a quiet cluster it would
                      # wait for the 5-minute flush of unschedulable pods. (A busy cluster adds pods
                      # all the time; this cluster's tests do not.)
                      "--pod-max-in-unschedulable-pods-duration=5s"],
        "controller": [str(bin_dir / "controller"), f"--metricsAddr=127.0.0.1:{free_port()}",
                       f"--probeAddr=127.0.0.1:{free_port()}", "--qps=50", "--burst=100"],
    }
    procs, logs = [], []
    try:
        for name, cmd in commands.items():
            log = workdir / f"{name}.log"
            logs.append(log)
            with open(log, "w") as out:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                              env={"KUBECONFIG": kubeconfig, "PATH": "/usr/bin:/bin"}))
        s = SecondScheduler(SCHEDULER_NAME, procs, logs)

        def healthy() -> bool:
            s.check_alive()
            r = subprocess.run(["curl", "-sk", f"https://127.0.0.1:{sched_port}/healthz"], capture_output=True,
                               text=True, timeout=10)
            return r.stdout.strip() == "ok"

        wait_until(healthy, 60, interval=0.5, what="the scheduler-plugins scheduler to be healthy")
        yield s
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for log in logs:
            if log.exists():
                print(f"\n--- {log.name}, last lines ---\n" + "\n".join(log.read_text().splitlines()[-25:]))


@contextlib.contextmanager
def node_pool(kubectl: Callable, nodes: int, cpu: str) -> Iterator[tuple[str, dict]]:
    """`nodes` kwok nodes of `cpu` CPUs each, labelled and tainted with a key of their own: only pods
    with the returned placement (nodeSelector + toleration) land there, and those pods nowhere else.
    Deleted at the end."""
    pool = f"g{uuid.uuid4().hex[:6]}"
    names = [f"gang-{pool}-{i}" for i in range(nodes)]
    for name in names:
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name,
                             "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                             "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                        "type": "kwok", POOL_LABEL: pool}},
                "spec": {"taints": [{"key": POOL_LABEL, "value": pool, "effect": "NoSchedule"}]},
                "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                           "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"}}}
        kubectl("apply", "-f", "-", input=json.dumps(node))

    def ready() -> bool:
        out = json.loads(kubectl("get", "nodes", "-l", f"{POOL_LABEL}={pool}", "-o", "json").stdout)["items"]
        return len(out) == nodes and all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            for n in out)

    placement = {"nodeSelector": {POOL_LABEL: pool},
                 "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}]}
    try:
        wait_until(ready, 60, interval=0.5, what=f"{nodes} kwok nodes of pool {pool} Ready")
        yield pool, placement
    finally:
        kubectl("delete", "node", *names, "--wait=false", check=False)
