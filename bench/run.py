"""`make bench`: every benchmark, one table on stdout, JSON in --out (<UTC time>.json and latest.json).

    python bench/run.py [--out bench/results] [--sizes 1,100,1000] [--backends job,statefulset] [--quick]

- plan: pure reconciles per second (bench_plan), no cluster;
- informer: events/s through informer -> queue, memory per cached pod (bench_informer);
- operator: throughput, latency, API requests, CPU and memory of the operator (bench_operator);
- control plane: the resident memory of the local cluster's processes while idle.
The local cluster is started (hack/cluster-up.sh) when it is not up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
CLUSTER_DIR = Path(os.environ.get("CLUSTER_DIR", ROOT / ".cluster"))

import bench_informer  # noqa: E402
import bench_operator  # noqa: E402
import bench_plan  # noqa: E402


def control_plane_memory() -> dict:
    """VmRSS of each process the local cluster started (PID files), in MiB."""
    out = {}
    for pid_file in sorted((CLUSTER_DIR / "pids").glob("*.pid")):
        try:
            status = Path(f"/proc/{pid_file.read_text().strip()}/status").read_text()
        except (OSError, ValueError):
            continue
        rss = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))
        out[pid_file.stem] = round(int(rss) / 1024, 1)
    out["total"] = round(sum(out.values()), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="all benchmarks")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--sizes", default="1,100,1000")
    ap.add_argument("--backends", default="job,statefulset")
    ap.add_argument("--quick", action="store_true", help="sizes 1,10 and 1000 ConfigMaps: a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.sizes = "1,10"
        bench_informer.N_CONFIGMAPS = 1000
    t0 = time.monotonic()
    subprocess.run([str(ROOT / "hack" / "cluster-up.sh")], check=True)
    kubeconfig = str(CLUSTER_DIR / "kubeconfig")
    os.environ["KUBECONFIG"] = kubeconfig
    time.sleep(5)  # let the cluster settle before reading its idle memory
    results = {"started": datetime.now(UTC).isoformat(timespec="seconds"),
               "control_plane_idle_rss_mib": control_plane_memory()}
    print(">> plan (pure reconciles)", flush=True)
    results["plan"] = bench_plan.run()
    print(">> informer pipeline", flush=True)
    results["informer"] = bench_informer.run()
    print(">> operator", flush=True)
    results["operator"] = bench_operator.run(a.backends.split(","), [int(s) for s in a.sizes.split(",")],
                                             kubeconfig)
    results["wall_s"] = round(time.monotonic() - t0, 1)

    print("\ncontrol plane, idle RSS (MiB): " + ", ".join(
        f"{k} {v}" for k, v in results["control_plane_idle_rss_mib"].items()))
    pad = " " * 15
    print(f"\nplan(){pad[6:]}backend      workers  create plans/s (writes)  steady plans/s (writes)")
    for r in results["plan"]["results"]:
        print(f"{pad}{r['backend']:<12} {r['workers']:>7}  {r['create_plans_per_s']:>14} ({r['create_writes']})"
              f"  {r['steady_plans_per_s']:>14} ({r['steady_writes']})")
    ev, mem = results["informer"]["informer_events"], results["informer"]["pod_memory"]
    print(f"\ninformer       {ev['configmaps']} ConfigMaps: live {ev['live_events_per_s']} events/s, initial list "
          f"{ev['initial_list_events_per_s']} events/s, delete burst {ev['delete_burst_events_per_s']} events/s")
    print(f"{pad}bytes per cached pod: raw {mem['bytes_per_pod_raw']}, slim_pod {mem['bytes_per_pod_slim_pod']}")
    print("\noperator\n" + bench_operator.table(results["operator"]))
    print(f"\nwall time {results['wall_s']}s")

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    for name in (f"{stamp}.json", "latest.json"):
        (out / name).write_text(json.dumps(results, indent=2) + "\n")
    print(f"JSON: {out / (stamp + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
