"""Benchmark of the whole operator on the local cluster (not a timed test), per worker backend
and number of MPIJobs submitted at once (DESIGN.md section 4):

- throughput: MPIJobs brought to Running per second (first create sent -> last Running seen);
- latency: MPIJob create acknowledged -> its launcher Job seen by a watch (p50, p95, max);
- API requests per MPIJob sent by the operator (rest_client_requests_total) and its writes;
- CPU seconds and peak / idle memory (RSS) of the operator process.

The operator runs as a process with the ServiceAccount of manifests/ (as the e2e tests do); pods
are simulated by kwok, launchers "run" 10 minutes so every MPIJob stays Running.

    python bench/bench_operator.py [--backends job,statefulset] [--sizes 1,100,1000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "e2e"))

from support import Operator, mpijob, service_account_kubeconfig  # noqa: E402

from informers.informer import SharedInformer  # noqa: E402
from informers.resources import JOBS, MPIJOBS  # noqa: E402
from informers.rest import RestClient  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc(pid: int) -> dict:
    """CPU seconds (user+system) and RSS figures of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    mib = lambda key: round(int(status[key].split()[0]) / 1024, 1)  # noqa: E731
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / CLK_TCK, "rss_mib": mib("VmRSS"), "hwm_mib": mib("VmHWM")}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def _running(obj: dict) -> bool:
    return any(c.get("type") == "Running" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def run_one(admin: RestClient, sa_kubeconfig: str, backend: str, n: int, timeout: float) -> dict:
    ns = f"bench-{backend[:3]}-{n}-{uuid.uuid4().hex[:5]}"
    admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    created: dict[str, float] = {}
    launcher_seen: dict[str, float] = {}
    running_seen: dict[str, float] = {}
    all_running = threading.Event()

    def on_job(obj: dict) -> None:
        name = obj["metadata"]["name"]
        if name.endswith("-launcher"):
            launcher_seen.setdefault(name[: -len("-launcher")], time.monotonic())

    def on_mpijob(obj: dict) -> None:
        if _running(obj):
            running_seen.setdefault(obj["metadata"]["name"], time.monotonic())
            if len(running_seen) >= n:
                all_running.set()

    watches = [SharedInformer(admin, JOBS, namespace=ns), SharedInformer(admin, MPIJOBS, namespace=ns)]
    watches[0].add_event_handler(on_add=on_job)
    watches[1].add_event_handler(on_add=on_mpijob, on_update=lambda old, new: on_mpijob(new))
    for w in watches:
        w.start()
    with tempfile.TemporaryDirectory() as tmp:
        op = Operator(sa_kubeconfig, backend, ns, Path(tmp) / "operator.log",
                      ("--threadiness=8", "--kube-api-qps=500", "--kube-api-burst=1000", "--log-level=info"),
                      lease=f"bench-{ns}")
        try:
            op.wait_ready()
            idle = _proc(op.proc.pid)
            requests0 = op.metric("rest_client_requests_total")
            writes0 = op.metric("mpi_operator_api_writes_total")

            def submit(i: int) -> None:
                job = mpijob(f"m{i:04d}", workers=2, launcher_runs="600s")
                admin.request("POST", MPIJOBS.path(ns), body=job)
                created[job["metadata"]["name"]] = time.monotonic()

            t0 = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(submit, range(n)))
            ok = all_running.wait(timeout)
            t_end = max(running_seen.values(), default=time.monotonic())
            busy = _proc(op.proc.pid)
            requests = op.metric("rest_client_requests_total") - requests0
            writes = op.metric("mpi_operator_api_writes_total") - writes0
        finally:
            op.stop()
            for w in watches:
                w.stop()
            admin.request("DELETE", f"/api/v1/namespaces/{ns}")
    if not ok:
        missing = sorted(set(created) - set(running_seen))[:10]
        raise SystemExit(f"bench: {n - len(running_seen)} of {n} MPIJobs ({backend}) not Running after "
                         f"{timeout:.0f}s, e.g. {missing}; operator log: see the e2e support Operator")
    lat = [launcher_seen[k] - created[k] for k in created if k in launcher_seen]
    return {
        "backend": backend, "mpijobs": n,
        "running_per_s": round(n / (t_end - t0), 2),
        "all_running_s": round(t_end - t0, 2),
        "launcher_latency_p50_s": round(_pct(lat, 0.5), 3),
        "launcher_latency_p95_s": round(_pct(lat, 0.95), 3),
        "launcher_latency_max_s": round(max(lat, default=float("nan")), 3),
        "api_requests_per_mpijob": round(requests / n, 2),
        "api_writes_per_mpijob": round(writes / n, 2),
        "operator_cpu_s": round(busy["cpu_s"] - idle["cpu_s"], 2),
        "operator_idle_rss_mib": idle["rss_mib"],
        "operator_peak_rss_mib": busy["hwm_mib"],
    }


def run(backends: list[str], sizes: list[int], kubeconfig: str) -> dict:
    admin = RestClient.from_kubeconfig(kubeconfig, qps=500, burst=1000)
    with tempfile.TemporaryDirectory() as tmp:
        sa = service_account_kubeconfig(Path(tmp) / "operator.kubeconfig")
        results = [run_one(admin, sa, b, n, timeout=120 + n * 0.5) for b in backends for n in sizes]
    return {"benchmark": "operator", "results": results}


COLUMNS = ["backend", "mpijobs", "running_per_s", "all_running_s", "launcher_latency_p50_s",
           "launcher_latency_p95_s", "launcher_latency_max_s", "api_requests_per_mpijob", "api_writes_per_mpijob",
           "operator_cpu_s", "operator_idle_rss_mib", "operator_peak_rss_mib"]


def table(out: dict) -> str:
    lines = ["  ".join(f"{c:>12}" if i else f"{c:<12}" for i, c in enumerate(COLUMNS))]
    for r in out["results"]:
        lines.append("  ".join(f"{r[c]!s:>{max(12, len(c))}}" if i else f"{r[c]!s:<12}"
                               for i, c in enumerate(COLUMNS)))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="job,statefulset")
    ap.add_argument("--sizes", default="1,100,1000")
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig"))
    a = ap.parse_args()
    out = run(a.backends.split(","), [int(s) for s in a.sizes.split(",")], a.kubeconfig)
    print(table(out))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
