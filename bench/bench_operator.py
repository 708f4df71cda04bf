"""Benchmark of the whole operator on the local cluster (not a timed test), per worker backend and
number of MPIJobs submitted at once (docs/architecture.md section 7.1):

- throughput: MPIJobs brought to condition Running=True per second, from the first create sent to
  the last Running seen by a watch;
- latency, MPIJob submitted -> its launcher Job created: from server timestamps (creationTimestamps,
  one-second resolution) and from local clocks (create request sent -> launcher Job seen by a watch);
  p50, p95, max;
- API requests and writes per MPIJob, by verb and kind, counted by the API server (its audit log of the
  operator's ServiceAccount: bench/apiserver_meter.py), Events included; next to them the operator's
  own counts (its /metrics: rest_client_requests_total by method, mpi_operator_api_writes_total by
  verb), which must agree;
- the writes every client of the API server made per MPIJob (its apiserver_request_total: the
  operator's, the Job and StatefulSet controllers', the scheduler's, kwok's), which with the writes/s
  the API server sustains (bench/bench_cluster.py) bound the MPIJobs a second any operator gets here,
  this one's and, with its writes in place of this one's, the Go operator's (GO_WRITES_PER_MPIJOB);
- steady state: the writes in STEADY_SECONDS once every MPIJob is Running and the operator quiet (0
  with leader election off; one run with it on, where the Lease renewals alone are expected);
- CPU seconds (user+system, /proc/<pid>/stat) of the operator process, its peak RSS (VmHWM), its RSS
  when ready with nothing to do, and its RSS once every MPIJob is synced and the operator is quiet;
  optionally (--profile) where that CPU goes, from py-spy (bench/profile.py).

Each run has a fresh namespace and a fresh operator process (`python -m controller`) that
authenticates as the ServiceAccount of manifests/rbac (hack/operator-kubeconfig.sh). Pods are
simulated by kwok; launchers are annotated to "run" 10 minutes, so every MPIJob stays Running. The
MPIJobs use launcherCreationPolicy AtStartup (the API's default), so the launcher latency is the
operator's, not the time kwok takes to make the workers ready.

    python -m bench.bench_operator [--cases job:2:100,statefulset:8:100,...]

BENCH_OPERATOR_ROOT=<checkout> runs that checkout's operator instead (a before/after comparison with
the same benchmark).

Uses $KUBECONFIG or .cluster/kubeconfig; starts the local cluster (hack/cluster-up.sh, REAL_NODE=0
unless set) when it is not up. Fails (RuntimeError) with the MPIJobs that did not get to Running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench import apiserver_meter as meter
from bench import cpu_profile, go_operator
from client.errors import ApiError
from client.resources import JOBS, MPIJOBS, NAMESPACES, PODS, Resource
from client.rest import RestClient
from reconcilers.names import ATTEMPT_RECORD_FINALIZER
from testsupport import builders
from testsupport.operator_process import OperatorProcess, parse_metrics, proc_stats, sum_by
from testsupport.paths import CLUSTER_DIR, ROOT

BACKENDS = ("job", "statefulset")
GO = "go"  # the Kubeflow MPI Operator (Go) v0.8.2, plain worker pods (bench/go_operator.py)


@dataclass(frozen=True)
class Case:
    backend: str
    workers: int
    mpijobs: int
    leader_elect: bool = False

    @property
    def label(self) -> str:
        return f"{self.backend[:3]} w={self.workers} n={self.mpijobs}" + (" LE" if self.leader_elect else "")

    @property
    def is_go(self) -> bool:
        return self.backend == GO


# Both backends at 2 and 8 workers with 100 MPIJobs and at 2 with 1000, the default backend at 8
# with 1000 too (9,000 pods: the StatefulSet run of that size would add ten minutes), 64 workers with
# 10 MPIJobs (writes must not grow with the workers), one MPIJob alone (latency), and one run with
# leader election on (its steady state writes the Lease renewals alone).
MATRIX = tuple(
    [Case(b, 2, 1) for b in BACKENDS]
    + [Case(b, w, n) for b in BACKENDS for w, n in ((2, 100), (8, 100), (64, 10), (2, 1000))]
    + [Case("job", 8, 1000), Case("job", 2, 10, leader_elect=True)])
STEADY_SECONDS = 20.0
PROFILED = Case("job", 8, 100)  # --profile samples this run's operator
# Writes per MPIJob (Events included) of the Kubeflow MPI Operator v0.8.2, by 2 and 8 workers, counted
# by a neutral proxy on this cluster (issue 16): what "a controller sending the Go operator's writes"
# is bounded by, at the writes/s the API server sustains here (bench/bench_cluster.py).
GO_WRITES_PER_MPIJOB = {2: 21.0, 8: 29.9}
ROLE_LABEL = "training.kubeflow.org/job-role"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
LAUNCHER_POLICY = "AtStartup"
SUBMIT_THREADS = 16
OPERATOR_FLAGS = ("--threadiness=8", "--kube-api-qps=500", "--kube-api-burst=1000", "--log-format=json",
                  "--log-level=info")


# --- the cluster -------------------------------------------------------------------------------------

def ensure_cluster(kubeconfig: str | None = None) -> str:
    """The admin kubeconfig of a reachable cluster; starts the local one (hack/cluster-up.sh) if needed."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(CLUSTER_DIR / "kubeconfig")
    if Path(path).exists():
        try:
            RestClient.from_kubeconfig(path).request("GET", "/version", timeout=5)
            return path
        except Exception as e:  # any failure means: not up
            print(f">> cluster at {path} not reachable ({type(e).__name__})", file=sys.stderr)
    if kubeconfig or os.environ.get("KUBECONFIG"):
        raise RuntimeError(f"the cluster of {path} is not reachable")
    print(">> hack/cluster-up.sh", file=sys.stderr, flush=True)
    subprocess.run([str(ROOT / "hack" / "cluster-up.sh")], check=True,
                   env={**os.environ, "REAL_NODE": os.environ.get("REAL_NODE", "0")})
    return str(CLUSTER_DIR / "kubeconfig")


def operator_kubeconfig(out: Path, admin_kubeconfig: str) -> str:
    """hack/operator-kubeconfig.sh: CRD and RBAC applied, a kubeconfig with the ServiceAccount's token."""
    cluster_dir = Path(admin_kubeconfig).resolve().parent
    env = {**os.environ, "CLUSTER_DIR": os.environ.get("CLUSTER_DIR", str(cluster_dir))}
    r = subprocess.run([str(ROOT / "hack" / "operator-kubeconfig.sh"), str(out)], capture_output=True, text=True,
                       timeout=180, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"hack/operator-kubeconfig.sh failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return str(out)


def mpijob(name: str, *, workers: int = 2, run_for: str = "600s") -> dict:
    """An MPIJob for simulated (kwok) pods whose launcher keeps running for `run_for`."""
    return builders.simulated_mpijob(name, workers=workers, launcher_runs=run_for, policy=LAUNCHER_POLICY,
                                     labels={"bench": "1"})


# --- watching ----------------------------------------------------------------------------------------

class Watch:
    """A watch on one resource in one namespace, calling on_event(type, obj, local receive time) from its
    own thread as soon as each event is read (no informer queue in between)."""

    def __init__(self, client: RestClient, res: Resource, ns: str,
                 on_event: Callable[[str, dict, float], None], selector: str | None = None) -> None:
        self.client, self.res, self.ns, self.on_event, self.selector = client, res, ns, on_event, selector
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._stream = None
        self._rv = self._list()
        self._thread = threading.Thread(target=self._loop, name=f"watch-{res.plural}", daemon=True)

    def _list(self) -> str:
        for attempt in range(60):  # a CRD just established answers 429 while its storage initializes
            try:
                body = self.client.request("GET", self.res.path(self.ns), query={"labelSelector": self.selector})
                break
            except ApiError as e:
                if e.status not in (429, 500, 503, 504) or attempt == 59:
                    raise
                time.sleep(e.retry_after or 0.5)
        t = time.monotonic()
        for item in body.get("items") or []:
            self.on_event("ADDED", item, t)
        return body["metadata"]["resourceVersion"]

    def start(self) -> Watch:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                query = {"resourceVersion": self._rv, "allowWatchBookmarks": True, "timeoutSeconds": 120,
                         "labelSelector": self.selector}
                self._stream = self.client.stream(self.res.path(self.ns), query=query, timeout=150)
                for ev in self._stream:
                    t = time.monotonic()
                    if ev["type"] == "ERROR":
                        if (ev.get("object") or {}).get("code") == 410:  # expired: list again
                            self._rv = self._list()
                            break
                        raise ApiError.from_status(ev.get("object") or {})
                    self._rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        self.on_event(ev["type"], ev["object"], t)
            except Exception as e:  # reconnect; counted and reported
                if self._stop.is_set():
                    return
                self.errors.append(f"{type(e).__name__}: {e}"[:200])
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.shutdown()
        self._thread.join(5)


# --- one run -----------------------------------------------------------------------------------------

def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values), max(1, math.ceil(q * len(values)))) - 1]  # nearest rank


def _dist(values: list[float], digits: int = 3) -> dict:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, digits)
    return {"p50": r(_pct(values, 0.50)), "p95": r(_pct(values, 0.95)), "max": r(max(values, default=None)),
            "n": len(values)}


def _condition(obj: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _ts(obj: dict) -> float:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"]).timestamp()


def _delta(after: dict[str, float], before: dict[str, float], n: int) -> dict[str, float]:
    return {k: round((after.get(k, 0.0) - before.get(k, 0.0)) / n, 2) for k in sorted(set(after) | set(before))
            if after.get(k, 0.0) != before.get(k, 0.0)}


def _wait_quiet(audit: meter.AuditMeter, mark: meter.Mark, ns: str, quiet_s: float = 3.0,
                timeout: float = 120) -> float:
    """Waits until the API server records no request of the operator in `ns` for `quiet_s` seconds;
    returns how long that took. (The audit log, not the operator's /metrics: scraping those twice a
    second would be CPU of the benchmark's making, counted as the operator's.)"""
    t0 = time.monotonic()
    last, since = None, time.monotonic()
    while time.monotonic() - t0 < timeout:
        total = len(audit.events(mark, ns))
        if total != last:
            last, since = total, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.5)
    return round(time.monotonic() - t0, 1)


def cleanup_namespace(client: RestClient, ns: str, wait_s: float) -> float:
    """Deletes the namespace, then force-deletes its pods (a terminating namespace gets no new ones), so
    that the simulated nodes' pod capacity is free for the next run. Waits up to `wait_s` (0: no wait)
    for the namespace to be gone, every object in it deleted, so that the namespace and garbage
    collectors' deletes are no load on the next run (they were a few seconds of both cores, and fell
    on whichever operator ran next). Returns the seconds waited."""
    t0 = time.monotonic()
    with contextlib.suppress(ApiError):
        client.request("DELETE", NAMESPACES.path(None, ns))
    # the launcher pods its operator (stopped by now) held for their record (reconcilers/failure/hold.py)
    release = {"metadata": {"$deleteFromPrimitiveList/finalizers": [ATTEMPT_RECORD_FINALIZER]}}
    with contextlib.suppress(Exception):
        for pod in client.request("GET", PODS.path(ns)).get("items") or []:
            if ATTEMPT_RECORD_FINALIZER in (pod["metadata"].get("finalizers") or []):
                with contextlib.suppress(ApiError):
                    client.request("PATCH", PODS.path(ns, pod["metadata"]["name"]), body=release,
                                   content_type="application/strategic-merge-patch+json")
    while True:
        # thousands of pods outlast the API server's request timeout (it hangs up): repeat until none is left
        with contextlib.suppress(Exception):
            client.request("DELETE", PODS.path(ns), query={"gracePeriodSeconds": 0}, timeout=120)
        if time.monotonic() - t0 >= wait_s:
            return round(time.monotonic() - t0, 1)
        try:
            client.request("GET", NAMESPACES.path(None, ns))
        except ApiError as e:
            if e.status != 404:
                raise
            return round(time.monotonic() - t0, 1)
        time.sleep(1)


def _audit(audit: meter.AuditMeter, mark: meter.Mark, ns: str | None, n: int) -> dict:
    """The API server's count of the operator's requests since `mark` (in `ns`), per MPIJob."""
    audit.settle()
    counts = audit.count(mark, ns)
    writes = meter.writes(counts)
    return {"requests_per_mpijob": round(sum(counts.values()) / n, 2),
            "writes_per_mpijob": round(sum(writes.values()) / n, 2),
            "writes_per_mpijob_by_verb_kind": meter.per(writes, n),
            "reads_per_mpijob_by_verb_kind": meter.per(counts - writes, n)}


CLUSTER_WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION")


def cluster_writes(client: RestClient) -> dict[str, float]:
    """Every client's writes the API server has served (its apiserver_request_total), by
    verb and resource: what one MPIJob costs the whole cluster, the operator's share included."""
    out: dict[str, float] = {}
    for name, labels, value in parse_metrics(client.get_text("/metrics")):
        if name == "apiserver_request_total" and labels.get("verb") in CLUSTER_WRITE_VERBS:
            key = f"{labels['verb']} {labels.get('resource') or '-'}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else "")
            out[key] = out.get(key, 0.0) + value
    return out


def cluster_cpu(pids_dir: Path = CLUSTER_DIR / "pids") -> dict[str, float]:
    """CPU seconds (user+system) so far of each of the local cluster's processes, by name: etcd, the
    API server, the controller manager, the scheduler, kwok (and the real node's, idle in these
    runs); empty for a cluster that is not the local one. Their CPU per MPIJob is what an operator's
    MPIJobs cost the cluster: on 2 cores saturated by a burst, MPIJobs Running/s is about the cores
    the operator leaves, divided by that (docs/architecture.md section 7.1)."""
    out: dict[str, float] = {}
    for pid_file in sorted(pids_dir.glob("*.pid")):
        with contextlib.suppress(OSError, ValueError):
            out[pid_file.stem] = proc_stats(int(pid_file.read_text().strip()))["cpu_s"]
    return out


def _cluster_ms(after: dict[str, float], before: dict[str, float], n: int) -> dict[str, float]:
    """Per process, the CPU ms per MPIJob between two cluster_cpu() readings (a process restarted
    between them is left out rather than counted negative)."""
    return {k: round(1000 * (after[k] - before[k]) / n, 1) for k in after
            if k in before and after[k] > before[k]}


def _cluster_total_ms(after: dict[str, float], before: dict[str, float], n: int) -> float | None:
    """The cluster's CPU ms per MPIJob between two readings; None when none could be read (a cluster
    that is not the local one), not 0."""
    return round(sum(_cluster_ms(after, before, n).values()), 1) if before else None


def run_one(client: RestClient, sa_kubeconfig: str, case: Case, log_dir: Path, timeout: float,
            cleanup_wait_s: float, audit: meter.AuditMeter, operator_root: Path = ROOT,
            profile_dir: Path | None = None, steady_s: float = STEADY_SECONDS, go_build: tuple | None = None) -> dict:
    """One run of `case`: a fresh namespace and operator process (the Go operator's for backend "go",
    `go_build` being go_operator.build()'s answer), every MPIJob submitted at once."""
    backend, n, workers = case.backend, case.mpijobs, case.workers
    ns = f"bench-{backend[:3]}-{workers}-{n}-{uuid.uuid4().hex[:5]}"
    print(f">> operator benchmark: {case.label}, namespace {ns}", file=sys.stderr, flush=True)
    client.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
    lock = threading.Lock()
    sent: dict[str, float] = {}
    acked: dict[str, float] = {}
    launcher_seen: dict[str, float] = {}
    running_seen: dict[str, float] = {}
    failed: dict[str, str] = {}
    all_running = threading.Event()

    def on_job(typ: str, obj: dict, t: float) -> None:
        owner = (obj["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
        if owner and typ in ("ADDED", "MODIFIED"):
            with lock:
                launcher_seen.setdefault(owner, t)

    def on_mpijob(typ: str, obj: dict, t: float) -> None:
        name = obj["metadata"]["name"]
        with lock:
            if _condition(obj, "Running"):
                running_seen.setdefault(name, t)
                if len(running_seen) >= n:
                    all_running.set()
            if _condition(obj, "Failed"):
                failed[name] = next(f"{c.get('reason')}: {c.get('message')}" for c in obj["status"]["conditions"]
                                    if c.get("type") == "Failed")

    watches: list[Watch] = []
    op: OperatorProcess | go_operator.GoOperatorProcess | None = None
    scope = contextlib.ExitStack()
    prof: cpu_profile.Profiler | None = None
    result: dict = {"backend": backend, "workers": workers, "mpijobs": n, "leader_elect": case.leader_elect,
                    "label": case.label, "namespace": ns}
    try:
        watches.append(Watch(client, JOBS, ns, on_job, selector=f"{ROLE_LABEL}=launcher").start())
        watches.append(Watch(client, MPIJOBS, ns, on_mpijob).start())
        flags = (*OPERATOR_FLAGS, "--leader-elect") if case.leader_elect else OPERATOR_FLAGS
        log_name = f"operator-{backend}-w{workers}-n{n}{'-le' if case.leader_elect else ''}-{ns[-5:]}"
        if case.is_go:
            if go_build is None:
                raise ValueError("a Go case needs go_operator.build()'s binary and module")
            scope.enter_context(go_operator.bound_role(client, go_build[1]))
            lock_ns = scope.enter_context(_scratch_namespace(client, f"{ns}-lock", cleanup_wait_s))
            op = go_operator.GoOperatorProcess(go_build[0], sa_kubeconfig, ns, lock_ns, log_dir / f"{log_name}.log",
                                               OPERATOR_FLAGS)
        else:
            op = OperatorProcess(sa_kubeconfig, backend, ns, log_dir / f"{log_name}.log", flags,
                                 root=operator_root)
        result["operator_ready_s"] = round(op.wait_ready(), 2)
        time.sleep(1)  # the first resync-free moment after the caches synced
        if profile_dir is not None:
            prof = cpu_profile.Profiler(op.proc.pid, profile_dir / f"{log_name}.raw")
        idle, m0, mark, cw0 = op.stats(), op.metrics(), audit.mark(), cluster_writes(client)
        cc0 = cluster_cpu()

        def submit(i: int) -> None:
            name = f"mj-{i:04d}"
            body = mpijob(name, workers=workers)
            for attempt in range(10):
                t = time.monotonic()
                try:
                    client.request("POST", MPIJOBS.path(ns), body=body)
                except ApiError as e:
                    if e.status in (429, 500, 503, 504) and attempt < 9:
                        time.sleep(e.retry_after or 0.2)
                        continue
                    raise
                with lock:
                    sent[name], acked[name] = t, time.monotonic()
                return

        t_first = time.monotonic()
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            list(pool.map(submit, range(n)))
        t_submitted = time.monotonic()
        deadline = t_submitted + timeout
        while not all_running.wait(1):
            op.check_alive()
            if time.monotonic() > deadline or len(failed) > 0:
                with lock:
                    missing = sorted(set(sent) - set(running_seen))
                detail = []
                for name in missing[:5]:
                    with contextlib.suppress(ApiError):
                        obj = client.request("GET", MPIJOBS.path(ns, name))
                        detail.append(f"  {name}: " + json.dumps((obj.get("status") or {}).get("conditions")))
                raise RuntimeError(
                    f"{len(missing)} of {n} MPIJobs ({backend} backend, namespace {ns}) not Running "
                    f"{time.monotonic() - t_submitted:.0f}s after the last create (timeout {timeout:.0f}s); "
                    f"Failed: {dict(list(failed.items())[:5])}; not Running: {missing[:20]}\n" + "\n".join(detail)
                    + f"\nwatch errors: {[w.errors[-3:] for w in watches]}\noperator log {op.log_path}:\n{op.tail()}")
        with lock:
            t_last_running = max(running_seen.values())
        busy, cc_busy = op.stats(), cluster_cpu()
        result["quiet_after_running_s"] = _wait_quiet(audit, mark, ns)
        settled, m1, cc_settled = op.stats(), op.metrics(), cluster_cpu()
        if prof is not None:
            prof.stop()
            result["profile"] = cpu_profile.summarize(prof.out)
            prof = None
        result["apiserver"] = _audit(audit, mark, ns, n)
        cw = _delta(cluster_writes(client), cw0, 1)
        cw["POST mpijobs"] = cw.get("POST mpijobs", 0) - n  # the benchmark's own creates
        result["cluster_writes_per_mpijob"] = round(sum(cw.values()) / n, 1)
        result["cluster_writes_per_mpijob_by_kind"] = {k: round(v / n, 2) for k, v in sorted(cw.items()) if v}
        # steady state: every MPIJob Running, nothing changes; with leader election on, the Lease (in its
        # own namespace) is the one write expected, so that run counts the operator's writes anywhere
        steady = audit.mark()
        time.sleep(steady_s)
        audit.settle()
        result["steady_writes"] = meter.per(meter.writes(audit.count(
            steady, None if case.leader_elect else ns)), 1)
        result["steady_writes_total"] = sum(result["steady_writes"].values())

        jobs = {o["metadata"]["name"]: o for o in client.request("GET", MPIJOBS.path(ns))["items"]}
        launchers = {(o["metadata"].get("labels") or {}).get(JOB_NAME_LABEL): o for o in client.request(
            "GET", JOBS.path(ns), query={"labelSelector": f"{ROLE_LABEL}=launcher"})["items"]}
        server_lat = [_ts(launchers[k]) - _ts(v) for k, v in jobs.items() if k in launchers]
        watch_lat = [launcher_seen[k] - sent[k] for k in sent if k in launcher_seen]
        running_lat = [running_seen[k] - sent[k] for k in sent if k in running_seen]
        req0, req1 = (sum_by(m, "rest_client_requests_total", "method") for m in (m0, m1))
        wr0, wr1 = (sum_by(m, "mpi_operator_api_writes_total", "verb") for m in (m0, m1))
        # where the CPU goes: the reconciles and the watch events an MPIJob costs (none for the Go operator)
        rc0, rc1 = (sum_by(m, "mpi_operator_reconcile_duration_seconds_count", "") for m in (m0, m1))
        ev0, ev1 = (sum_by(m, "informer_events_total", "resource") for m in (m0, m1))
        result.update({
            "submit_s": round(t_submitted - t_first, 2),
            "creates_per_s": round(n / max(t_submitted - t_first, 1e-9), 1),
            "all_running_s": round(t_last_running - t_first, 2),
            "running_per_s": round(n / max(t_last_running - t_first, 1e-9), 2),
            "launcher_latency_server_s": _dist(server_lat, 0),
            "launcher_latency_watch_s": _dist(watch_lat),
            "running_latency_watch_s": _dist(running_lat),
            "create_ack_s": _dist([acked[k] - sent[k] for k in sent]),
            # the Go operator has no metrics of ours: the audit log's counts alone (None here)
            "api_requests_per_mpijob": None if case.is_go else round((sum(req1.values()) - sum(req0.values())) / n, 2),
            "api_requests_per_mpijob_by_method": _delta(req1, req0, n),
            "api_writes_per_mpijob": None if case.is_go else round((sum(wr1.values()) - sum(wr0.values())) / n, 2),
            "api_writes_per_mpijob_by_verb": _delta(wr1, wr0, n),
            "reconciles_per_mpijob": None if case.is_go else round((sum(rc1.values()) - sum(rc0.values())) / n, 2),
            "watch_events_per_mpijob_by_resource": _delta(ev1, ev0, n),
            "operator_cpu_s": round(settled["cpu_s"] - idle["cpu_s"], 2),
            "operator_cpu_ms_per_mpijob": round(1000 * (settled["cpu_s"] - idle["cpu_s"]) / n, 1),
            "operator_cpu_s_to_running": round(busy["cpu_s"] - idle["cpu_s"], 2),
            "operator_cpu_s_total": round(settled["cpu_s"], 2),
            # the cluster's processes over the same spans (the benchmark's own watches and creates are
            # in the API server's share, the same for either operator)
            "cluster_cpu_ms_per_mpijob": _cluster_total_ms(cc_settled, cc0, n),
            "cluster_cpu_ms_per_mpijob_to_running": _cluster_total_ms(cc_busy, cc0, n),
            "cluster_cpu_ms_per_mpijob_to_running_by_process": _cluster_ms(cc_busy, cc0, n),
            "operator_rss_ready_mib": idle["rss_mib"],
            "operator_rss_idle_after_sync_mib": settled["rss_mib"],
            "operator_peak_rss_mib": settled["hwm_mib"],
            "watch_errors": sum(len(w.errors) for w in watches),
        })
    finally:
        if prof is not None:
            prof.stop()
        if op is not None:
            result["operator_exit_code"] = op.stop()
        for w in watches:
            w.stop()
        result["cleanup_s"] = cleanup_namespace(client, ns, cleanup_wait_s)
        scope.close()
    return result


@contextlib.contextmanager
def _scratch_namespace(client: RestClient, ns: str, wait_s: float):
    """A namespace for the block (the Go operator's leader election Lease), deleted after and waited
    for as a run's own is (cleanup_namespace): its deletion is the namespace controller's sweep of
    every resource type, which would otherwise fall on the next run's cluster CPU."""
    client.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
    try:
        yield ns
    finally:
        cleanup_namespace(client, ns, wait_s)


def cases_of(spec: str) -> list[Case]:
    """'job:2:100,statefulset:8:10,job:2:10:le' -> the Cases (backend:workers:MPIJobs[:le])."""
    out = []
    for item in filter(None, spec.split(",")):
        backend, workers, n, *le = item.split(":")
        if backend not in (*BACKENDS, GO):
            raise ValueError(f"unknown backend {backend!r} in {item!r}: choose from {(*BACKENDS, GO)}")
        out.append(Case(backend, int(workers), int(n), leader_elect=le == ["le"]))
    return out


def run(cases: list[Case] | tuple[Case, ...] = MATRIX, kubeconfig: str | None = None, log_dir: Path | None = None,
        timeout: float | None = None, profile: bool = False) -> dict:
    """Every case in turn; `timeout` (default 120 s + 0.05 s per pod) bounds the wait for Running after
    the last create. Operator logs (and py-spy's stacks of the PROFILED case) go to `log_dir` (default:
    a temporary directory, removed when every run worked)."""
    admin = ensure_cluster(kubeconfig)
    client = RestClient.from_kubeconfig(admin, qps=0, burst=1)  # no client-side limit for the submitter
    audit = meter.AuditMeter.of_cluster(Path(os.environ.get("CLUSTER_DIR") or Path(admin).resolve().parent))
    operator_root = Path(os.environ.get("BENCH_OPERATOR_ROOT") or ROOT).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="bench-operator-"))
    logs = Path(log_dir) if log_dir else tmp
    logs.mkdir(parents=True, exist_ok=True)
    try:
        sa = operator_kubeconfig(tmp / "operator.kubeconfig", admin)
        results = []
        for i, case in enumerate(cases):
            last = i == len(cases) - 1
            pods = case.mpijobs * (case.workers + 1)
            results.append(run_one(client, sa, case, logs, timeout if timeout is not None else 120 + 0.05 * pods,
                                   cleanup_wait_s=0 if last else 900, audit=audit, operator_root=operator_root,
                                   profile_dir=logs if profile and case == PROFILED else None))
    except BaseException:
        print(f"bench: operator logs kept in {logs}", file=sys.stderr)
        with contextlib.suppress(OSError):
            (tmp / "operator.kubeconfig").unlink()  # a token: not kept
        if log_dir is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return {"benchmark": "operator", "launcher_creation_policy": LAUNCHER_POLICY, "operator_root": str(operator_root),
            "operator_commit": _commit(operator_root), "operator_flags": list(OPERATOR_FLAGS),
            "submit_threads": SUBMIT_THREADS, "steady_seconds": STEADY_SECONDS, "results": results}


def _commit(root: Path) -> str | None:
    r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


# --- the table ---------------------------------------------------------------------------------------

def _get(r: dict, path: str) -> object:
    for part in path.split("."):
        r = r.get(part) if isinstance(r, dict) else None
    return r


ROWS = [
    ("MPIJobs Running per second", "running_per_s"),
    ("  pods Running per second", "pods_running_per_s"),
    ("  bound: cluster's pods Running/s / pods per MPIJob", "bound_pods"),
    ("  bound: sustained writes/s / cluster writes/MPIJob", "bound_own_writes"),
    ("  the same with the Go operator's writes", "bound_go_writes"),
    ("cluster writes per MPIJob, every client", "cluster_writes_per_mpijob"),
    ("first create -> last Running (s)", "all_running_s"),
    ("creates sent per second", "creates_per_s"),
    ("launcher latency p50, server timestamps (s)", "launcher_latency_server_s.p50"),
    ("launcher latency p95, server timestamps (s)", "launcher_latency_server_s.p95"),
    ("launcher latency max, server timestamps (s)", "launcher_latency_server_s.max"),
    ("launcher latency p50, create sent -> watch (s)", "launcher_latency_watch_s.p50"),
    ("launcher latency p95, create sent -> watch (s)", "launcher_latency_watch_s.p95"),
    ("launcher latency max, create sent -> watch (s)", "launcher_latency_watch_s.max"),
    ("Running latency p50, create sent -> watch (s)", "running_latency_watch_s.p50"),
    ("Running latency p95, create sent -> watch (s)", "running_latency_watch_s.p95"),
    ("API server: writes per MPIJob, Events included", "apiserver.writes_per_mpijob"),
    ("API server: all requests per MPIJob", "apiserver.requests_per_mpijob"),
    ("operator's count: requests per MPIJob", "api_requests_per_mpijob"),
    ("operator's count: writes per MPIJob (executor)", "api_writes_per_mpijob"),
    (f"steady state: writes in {STEADY_SECONDS:.0f} s", "steady_writes_total"),
    ("operator CPU ms per MPIJob (ready -> quiet)", "operator_cpu_ms_per_mpijob"),
    ("operator CPU seconds (ready -> quiet)", "operator_cpu_s"),
    ("  of which ready -> last Running", "operator_cpu_s_to_running"),
    ("  process total, start included", "operator_cpu_s_total"),
    ("cluster CPU ms per MPIJob (ready -> quiet)", "cluster_cpu_ms_per_mpijob"),
    ("  of which ready -> last Running", "cluster_cpu_ms_per_mpijob_to_running"),
    ("operator RSS when ready (MiB)", "operator_rss_ready_mib"),
    ("operator peak RSS, VmHWM (MiB)", "operator_peak_rss_mib"),
    ("operator RSS idle after sync (MiB)", "operator_rss_idle_after_sync_mib"),
]
# rows followed by their breakdown: (path of the total, path of the {key: value} breakdown)
BREAKDOWNS = {
    "apiserver.writes_per_mpijob": "apiserver.writes_per_mpijob_by_verb_kind",
    "apiserver.requests_per_mpijob": "apiserver.reads_per_mpijob_by_verb_kind",
    "api_requests_per_mpijob": "api_requests_per_mpijob_by_method",
    "api_writes_per_mpijob": "api_writes_per_mpijob_by_verb",
    "steady_writes_total": "steady_writes",
    "cluster_cpu_ms_per_mpijob_to_running": "cluster_cpu_ms_per_mpijob_to_running_by_process",
}


def add_bounds(out: dict, cluster: dict | None) -> None:
    """The throughput the cluster allows each run (bench/bench_cluster.py), next to the operator's."""
    if not cluster:
        return
    pods_per_s = cluster["pod_creation"]["running_per_s"]
    writes_per_s = cluster["sustained_writes"]["writes_per_s"]
    for r in out["results"]:
        r["pods_running_per_s"] = round(r["running_per_s"] * (r["workers"] + 1), 1)
        r["bound_pods"] = round(pods_per_s / (r["workers"] + 1), 1)
        # every write an MPIJob costs the API server: the operator's, and those of the controllers,
        # the scheduler and kwok for its pods; a Go operator's MPIJob costs the same but for the
        # operator's share
        total, own = r.get("cluster_writes_per_mpijob"), _get(r, "apiserver.writes_per_mpijob")
        go = GO_WRITES_PER_MPIJOB.get(r["workers"])
        r["bound_own_writes"] = round(writes_per_s / total, 1) if total else None
        r["bound_go_writes"] = round(writes_per_s / (total - own + go), 1) if total and own is not None and go else None


def rows(out: dict) -> tuple[list[str], list[tuple[str, list[object]]]]:
    """Column headers (one per run) and (label, values) rows, requests and writes split by verb and kind."""
    res = out["results"]
    cols = [r.get("label") or f"{r['backend'][:3]} n={r['mpijobs']}" for r in res]
    body: list[tuple[str, list[object]]] = []
    for label, path in ROWS:
        body.append((label, [_get(r, path) for r in res]))
        if path in BREAKDOWNS:
            parts = [_get(r, BREAKDOWNS[path]) or {} for r in res]
            for k in sorted({k for part in parts for k in part}):
                body.append((f"  {k}", [part.get(k, 0) for part in parts]))
    return cols, body


def profiles(out: dict) -> str:
    return "\n\n".join(cpu_profile.render(r["profile"], f"CPU profile, {r['label']}")
                        for r in out["results"] if r.get("profile"))


def format_table(cols: list[str], body: list[tuple[str, list[object]]], title: str = "", width: int = 50) -> str:
    w = max([11] + [len(c) + 1 for c in cols])
    lines = [f"{title:<{width}}" + "".join(f"{c:>{w}}" for c in cols)]
    for label, values in body:
        lines.append(f"{label:<{width}}" + "".join(f"{'-' if v is None else v!s:>{w}}" for v in values))
    return "\n".join(lines)


def table(out: dict) -> str:
    return format_table(*rows(out), title="operator")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=None, help="backend:workers:MPIJobs[:le],... (default: MATRIX)")
    ap.add_argument("--kubeconfig", default=None)
    ap.add_argument("--profile", action="store_true", help=f"py-spy over the operator of {PROFILED.label}")
    ap.add_argument("--log-dir", default=None, help="keep the operator logs (and py-spy's stacks) there")
    a = ap.parse_args()
    out = run(cases_of(a.cases) if a.cases else MATRIX, a.kubeconfig, log_dir=a.log_dir and Path(a.log_dir),
              profile=a.profile)
    print(table(out))
    print(profiles(out))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
