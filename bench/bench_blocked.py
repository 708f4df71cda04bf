"""Time to Running of a healthy MPIJob beside BENCH_BLOCKED (500) blocked ones (issue 24 item 5; not
a timed test).

The operator's controller runs in this process with its defaults (--kube-api-qps=50, burst 100,
--queue-qps=10, burst 100, 4 workers) on a namespace of its own. A ValidatingAdmissionPolicy refuses
(403 Forbidden, as a webhook that refuses would) every Job named blocked-* in that namespace, so
the blocked MPIJobs stay Blocked and their writes are retried. Reported:

- the healthy MPIJob's time from create to Running alone, then beside the blocked ones (after they
  were all refused once and their retries reached their steady rate);
- the blocked MPIJobs' refused writes per second in that steady state.

    python -m bench.bench_blocked          # a table, then the JSON

Uses $KUBECONFIG or $CLUSTER_DIR/kubeconfig (the local cluster must be up; kwok runs the pods).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from prometheus_client import REGISTRY

from client.resources import MPIJOBS, NAMESPACES
from client.rest import RestClient
from controller.config import Options
from controller.executor import Executor
from controller.mpijob_controller import MPIJobController
from informers.factory import InformerFactory
from testsupport.builders import refuse_jobs_policy
from testsupport.paths import CLUSTER_DIR

N = int(os.environ.get("BENCH_BLOCKED", "500"))
KUBECONFIG = os.environ.get("KUBECONFIG") or str(CLUSTER_DIR / "kubeconfig")


def kubectl(*args: str, input: str | None = None) -> str:
    r = subprocess.run([str(CLUSTER_DIR / "bin" / "kubectl"), f"--kubeconfig={KUBECONFIG}", *args], input=input,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr}")
    return r.stdout


def mpijob(name: str) -> dict:
    from testsupport.builders import simulated_mpijob
    return simulated_mpijob(name, workers=2, launcher_runs=None, policy="AtStartup")


def refused_writes() -> float:
    return REGISTRY.get_sample_value("mpi_operator_reconcile_errors_total", {"reason": "Forbidden"}) or 0.0


def blocked_count(ctrl: MPIJobController) -> int:
    """MPIJobs whose Blocked condition the controller's cache shows: each was refused at least once."""
    return sum(1 for job in ctrl.mpijobs.store.list()
               if any(c.get("type") == "Blocked" and c.get("status") == "True"
                      for c in (job.get("status") or {}).get("conditions") or []))


def time_to_running(client: RestClient, ns: str, name: str) -> float:
    t0 = time.monotonic()
    client.request("POST", MPIJOBS.path(ns), body=mpijob(name))
    while time.monotonic() - t0 < 300:
        job = client.request("GET", MPIJOBS.path(ns, name))
        conds = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
        if conds.get("Running") == "True":
            return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"{name} not Running after 300 s")


def block_policy(ns: str) -> str:
    name = f"bench-block-{ns}"
    kubectl("apply", "-f", "-", input=json.dumps(refuse_jobs_policy(name, ns, "the benchmark")))
    time.sleep(3)  # the policy is enforced within a second or two
    return name


def main() -> None:
    admin = RestClient.from_kubeconfig(KUBECONFIG, qps=200, burst=200)
    ns = f"bench-blocked-{uuid.uuid4().hex[:6]}"
    admin.request("POST", NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    policy = block_policy(ns)
    opts = Options(namespace=ns)  # the operator's defaults
    client = RestClient.from_kubeconfig(KUBECONFIG, qps=opts.kube_api_qps, burst=opts.kube_api_burst)
    factory = InformerFactory(client, namespace=ns)
    ctrl = MPIJobController(opts, factory, Executor(client, lambda: True, "mpi-operator", "bench"))
    factory.start()
    assert factory.wait_for_cache_sync(60)
    ctrl.run_workers()
    try:
        alone = time_to_running(admin, ns, "healthy-alone")
        before = refused_writes()
        items = [dict(mpijob(f"blocked-{i}"), metadata={"name": f"blocked-{i}", "namespace": ns}) for i in range(N)]
        kubectl("-n", ns, "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        t0 = time.monotonic()
        while blocked_count(ctrl) < N and time.monotonic() - t0 < 900:
            time.sleep(1)
        print(f">> {blocked_count(ctrl)} MPIJobs Blocked after {time.monotonic() - t0:.0f} s; "
              f"{refused_writes() - before:.0f} refused writes so far", file=sys.stderr)
        time.sleep(20)  # the first fast retries over: the steady state
        r0, w0 = refused_writes(), time.monotonic()
        beside = time_to_running(admin, ns, "healthy-beside")
        time.sleep(max(0.0, 30 - (time.monotonic() - w0)))
        rate = (refused_writes() - r0) / (time.monotonic() - w0)
    finally:
        ctrl.shutdown(10)
        factory.stop()
        kubectl("delete", "validatingadmissionpolicybinding", policy)
        kubectl("delete", "validatingadmissionpolicy", policy)
        admin.request("DELETE", NAMESPACES.path(None, ns))
    print(f"{'healthy MPIJob to Running, alone (s)':<52} {alone:>8.2f}")
    print(f"{f'healthy MPIJob to Running beside {N} blocked (s)':<52} {beside:>8.2f}")
    print(f"{'refused writes/s of the blocked ones (steady)':<52} {rate:>8.1f}")
    print(json.dumps({"blocked": N, "alone_s": round(alone, 2), "beside_s": round(beside, 2),
                      "refused_per_s": round(rate, 1)}))


if __name__ == "__main__":
    main()
