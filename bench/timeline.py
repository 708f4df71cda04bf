"""Where a burst of MPIJobs spends its time: each MPIJob's objects, watched cluster-wide, and the
moment (local clock) each reaches each stage, as percentiles per stage from the first MPIJob seen
(docs/architecture.md section 7.1). A diagnostic beside the benchmarks, not one of their figures.

Stages, per MPIJob of a namespace whose name starts with the prefix (`bench-` by default):
`mpijob_seen`; `<role>_job_seen` (the launcher and worker Jobs); `<role>_pod_seen`, `_bound`,
`_running`, `_ready` (the first pod of each role); `worker_ready_n<k>` (the k-th worker pod Ready);
`worker_job_allready` (the worker Job counting every worker Ready); `mj_<condition>` (each
condition of the MPIJob first True). The Go operator's objects show too (its workers are bare pods).

    python -m bench.timeline --out timeline.json     # until interrupted (SIGINT or SIGTERM)
    python -m bench.timeline --report timeline.json
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path

from bench.bench_operator import JOB_NAME_LABEL, ROLE_LABEL, Watch, _condition, _pct
from client.resources import JOBS, MPIJOBS, PODS
from client.rest import RestClient
from testsupport.paths import CLUSTER_DIR

Stages = dict[str, float]


class Timeline:
    def __init__(self, prefix: str = "bench-") -> None:
        self.prefix = prefix
        self.stages: dict[tuple[str, str], Stages] = {}
        self._ready_pods: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()

    def _key(self, obj: dict, name: str | None = None) -> tuple[str, str] | None:
        meta = obj["metadata"]
        ns = meta.get("namespace") or ""
        owner = name or (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        return (ns, owner) if ns.startswith(self.prefix) and owner else None

    def _mark(self, key: tuple[str, str], stage: str, t: float) -> None:
        self.stages.setdefault(key, {}).setdefault(stage, t)

    def on_pod(self, _typ: str, pod: dict, t: float) -> None:
        key = self._key(pod)
        if key is None:
            return
        role = (pod["metadata"].get("labels") or {}).get(ROLE_LABEL)
        with self._lock:
            self._mark(key, f"{role}_pod_seen", t)
            if (pod.get("spec") or {}).get("nodeName"):
                self._mark(key, f"{role}_pod_bound", t)
            if (pod.get("status") or {}).get("phase") == "Running":
                self._mark(key, f"{role}_pod_running", t)
            if _condition(pod, "Ready"):
                self._mark(key, f"{role}_pod_ready", t)
                if role == "worker":
                    ready = self._ready_pods.setdefault(key, set())
                    ready.add(pod["metadata"]["name"])
                    self._mark(key, f"worker_ready_n{len(ready)}", t)

    def on_job(self, _typ: str, job: dict, t: float) -> None:
        key = self._key(job)
        if key is None:
            return
        role = (job["metadata"].get("labels") or {}).get(ROLE_LABEL)
        st = job.get("status") or {}
        with self._lock:
            self._mark(key, f"{role}_job_seen", t)
            if role == "worker" and int(st.get("ready") or 0) >= int((job.get("spec") or {}).get("parallelism") or 0):
                self._mark(key, "worker_job_allready", t)

    def on_mpijob(self, _typ: str, mpijob: dict, t: float) -> None:
        key = self._key(mpijob, mpijob["metadata"]["name"])
        if key is None:
            return
        with self._lock:
            self._mark(key, "mpijob_seen", t)
            for c in (mpijob.get("status") or {}).get("conditions") or []:
                if c.get("status") == "True":
                    self._mark(key, f"mj_{c.get('type')}", t)

    def dump(self) -> dict[str, Stages]:
        with self._lock:
            return {f"{ns}/{name}": dict(s) for (ns, name), s in self.stages.items()}


def report(data: dict[str, Stages]) -> str:
    """Per namespace, each stage's min/p50/p95/max in seconds from its first MPIJob seen, in the
    order of their medians."""
    by_ns: dict[str, list[Stages]] = {}
    for key, stages in data.items():
        if "mpijob_seen" in stages:  # objects seen from before the timeline started have no MPIJob
            by_ns.setdefault(key.split("/")[0], []).append(stages)
    lines = []
    for ns, items in sorted(by_ns.items()):
        t0 = min(s["mpijob_seen"] for s in items)
        names = {n for s in items for n in s}
        rows = []
        for n in names:
            xs = sorted(s[n] - t0 for s in items if n in s)
            rows.append((_pct(xs, 0.50), n, xs))
        lines.append(f"{ns}: {len(items)} MPIJobs (seconds from the first seen)")
        for p50, n, xs in sorted(rows):
            lines.append(f"  {n:24s} n={len(xs):5d}  min {xs[0]:7.2f}  p50 {p50:7.2f}  "
                         f"p95 {_pct(xs, 0.95):7.2f}  max {xs[-1]:7.2f}")
    return "\n".join(lines)


def record(out: Path, kubeconfig: str, prefix: str) -> None:
    client = RestClient.from_kubeconfig(kubeconfig)
    tl = Timeline(prefix)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    watches = [Watch(client, PODS, "", tl.on_pod).start(), Watch(client, JOBS, "", tl.on_job).start(),
               Watch(client, MPIJOBS, "", tl.on_mpijob).start()]
    print(f">> recording a timeline of {prefix}* namespaces; interrupt to write {out}", flush=True)
    while not stop.wait(0.5):
        pass
    for w in watches:
        w.stop()
    out.write_text(json.dumps(tl.dump()))
    print(report(tl.dump()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="record until interrupted, then write the stages there")
    ap.add_argument("--report", type=Path, help="print the table of a recorded timeline")
    ap.add_argument("--prefix", default="bench-")
    ap.add_argument("--kubeconfig", default=str(CLUSTER_DIR / "kubeconfig"))
    a = ap.parse_args()
    if a.report:
        print(report(json.loads(a.report.read_text())))
    elif a.out:
        record(a.out, a.kubeconfig, a.prefix)
    else:
        ap.error("--out or --report")


if __name__ == "__main__":
    main()
