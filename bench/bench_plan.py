"""Micro-benchmark of the pure planner: plans per second for an MPIJob with 1, 64 and 1024 workers,
for both worker backends, in two situations:
- `create`: nothing observed yet (the plan builds and creates every child);
- `steady`: every child exists and matches, all pods run (the plan is zero writes: the common case).

    python -m bench.bench_plan          # a table, then the JSON
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime

from reconcilers import names as n
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed, SSHKey
from testsupport import builders

WORKERS = (1, 64, 1024)
BACKENDS = ("job", "statefulset")
NOW = datetime(2025, 1, 1, tzinfo=UTC)
KEY = SSHKey("-----BEGIN EC PRIVATE KEY-----\nx\n-----END EC PRIVATE KEY-----\n", "ecdsa-sha2-nistp521 AAAA\n")


def mpijob(workers: int) -> dict:
    limits = {"cpu": "1", "memory": "1Gi"}
    return builders.mpijob("bench", namespace="default", uid="uid-bench", workers=workers,
                           run_policy={"cleanPodPolicy": "Running"},
                           launcher=builders.container("launcher", ["mpirun"], limits=limits),
                           worker=builders.container("worker", ["sshd"], limits=limits))


def pod(job: dict, role: str, i: int, backend: str) -> dict:
    owner = n.launcher_name(job) if role == "launcher" else n.worker_name(job)
    host = n.launcher_name(job) if role == "launcher" else f"{owner}-{i}"
    return {"metadata": {"name": f"{host}-p", "namespace": "default", "labels": n.job_labels(job, role),
                         "ownerReferences": [{"kind": "StatefulSet" if backend == "statefulset" and role == "worker"
                                              else "Job", "name": owner, "controller": True}]},
            "spec": {"hostname": host}, "status": {"phase": "Running"}}


def steady_state(job: dict, backend: str, workers: int) -> tuple[dict, Observed]:
    """Applies plans (creates, merge patches of status) until the plan is zero writes."""
    cfg = Config(worker_backend=backend)
    obs = Observed()
    for _ in range(5):
        p = plan(Inputs(job, obs, cfg, NOW, lambda: KEY))
        for c in p.creates:
            slot = {"Service": "service", "ConfigMap": "config_map", "Secret": "secret",
                    "NetworkPolicy": "network_policy"}.get(c.obj["kind"]) or (
                "launcher" if c.obj["metadata"]["name"].endswith("-launcher") else "workers")
            setattr(obs, slot, c.obj)
        for pa in p.patches:
            slot = {"ConfigMap": "config_map"}.get(pa.ref.kind)
            if slot:
                getattr(obs, slot)["data"].update(pa.patch.get("data", {}))
        if p.status is not None:
            job = {**job, "status": p.status}
        if obs.workers is not None and not obs.pods:
            ready = "readyReplicas" if backend == "statefulset" else "ready"
            obs = replace(obs, workers={**obs.workers, "status": {ready: workers}},
                          launcher={**obs.launcher, "status": {"active": 1, "ready": 1}},
                          pods=[pod(job, "launcher", 0, backend)] + [pod(job, "worker", i, backend)
                                                                     for i in range(workers)])
            continue
        if p.writes == 0:
            return job, obs
    raise RuntimeError("the plan did not converge")


def rate(inputs: Inputs, min_seconds: float = 0.3) -> tuple[float, int]:
    count, start = 0, time.perf_counter()
    while True:
        p = plan(inputs)
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return count / elapsed, p.writes


def run() -> dict:
    results = []
    for backend in BACKENDS:
        for workers in WORKERS:
            job = mpijob(workers)
            cfg = Config(worker_backend=backend)
            create_rate, create_writes = rate(Inputs(job, Observed(), cfg, NOW, lambda: KEY))
            sjob, sobs = steady_state(job, backend, workers)
            steady_rate, steady_writes = rate(Inputs(sjob, sobs, cfg, NOW, lambda: KEY))
            results.append({"backend": backend, "workers": workers,
                            "create_plans_per_s": round(create_rate, 1), "create_writes": create_writes,
                            "steady_plans_per_s": round(steady_rate, 1), "steady_writes": steady_writes})
    return {"benchmark": "plan", "python": sys.version.split()[0], "results": results}


def main() -> None:
    out = run()
    print(f"{'backend':<12}{'workers':>8}{'create plans/s':>16}{'writes':>8}{'steady plans/s':>16}{'writes':>8}")
    for r in out["results"]:
        print(f"{r['backend']:<12}{r['workers']:>8}{r['create_plans_per_s']:>16.1f}{r['create_writes']:>8}"
              f"{r['steady_plans_per_s']:>16.1f}{r['steady_writes']:>8}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
