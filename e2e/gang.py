"""Gang scheduling on the local cluster: the PodGroup CRDs (from the pinned Go modules), the
scheduler-plugins scheduler with Coscheduling and its PodGroup controller as processes on
127.0.0.1, and a private pool of kwok nodes that only this test's pods can land on."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from reconcilers import names
from reconcilers.gang import podgroup as pg
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, conditions, items, pods, wait_condition, wait_established
from testsupport.net import free_port
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

SCHEDULER_NAME = "mpijob-gang-scheduler"
# The node pool of the A-then-B runs: one MPIJob of a launcher and 3 workers, one CPU each, fits in
# 3 nodes x 2 CPUs (6 CPUs), two (8) do not.
WORKERS = 3
POD_CPU = "1"
POOL_NODES, NODE_CPU = 3, "2"
POOL_LABEL = "mpijob-operator.dev/gang-pool"
GANG_ROLES = {"scheduler-plugins": "mpi-operator-gang-scheduler-plugins", "volcano": "mpi-operator-gang-volcano",
              "workload": "mpi-operator-gang-workload"}



def _script(name: str, timeout: float) -> list[str]:
    r = subprocess.run([str(ROOT / "hack" / name)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"hack/{name} failed:\n{r.stderr[-3000:]}"
    return r.stdout.strip().splitlines()


def podgroup_crds() -> dict[str, str]:
    sp, volcano = _script("podgroup-crds.sh", 600)
    return {"scheduler-plugins": sp, "volcano": volcano}


def install_crd(kubectl: Callable, path: str, name: str) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=mpijob-operator-tests", "-f", path)
    wait_established(kubectl, name)


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

    def lines_about(self, ns: str, name: str, last: int = 40) -> str:
        """The scheduler's log lines about MPIJob `name`'s pods: why a wait for them failed. The last
        `last` lines of each pod, so that a pod the scheduler went quiet about (a launcher) is not
        hidden behind the lines of its busy siblings."""
        about: dict[str, list[str]] = {}
        for ln in self.logs[0].read_text(errors="replace").splitlines():
            pod = next((w.split("=", 1)[-1].strip('"') for w in ln.split() if f"{ns}/{name}-" in w), None)
            if pod is not None:
                about.setdefault(pod, []).append(ln[:400])
        return "\n".join(f"- {pod}: {len(lines)} lines, the last {min(last, len(lines))}:\n" + "\n".join(lines[-last:])
                         for pod, lines in sorted(about.items())) or f"(no line names a pod {ns}/{name}-*)"


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
    bin_dir = Path(_script("build-scheduler-plugins.sh", 3600)[-1])
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
def bare_apiserver(cluster_dir: Path, workdir: Path, *flags: str) -> Iterator[str]:
    """A second kube-apiserver of the pinned release on a free port, on the cluster's etcd under an
    etcd prefix of its own (so nothing it stores meets the cluster's), with the cluster's certificates
    and `flags`; no controller or scheduler behind it. Yields an admin kubeconfig; stopped (its own
    pid) and its keys deleted from etcd at the end."""
    port, prefix = free_port(), f"/mpijob-operator-test-{uuid.uuid4().hex[:8]}"
    pki = cluster_dir / "pki"
    kubeconfig = workdir / "bare.kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: bare
  cluster: {{server: "https://127.0.0.1:{port}", certificate-authority: "{pki / 'ca.crt'}"}}
users:
- name: admin
  user: {{client-certificate: "{pki / 'admin.crt'}", client-key: "{pki / 'admin.key'}"}}
contexts:
- name: bare
  context: {{cluster: bare, user: admin}}
current-context: bare
""")
    log = workdir / "bare-apiserver.log"
    cmd = [str(cluster_dir / "bin" / "kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379",
           f"--etcd-prefix={prefix}", "--bind-address=127.0.0.1", f"--secure-port={port}",
           f"--tls-cert-file={pki / 'apiserver.crt'}",
           f"--tls-private-key-file={pki / 'apiserver.key'}", f"--client-ca-file={pki / 'ca.crt'}",
           "--service-cluster-ip-range=10.97.0.0/16", "--service-account-issuer=https://bare.local",
           f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
           "--authorization-mode=RBAC", "--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false",
           "--profiling=false", "--v=1", *flags]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    kubectl = [str(cluster_dir / "bin" / "kubectl"), f"--kubeconfig={kubeconfig}"]
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the bare kube-apiserver exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            return subprocess.run([*kubectl, "get", "--raw", "/readyz"], capture_output=True,
                                  timeout=20).returncode == 0

        wait_until(ready, 120, interval=0.5, what="the bare kube-apiserver ready")
        yield str(kubeconfig)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        _etcd_delete_prefix(prefix)


def _etcd_delete_prefix(prefix: str) -> None:
    """Deletes every key under `prefix` through etcd's JSON gateway (/v3/kv/deleterange)."""
    key = prefix.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    body = json.dumps({"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()})
    subprocess.run(["curl", "-sf", "-X", "POST", "http://127.0.0.1:2379/v3/kv/deleterange", "-d", body],
                   capture_output=True, timeout=30, check=True)


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


# -- two MPIJobs in one pool: A runs, B waits (e2e/test_gang_scheduling.py, test_workload_gang.py) --


def gang_job(name: str, placement: dict, launcher_runs: str) -> dict:
    job = simulated_mpijob(name, workers=WORKERS, launcher_runs=launcher_runs, policy="AtStartup")
    for rs in job["spec"]["mpiReplicaSpecs"].values():
        spec = rs["template"]["spec"]
        spec.update(copy.deepcopy(placement))
        spec["containers"][0]["resources"] = {"requests": {"cpu": POD_CPU}}
    return job


def bound(kubectl, ns: str, name: str) -> tuple[int, int]:
    """(pods bound to a node, pods not bound) of MPIJob `name`, launcher and workers, live ones only."""
    ps = [p for role in ("launcher", "worker") for p in pods(kubectl, ns, name, role)
          if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") in ("Pending", "Running")]
    on_node = sum(1 for p in ps if p["spec"].get("nodeName"))
    return on_node, len(ps) - on_node


def bound_all(kubectl, ns: str) -> dict[str, tuple[int, int]]:
    """bound() of every MPIJob of the namespace from one read of its pods, so that two MPIJobs are seen
    at one instant: an MPIJob's workers stop (and free the pool) a moment before its Succeeded
    condition is written, and a waiting gang may be bound in between, after the first one's pods left."""
    out: dict[str, list[int]] = {}
    for p in items(kubectl, ns, "pods", f"{names.OPERATOR_NAME_LABEL}={names.OPERATOR_NAME}"):
        if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") not in ("Pending", "Running"):
            continue
        counts = out.setdefault(p["metadata"]["labels"].get(names.JOB_NAME_LABEL, ""), [0, 0])
        counts[0 if p["spec"].get("nodeName") else 1] += 1
    return {name: (c[0], c[1]) for name, c in out.items()}


def ever_bound(kubectl, ns: str, name: str, seen: set[str]) -> int:
    """How many of MPIJob `name`'s pods have been bound so far (`seen` accumulates across calls): without
    gang scheduling a launcher may run, and in the simulation end, before its last worker is placed."""
    for role in ("launcher", "worker"):
        seen.update(p["metadata"]["name"] for p in pods(kubectl, ns, name, role) if p["spec"].get("nodeName"))
    return len(seen)


def succeeded(kubectl, ns: str, name: str) -> bool:
    return conditions(kubectl, ns, name).get("Succeeded", {}).get("status") == "True"


def wait_all_bound(kubectl, ns: str, name: str, scheduler: SecondScheduler | None, what: str,
                   timeout: float = 120) -> None:
    """Until every pod of MPIJob `name` has been bound (ever_bound). A scheduler that exits is named
    at once; a timeout says what the pods and the scheduler said about them."""
    seen: set[str] = set()

    def done() -> bool:
        if scheduler is not None:
            scheduler.check_alive()
        return ever_bound(kubectl, ns, name, seen) >= WORKERS + 1

    try:
        wait_until(done, timeout, 0.2, what=what)
    except AssertionError as e:
        state = kubectl("-n", ns, "get", "pods", "-o", "wide").stdout
        events = kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp").stdout[-4000:]
        said = scheduler.lines_about(ns, name, last=20) if scheduler is not None else ""
        raise AssertionError(f"{e}; bound so far: {sorted(seen)}\n{state}\n{events}\n"
                             f"--- the scheduler on {name}'s pods ---\n{said}") from None


def run_a_then_b(kubectl, ns: str, placement: dict, op, backend: str, mode: str,
                 scheduler: SecondScheduler | None = None) -> dict:
    """A runs (launcher 8 s) holding the pool; B is submitted; B is watched until A ends and then
    until all of B's pods have been bound. B's launcher runs 15 s: without gang scheduling it may
    start while A runs, and must not end before its last worker is placed. Returns what was seen."""
    members = WORKERS + 1
    apply(kubectl, ns, gang_job("a", placement, "8s"))
    wait_until(lambda: bound(kubectl, ns, "a") == (members, 0), 90, 0.3, what="all of A's pods bound")
    apply(kubectl, ns, gang_job("b", placement, "15s"))
    seen: dict = {"b_bound_while_a_runs": set(), "b_waiting": set()}
    while not succeeded(kubectl, ns, "a"):
        counts = bound_all(kubectl, ns)
        if counts.get("a", (0, 0))[0]:  # A's pods still hold the pool
            seen["b_bound_while_a_runs"].add(counts.get("b", (0, 0)))
        c = conditions(kubectl, ns, "b").get(pg.WAITING_CONDITION)
        if c:
            seen["b_waiting"].add((c["status"], c["message"]))
        assert time.monotonic() - seen.setdefault("t_b", time.monotonic()) < 120, seen
        time.sleep(0.2)
    a_done = time.monotonic()
    wait_all_bound(kubectl, ns, "b", scheduler, what="all of B's pods bound")
    seen["a_end_to_b_bound_s"] = round(time.monotonic() - a_done, 2)
    wait_condition(kubectl, ns, "b", "Succeeded", timeout=120)
    seen["writes_per_mpijob"] = op.metric("mpi_operator_api_writes_total") / 2
    seen["writes_by_kind"] = {f"{labels['verb']} {labels['kind']}": value / 2 for name, labels, value in op.metrics()
                              if name == "mpi_operator_api_writes_total" and value}
    seen["podgroup_writes"] = {v: op.metric("mpi_operator_api_writes_total", verb=v, kind="PodGroup")
                               for v in ("create", "patch", "delete")}
    seen["workload_writes"] = {v: op.metric("mpi_operator_api_writes_total", verb=v, kind="Workload")
                               for v in ("create", "patch", "delete")}
    print(f"\nFIGURE gang={mode} backend={backend} a_end_to_b_all_bound_s={seen['a_end_to_b_bound_s']} "
          f"api_writes_per_mpijob={seen['writes_per_mpijob']} podgroup_writes={seen['podgroup_writes']} "
          f"workload_writes={seen['workload_writes']} "
          f"b_while_a_runs(bound,unbound)={sorted(seen['b_bound_while_a_runs'])} "
          f"writes_per_mpijob_by_kind={seen['writes_by_kind']}")
    return seen
