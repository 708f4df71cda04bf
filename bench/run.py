"""`make bench`: every benchmark, one table on stdout, JSON in --out (<UTC time>.json and latest.json).

    python -m bench.run [--out bench/results] [--pairs 2:100,...] [--runs 3] [--no-go]
                        [--matrix | --cases job:2:100,...] [--no-profile] [--quick]
                        [--no-recovery] [--recovery-runs 3]

- plan: pure reconciles per second (bench_plan), no cluster;
- logscan: a launcher log's scan, MiB per CPU second and its peak memory (bench_logscan), no cluster;
- informer: events/s through informer -> queue, memory per cached pod (bench_informer);
- cluster: the pods a second the local cluster creates and runs, the writes a second its API server
  sustains, without the operator: what the operator's throughput is compared with (bench_cluster);
- side by side: this operator and the Kubeflow MPI Operator (Go) v0.8.2 on the same cases, runs
  interleaved, each figure as this / Go with min-median-max over 3 runs (bench/side_by_side.py);
  `--no-go` (or BENCH_GO=0) runs this operator's side alone, without building the Go operator;
- operator, with --matrix or --cases: throughput, latency, API requests and writes counted by the API
  server, steady-state writes, CPU (with a py-spy profile) and memory of the operator, for each case
  of bench_operator.MATRIX or --cases (bench_operator);
- control plane: the resident memory of the local cluster's processes (.cluster/pids) while idle;
- recovery, last (`--no-recovery` skips it): a worker lost mid-run, from the delete to every rank
  running again and to Succeeded, this operator's two backends beside the Go operator on the real
  node, and to every worker Ready again at 8, 16 and 32 simulated workers (bench/recovery.py), 3 runs
  each (`--recovery-runs`; `python -m bench.recovery` alone makes 8); its last line reads
  `recovery median (s): job X, statefulset Y, go Z`.
The local cluster is started (hack/cluster-up.sh, REAL_NODE=0 unless set) when it is not up. The
real node stays off there: its kubelet and pods would be load on every other figure and in the control
plane's memory, and starting it costs minutes. The recovery section's real-node part needs it, so on
such a cluster it says it was skipped and why (its kwok part still runs): to have it, start the
cluster first (`make cluster-up`, whose real node is on where the machine allows it), or set
REAL_NODE=1. It runs last, so that whatever its real pods leave behind falls on no other figure.
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

from bench import bench_cluster, bench_informer, bench_logscan, bench_operator, bench_plan, recovery, side_by_side
from testsupport.paths import ROOT


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

    scans = (results.get("logscan") or {}).get("results") or []  # absent from results made before it
    if scans:
        parts.append(fmt([r["log"] for r in scans], [
            ("MiB scanned per CPU second", [r["mib_per_cpu_s"] for r in scans]),
            ("peak KiB the scan allocates", [r["peak_kib"] for r in scans]),
        ], title=f"launcher log scan ({scans[0]['mib']} MiB, the scan's bound)"))

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

    cl = results["cluster"]
    pods, writes = cl["pod_creation"], cl["sustained_writes"]
    parts.append(fmt(["value"], [
        (f"pods created per second ({pods['pods']} pods)", [pods["created_per_s"]]),
        ("pods Running per second", [pods["running_per_s"]]),
        (f"writes per second sustained ({writes['clients']} clients)", [writes["writes_per_s"]]),
    ], title=f"cluster, no operator ({cl['writers']} processes x {cl['threads']} threads)"))

    side = results.get("side_by_side")
    if side:
        parts.append("side by side with the Kubeflow MPI Operator (Go) v0.8.2, median (min-max) over the runs\n"
                     + side_by_side.render(side["summary"], f"{side['cpus']} cores shared with other work"))
    if results.get("operator"):
        parts.append(bench_operator.table(results["operator"]))
        prof = bench_operator.profiles(results["operator"])
        if prof:
            parts.append(prof)
    if results.get("recovery"):
        parts.append(recovery.report(results["recovery"]))
    return "\n\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description="all benchmarks")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--pairs", default=None, help="side by side: workers:MPIJobs,... (default: 2:100,8:100,2:1000)")
    ap.add_argument("--runs", type=int, default=side_by_side.RUNS, help="side by side: runs of each case")
    ap.add_argument("--no-go", action="store_true", default=os.environ.get("BENCH_GO") == "0",
                    help="side by side without the Go operator (also BENCH_GO=0)")
    ap.add_argument("--matrix", action="store_true", help="this operator alone on bench_operator.MATRIX too")
    ap.add_argument("--cases", default=None,
                    help="this operator alone on backend:workers:MPIJobs[:le],... too")
    ap.add_argument("--no-profile", action="store_true", help="no py-spy over the operator")
    ap.add_argument("--no-recovery", action="store_true", help="without the recovery benchmark (bench/recovery.py)")
    ap.add_argument("--recovery-runs", type=int, default=3, help="recovery: runs per backend and size")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: few small cases, 1000 ConfigMaps, 200 pods, 3 s of writes")
    a = ap.parse_args()
    if a.quick:
        a.cases = a.cases or "job:2:1,job:8:10,statefulset:8:10,job:2:10:le"
        a.pairs, a.runs = a.pairs or "2:10", min(a.runs, 2)
        bench_informer.N_CONFIGMAPS = 1000
        bench_cluster.PODS_N, bench_cluster.WRITE_SECONDS = 200, 3.0
        bench_operator.PROFILED = bench_operator.Case("job", 8, 10)
        a.recovery_runs = min(a.recovery_runs, 1)
    try:
        cases = bench_operator.cases_of(a.cases) if a.cases else list(bench_operator.MATRIX) if a.matrix else []
        pairs = side_by_side.pairs_of(a.pairs) if a.pairs else list(side_by_side.PAIRS)
    except ValueError as e:
        ap.error(str(e))
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
    results["logscan"] = bench_logscan.run()
    print(">> informer pipeline", file=sys.stderr, flush=True)
    results["informer"] = bench_informer.run()
    results["cluster"] = bench_cluster.run(kubeconfig)
    print(">> side by side", file=sys.stderr, flush=True)
    results["side_by_side"] = side_by_side.run(pairs, a.runs, go=not a.no_go, kubeconfig=kubeconfig,
                                               log_dir=out / "operator-logs",
                                               partial=out / "side_by_side.partial.json")
    if cases:
        print(">> operator", file=sys.stderr, flush=True)
        results["operator"] = bench_operator.run(cases, kubeconfig, log_dir=out / "operator-logs",
                                                 profile=not a.no_profile)
        bench_operator.add_bounds(results["operator"], results["cluster"])
    if not a.no_recovery:
        print(">> recovery", file=sys.stderr, flush=True)
        sizes = (2,) if a.quick else recovery.SIZES
        results["recovery"] = recovery.run(sizes, a.recovery_runs, (8,) if a.quick else recovery.KWOK_SIZES,
                                           a.recovery_runs, go=not a.no_go, kubeconfig=kubeconfig,
                                           log_dir=out / "operator-logs")
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
