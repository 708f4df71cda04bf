"""This operator beside the Kubeflow MPI Operator (Go) v0.8.2 on the same cases, what `make bench` prints
first (docs/architecture.md section 7.1; docs/figures.md):

- runs interleaved, case by case: this operator (Job backend), the Go operator (plain worker pods),
  this operator's StatefulSet backend, then again, RUNS times, so that whatever else the shared
  machine does falls on both alike;
- every run is bench_operator.run_one: a fresh namespace and operator process, the same
  ServiceAccount, flags (--threadiness=8 --kube-api-qps=500 --kube-api-burst=1000), kwok pods and
  audit-log meter for both operators;
- each figure as this / Go: the ratio of each interleaved pair (run i of this, run i of Go), shown as
  min / median / max over the runs, beside each side's own min-median-max.

    python -m bench.side_by_side [--pairs 2:100,8:100,2:1000] [--runs 3] [--no-statefulset] [--no-go]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench import apiserver_meter as meter
from bench import bench_operator, go_operator
from bench.bench_operator import GO, Case
from client.rest import RestClient
from testsupport.paths import ROOT

PAIRS = ((2, 100), (8, 100), (2, 1000))  # (workers, MPIJobs): the cases
RUNS = 3
# 1000 MPIJobs of 2 workers take 2-3 minutes a run: the StatefulSet backend, compared with nothing,
# runs once there (BIG_STATEFULSET_RUNS) so that `make bench` stays under an hour on 2 cores.
BIG = 1000
BIG_STATEFULSET_RUNS = 1
# (label, path in a run's result, higher is better): what the table shows, in this order
FIGURES = (
    ("MPIJobs Running/s", "running_per_s", True),
    ("Running latency p50 (s)", "running_latency_watch_s.p50", False),
    ("Running latency p95 (s)", "running_latency_watch_s.p95", False),
    ("CPU ms per MPIJob", "operator_cpu_ms_per_mpijob", False),
    ("peak RSS MiB", "operator_peak_rss_mib", False),
    ("writes per MPIJob", "apiserver.writes_per_mpijob", False),
    # what the cluster spends on an MPIJob (the controllers, scheduler and kwok as well as the operator):
    # on 2 cores, what bounds MPIJobs per second (docs/architecture.md section 7.1)
    ("writes per MPIJob, every client", "cluster_writes_per_mpijob", False),
    # the CPU of the cluster's own processes per MPIJob: to the last Running (both cores busy, so it
    # follows the run's length), and to quiet, every write of the burst done (its idle CPU while the
    # operator's writes settle counted too: a second or two more for the Go operator)
    ("cluster CPU ms per MPIJob, to Running", "cluster_cpu_ms_per_mpijob_to_running", False),
    ("cluster CPU ms per MPIJob, to quiet", "cluster_cpu_ms_per_mpijob", False),
)
# The side-by-side runs skip the steady-state wait (bench_operator's 20 s of nothing, counted by the
# whole matrix): it is no figure here and would add a minute per case.
STEADY_S = 0.0


def pairs_of(spec: str) -> list[tuple[int, int]]:
    """'2:100,8:100' -> [(2, 100), (8, 100)] (workers:MPIJobs)."""
    out = []
    for item in filter(None, spec.split(",")):
        workers, _, n = item.partition(":")
        if not workers.isdigit() or not n.isdigit():
            raise ValueError(f"{item!r}: expected workers:MPIJobs, e.g. 2:100")
        out.append((int(workers), int(n)))
    return out


def schedule(pairs: list[tuple[int, int]], runs: int, go: bool = True, statefulset: bool = True,
             big_statefulset_runs: int | None = None) -> list[Case]:
    """The runs in order: per case, (this with Jobs, Go, this with StatefulSets) `runs` times over; the
    StatefulSet backend, which is compared with nothing, in the first `big_statefulset_runs` rounds
    only for cases of BIG MPIJobs or more (None: every round)."""
    out = []
    for w, n in pairs:
        for i in range(runs):
            out += [Case("job", w, n)] + ([Case(GO, w, n)] if go else [])
            if statefulset and (big_statefulset_runs is None or n < BIG or i < big_statefulset_runs):
                out.append(Case("statefulset", w, n))
    return out


def spread(values: list[float]) -> dict | None:
    """min, median, max of the values given (None: not measured)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals), "n": len(vals)}


def ratios(this: list[float | None], go: list[float | None]) -> dict | None:
    """this / Go of each interleaved pair (run i with run i), as a spread."""
    return spread([a / b for a, b in zip(this, go, strict=False) if a is not None and b])


def _get(r: dict, path: str) -> float | None:
    for part in path.split("."):
        r = r.get(part) if isinstance(r, dict) else None
    return r


def summarize(results: list[dict]) -> list[dict]:
    """Per case (workers, MPIJobs) and figure: each side's spread and the ratios to Go."""
    out = []
    keys = sorted({(r["workers"], r["mpijobs"]) for r in results}, key=lambda k: (k[1], k[0]))
    for workers, n in keys:
        side = {b: [r for r in results if (r["workers"], r["mpijobs"], r["backend"]) == (workers, n, b)]
                for b in ("job", GO, "statefulset")}
        figures = []
        for label, path, higher in FIGURES:
            vals = {b: [_get(r, path) for r in rs] for b, rs in side.items()}
            figures.append({"figure": label, "path": path, "higher_is_better": higher,
                            **{b: spread(v) for b, v in vals.items()},
                            "job_over_go": ratios(vals["job"], vals[GO]),
                            "statefulset_over_go": ratios(vals["statefulset"], vals[GO])})
        out.append({"workers": workers, "mpijobs": n, "runs": {b: len(rs) for b, rs in side.items()},
                    "figures": figures})
    return out


def merged(spec: str) -> list[dict]:
    """The runs of 'FILE[:backend+backend],...': each file's runs, of the backends named if any. A
    file is this module's JSON or `make bench`'s (bench/results/*.json), whose side_by_side it holds."""
    out = []
    for item in filter(None, spec.split(",")):
        path, _, backends = item.partition(":")
        keep = set(backends.split("+")) if backends else None
        data = json.loads(Path(path).read_text())
        runs = data.get("side_by_side", data)["results"]
        out += [r for r in runs if keep is None or r["backend"] in keep]
    return out


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def fmt_spread(s: dict | None, ratio: bool = False) -> str:
    """'13.5 (12.1-14.0)': the median, then min-max; ratios as '0.85x (0.80-0.90)'; '-' if none."""
    if not s:
        return "-"
    mark = "x" if ratio else ""
    if s["n"] == 1:
        return f"{s['median']:.2f}{mark}" if ratio else _num(s["median"])
    if ratio:
        return f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"
    return f"{_num(s['median'])} ({_num(s['min'])}-{_num(s['max'])})"


def render(summary: list[dict], note: str = "") -> str:
    """A Markdown table: per case and figure, this (Job backend) / Go / ratio, and the StatefulSet backend."""
    lines = ["| case | figure | this, Job backend | Go v0.8.2, plain pods | this / Go (Job) | "
             "this, StatefulSet backend | StatefulSet / Go |",
             "|---|---|---|---|---|---|---|"]
    for case in summary:
        runs = case["runs"]
        label = (f"{case['mpijobs']} x {case['workers']} ({runs['job']}/{runs[GO]}/{runs['statefulset']} runs)")
        for f in case["figures"]:
            lines.append(f"| {label} | {f['figure']} | {fmt_spread(f['job'])} | {fmt_spread(f[GO])} | "
                         f"{fmt_spread(f['job_over_go'], True)} | {fmt_spread(f['statefulset'])} | "
                         f"{fmt_spread(f['statefulset_over_go'], True)} |")
            label = ""
    if note:
        lines += ["", note]
    return "\n".join(lines)


def run(pairs: list[tuple[int, int]] | tuple = PAIRS, runs: int = RUNS, go: bool = True, statefulset: bool = True,
        kubeconfig: str | None = None, log_dir: Path | None = None, partial: Path | None = None) -> dict:
    """Every run of schedule(), in order; timeouts as bench_operator.run's. `partial`: a JSON file
    rewritten with the runs so far after each one, so that an interrupted benchmark still counts."""
    cases = schedule(list(pairs), runs, go, statefulset, BIG_STATEFULSET_RUNS)
    admin = bench_operator.ensure_cluster(kubeconfig)
    client = RestClient.from_kubeconfig(admin, qps=0, burst=1)
    audit = meter.AuditMeter.of_cluster(Path(os.environ.get("CLUSTER_DIR") or Path(admin).resolve().parent))
    operator_root = Path(os.environ.get("BENCH_OPERATOR_ROOT") or ROOT).resolve()
    go_build = None
    if go:
        print(">> hack/build-mpi-operator-go.sh", file=sys.stderr, flush=True)
        go_build = go_operator.build()
    tmp = Path(tempfile.mkdtemp(prefix="bench-side-"))
    logs = Path(log_dir) if log_dir else tmp
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        sa = bench_operator.operator_kubeconfig(tmp / "operator.kubeconfig", admin)
        for i, case in enumerate(cases):
            pods = case.mpijobs * (case.workers + 1)
            print(f">> run {i + 1} of {len(cases)}", file=sys.stderr, flush=True)
            results.append(bench_operator.run_one(
                client, sa, case, logs, 120 + 0.05 * pods, cleanup_wait_s=0 if i == len(cases) - 1 else 900,
                audit=audit, operator_root=operator_root, steady_s=STEADY_S, go_build=go_build))
            if partial is not None:
                partial.write_text(json.dumps({"results": results, "summary": summarize(results)}, indent=2) + "\n")
    except BaseException:
        print(f"bench: operator logs kept in {logs}", file=sys.stderr)
        raise
    finally:
        with contextlib.suppress(OSError):
            (tmp / "operator.kubeconfig").unlink()  # a token: not kept
        if log_dir is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"benchmark": "side_by_side", "go_version": go_operator.VERSION if go else None,
            "operator_root": str(operator_root), "operator_commit": bench_operator._commit(operator_root),
            "flags": list(bench_operator.OPERATOR_FLAGS), "go_queue_flags": list(go_operator.QUEUE_FLAGS),
            "runs": runs, "cpus": os.cpu_count(), "results": results, "summary": summarize(results)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default=None, help="workers:MPIJobs,... (default: 2:100,8:100,2:1000)")
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--no-statefulset", action="store_true")
    ap.add_argument("--no-go", action="store_true", help="this operator alone (no Go build, no Go runs)")
    ap.add_argument("--out", default=None, help="write the JSON there (<out>.partial after each run)")
    ap.add_argument("--from-json", default=None,
                    help="print the table of JSON written before: FILE[:backend+backend],... (e.g. "
                         "after.json:job+statefulset,before.json:go: one side's runs from another run)")
    ap.add_argument("--log-dir", default=None)
    a = ap.parse_args()
    if a.from_json:
        print(render(summarize(merged(a.from_json))))
        return 0
    try:
        pairs = pairs_of(a.pairs) if a.pairs else list(PAIRS)
    except ValueError as e:
        ap.error(str(e))
    out = run(pairs, a.runs, go=not a.no_go, statefulset=not a.no_statefulset,
              log_dir=a.log_dir and Path(a.log_dir), partial=a.out and Path(a.out + ".partial"))
    print(render(out["summary"], f"{out['cpus']} cores shared with other work; operator {out['operator_commit']}"))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
