"""`make bench`: every benchmark, one table on stdout, JSON in --out (<UTC time>.json and latest.json).

    python bench/run.py [--out bench/results] [--sizes 1,100,1000] [--backends job,statefulset] [--quick]

- plan: pure reconciles per second (bench_plan), no cluster;
- informer: events/s through informer -> queue, memory per cached pod (bench_informer);
- operator: throughput, latency, API requests, CPU and memory of the operator (bench_operator);
- control plane: the resident memory of the local cluster's processes (.cluster/pids) while idle.
The local cluster is started (hack/cluster-up.sh, REAL_NODE=0 unless set) when it is not up.
Operator logs of the last run are in <out>/operator-logs/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import bench_informer  # noqa: E402
import bench_operator  # noqa: E402
import bench_plan  # noqa: E402


def cluster_dir() -> Path:
    return Path(os.environ.get("CLUSTER_DIR") or ROOT / ".cluster")


def control_plane_memory(pids_dir: Path | None = None) -> dict:
    """VmRSS in MiB of each process the local cluster started (its PID files: etcd, kube-apiserver,
    kube-controller-manager, kube-scheduler, kwok, and the real node's when present), and their total."""
    out: dict[str, float] = {}
    for pid_file in sorted((pids_dir or cluster_dir() / "pids").glob("*.pid")):
        try:
            status = Path(f"/proc/{int(pid_file.read_text().strip())}/status").read_text()
        except (OSError, ValueError):
            out[pid_file.stem] = None  # not running
            continue
        rss = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")), "0")
        out[pid_file.stem] = round(int(rss) / 1024, 1)
    if not out:
        raise RuntimeError(f"no PID files in {pids_dir or cluster_dir() / 'pids'}: is the local cluster up?")
    out["total"] = round(sum(v for v in out.values() if v is not None), 1)
    return out


def render(results: dict) -> str:
    """One plain-text table of every figure, in sections."""
    fmt = bench_operator.format_table
    parts = []
    cp = results["control_plane_idle_rss_mib"]
    parts.append(fmt(["MiB"], [("control plane idle RSS, total", [cp["total"]])]
                     + [(f"  {k}", [v]) for k, v in cp.items() if k != "total"], title="control plane"))

    plan = results["plan"]["results"]
    cols = [f"{r['backend'][:3]} w={r['workers']}" for r in plan]
    parts.append(fmt(cols, [
        ("plans/s, nothing observed yet", [r["create_plans_per_s"] for r in plan]),
        ("  writes in that plan", [r["create_writes"] for r in plan]),
        ("plans/s, steady state", [r["steady_plans_per_s"] for r in plan]),
        ("  writes in that plan", [r["steady_writes"] for r in plan]),
    ], title="plan (pure reconcile of one MPIJob)"))

    ev, mem = results["informer"]["informer_events"], results["informer"]["pod_memory"]
    parts.append(fmt(["value"], [
        ("ConfigMaps created per second", [ev["create_per_s"]]),
        ("events/s through the pipeline while created", [ev["live_events_per_s"]]),
        ("lag after the last create (s)", [ev["live_lag_after_last_create_s"]]),
        ("events/s, initial list of a fresh informer", [ev["initial_list_events_per_s"]]),
        ("events/s, DELETED burst of a deletecollection", [ev["delete_burst_events_per_s"]]),
        ("deletecollection (s)", [ev["deletecollection_s"]]),
        ("bytes per cached pod, raw", [mem["bytes_per_pod_raw"]]),
        ("bytes per cached pod, slim_pod", [mem["bytes_per_pod_slim_pod"]]),
    ], title=f"informer ({ev['configmaps']} ConfigMaps)"))

    parts.append(bench_operator.table(results["operator"]))
    return "\n\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description="all benchmarks")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--sizes", default=",".join(map(str, bench_operator.SIZES)))
    ap.add_argument("--backends", default=",".join(bench_operator.BACKENDS))
    ap.add_argument("--quick", action="store_true", help="sizes 1,10 and 1000 ConfigMaps: a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.sizes = "1,10"
        bench_informer.N_CONFIGMAPS = 1000
    sizes = [int(s) for s in a.sizes.split(",") if s]
    backends = [b for b in a.backends.split(",") if b]
    unknown = set(backends) - set(bench_operator.BACKENDS)
    if unknown:
        ap.error(f"unknown backend(s) {sorted(unknown)}: choose from {bench_operator.BACKENDS}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    kubeconfig = bench_operator.ensure_cluster()
    os.environ["KUBECONFIG"] = kubeconfig  # bench_informer reads it
    results: dict = {"started": datetime.now(UTC).isoformat(timespec="seconds"),
                     "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                     "control_plane_idle_rss_mib": control_plane_memory()}
    print(">> plan (pure reconciles)", file=sys.stderr, flush=True)
    results["plan"] = bench_plan.run()
    print(">> informer pipeline", file=sys.stderr, flush=True)
    results["informer"] = bench_informer.run()
    print(">> operator", file=sys.stderr, flush=True)
    results["operator"] = bench_operator.run(backends, sizes, kubeconfig, log_dir=out / "operator-logs")
    results["wall_s"] = round(time.monotonic() - t0, 1)

    print(render(results))
    print(f"\nwall time {results['wall_s']} s")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"{stamp}.json", "latest.json"):
        (out / name).write_text(json.dumps(results, indent=2) + "\n")
    print(f"JSON: {out / (stamp + '.json')} and {out / 'latest.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
