"""Recovery from a lost worker: this operator's two worker backends beside the Kubeflow MPI Operator
(Go) v0.8.2 (issue 43; docs/architecture.md section 11 says where the seconds go; docs/figures.md).

- real node: an MPIJob of 2 and of 4 workers (Open MPI 4, 2 slots each, hack/realnode/pi-mpijob.yaml)
  whose ranks print `rank-start <host> <time>` as they start (testsupport/realnode_mpi.py
  `announcing`) and compute for about 30 s; worker 0 deleted 10 s after every rank started; measured
  from the delete to every rank running again (the rank-start lines of the launcher's output) and to
  `Succeeded`, and the launcher's failures the operator counted (this operator: its ledger, the
  launcher Job's annotation; Go: the launcher Job's `status.failed`; both: the MPIJob's
  `replicaStatuses.Launcher.failed`). One loss should be one counted attempt at most.
- kwok: a simulated MPIJob of 8, 16 and 32 workers (testsupport/builders.py simulated_mpijob) that
  loses worker 1, measured by a watch from the delete to every worker Ready again: on the Job backend
  the whole worker Job is made afresh, on the StatefulSet backend the one pod.
- runs interleaved: a round is, per size, this operator's Job backend, Go (real node only), the
  StatefulSet backend; RUNS rounds (a benchmark cut short still has every size and backend alike);
  each run in a namespace of its own (rb-...) with its own operator process started here with DEFAULT
  flags (only --namespace and the ports; Go: --namespace, --lock-namespace and
  go_operator.QUEUE_FLAGS, which one MPIJob never reaches); the Go operator as a ServiceAccount of the
  run's namespace bound to upstream's own ClusterRole (as e2e/test_takeover.py), this operator as
  manifests/rbac's ServiceAccount;
- each figure as median (min-max) over the runs, and this / Go of each interleaved pair
  (bench/side_by_side.py's spread and ratios). The last line reads
  `recovery median (s): job X, statefulset Y, go Z`: delete -> every rank running again, the
  largest size run.

The real node is this machine (2 cores): figures taken while other tests run are noisy. Without a
Ready node `realnode` (a cluster started with REAL_NODE=0, as bench/run.py starts a missing one) the
real-node part is skipped, saying so, and the kwok part still runs.

    python -m bench.recovery [--runs 8] [--workers 2,4] [--kwok-workers 8,16,32] [--kwok-runs 3]
                             [--no-go] [--no-realnode] [--no-kwok] [--out FILE] [--log-dir DIR]
    python -m bench.recovery --from-json FILE   # the tables of a run written with --out
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import bench_operator, go_operator
from bench.bench_operator import GO, Watch
from bench.side_by_side import fmt_spread, ratios, spread
from client.resources import PODS
from client.rest import RestClient
from reconcilers.failure import ledger
from reconcilers.names import JOB_NAME_LABEL, JOB_ROLE_LABEL
from testsupport import builders
from testsupport.kubectl import Kubectl, get, runner, token_kubeconfig, wait_condition
from testsupport.operator_process import OperatorProcess
from testsupport.paths import CLUSTER_DIR
from testsupport.realnode_mpi import (
    SSHD,
    announcing,
    apply,
    load_images,
    mpijob,
    running_worker,
    wait_finished,
    wait_ranks,
)
from testsupport.upstream_rbac import bind, unbind
from testsupport.waiting import wait_until

RUNS = 8
SIZES = (2, 4)  # workers, on the real node
KWOK_SIZES = (8, 16, 32)
KWOK_RUNS = 3
SLOTS = 2  # per worker: 2 x workers ranks
# About 30 s of computing on 2 cores however many ranks share it (/opt/pi splits the samples among them).
INTERVALS = "18000000000"
DELETE_AFTER_S = 10.0  # after every rank started
NAME = "rb"
BACKENDS = ("job", GO, "statefulset")  # the order of each round
KWOK_BACKENDS = ("job", "statefulset")
REALNODE = "realnode"
# (label, key of a run's result): the real-node figures, in the table's order
FIGURES = (
    ("delete -> every rank running again (s)", "ranks_back_s"),
    ("delete -> Succeeded (s)", "succeeded_s"),
    ("launcher failures counted (ledger / Job)", "counted"),
    ("launcher failures (replicaStatuses)", "launcher_failed"),
)
KWOK_FIGURES = (
    ("delete -> every worker Ready again (s)", "workers_back_s"),
    ("delete -> every worker pod of before gone (s)", "old_gone_s"),  # the Job backend: its worker Job made afresh
    ("delete -> the first new worker pod (s)", "first_new_s"),
)


@dataclass
class Setup:
    """What every run shares: the admin's kubectl and client, this operator's ServiceAccount kubeconfig,
    the Go build, the image, and where logs go."""

    kubectl: Kubectl
    client: RestClient
    sa_kubeconfig: str
    log_dir: Path
    go_build: tuple[str, Path] | None = None
    image: str = ""


# --- operators ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def go_identity(s: Setup, ns: str, tmp: Path) -> Iterator[str]:
    """A kubeconfig of ServiceAccount ns/upstream-op bound to upstream's ClusterRole while the block runs."""
    role = f"rb-upstream-{ns}"
    rules = go_operator.cluster_role((s.go_build[1] / "manifests" / "base" / "cluster-role.yaml").read_text())
    s.kubectl("-n", ns, "create", "serviceaccount", "upstream-op")
    bind(s.kubectl, role, rules["rules"], ns, "upstream-op")
    try:
        yield token_kubeconfig(s.kubectl, ns, "upstream-op", tmp / f"{ns}.kubeconfig")
    finally:
        unbind(s.kubectl, role)
        with contextlib.suppress(OSError):
            (tmp / f"{ns}.kubeconfig").unlink()  # a token: not kept


@contextlib.contextmanager
def operator(s: Setup, backend: str, ns: str) -> Iterator[object]:
    """The operator of `backend` for `ns`, ready, with default flags; stopped after the block."""
    log = s.log_dir / f"operator-{ns}.log"
    with contextlib.ExitStack() as scope:
        if backend == GO:
            kc = scope.enter_context(go_identity(s, ns, s.log_dir))
            op = go_operator.GoOperatorProcess(s.go_build[0], kc, ns, ns, log, ())
        else:
            op = OperatorProcess(s.sa_kubeconfig, backend, ns, log)
        scope.callback(op.stop)
        op.wait_ready()
        yield op


@contextlib.contextmanager
def namespace(s: Setup, backend: str, workers: int) -> Iterator[str]:
    """A fresh namespace rb-..., deleted after, its pods gone before the next run starts."""
    ns = f"rb-{backend[:3]}-{workers}-{uuid.uuid4().hex[:5]}"
    s.kubectl("create", "namespace", ns)
    try:
        yield ns
    finally:
        bench_operator.cleanup_namespace(s.client, ns, 180)


# --- the real node -----------------------------------------------------------------------------------

def real_mpijob(image: str, workers: int) -> dict:
    return mpijob(NAME, "openmpi4", image, args=announcing(workers * SLOTS, INTERVALS), workers=workers,
                  slots=SLOTS, backoff=3, worker_command=SSHD)


def retries(k: Kubectl, ns: str, backend: str) -> dict:
    """The launcher failures counted: this operator's ledger (or the Go operator's launcher Job's
    status.failed, what its backoffLimit counts), and the MPIJob's replicaStatuses.Launcher.failed."""
    job = get(k, ns, "job", f"{NAME}-launcher") or {}
    counted = int((job.get("status") or {}).get("failed") or 0) if backend == GO else ledger.read(job).counted
    status = (get(k, ns, "mpijob", NAME) or {}).get("status") or {}
    failed = ((status.get("replicaStatuses") or {}).get("Launcher") or {}).get("failed") or 0
    return {"counted": counted, "launcher_failed": int(failed)}


def lose_a_worker(k: Kubectl, ns: str, ranks: int) -> dict:
    """Worker 0 deleted DELETE_AFTER_S after every rank started: the seconds to every rank running again
    and to the end, and the end."""
    started = wait_ranks(k, ns, NAME, ranks, 0, timeout=300)
    time.sleep(max(0.0, started + DELETE_AFTER_S - time.time()))  # the scenario's moment, not a wait
    victim = running_worker(k, ns, NAME, 0)
    t0 = time.time()
    k("-n", ns, "delete", "pod", victim["metadata"]["name"], "--wait=false")
    back = wait_ranks(k, ns, NAME, ranks, t0, timeout=300) - t0
    outcome = wait_finished(k, ns, NAME, 600)
    return {"ranks_back_s": round(back, 2), "succeeded_s": round(time.time() - t0, 1) if outcome == "Succeeded"
            else None, "outcome": outcome}


def realnode_run(s: Setup, backend: str, workers: int) -> dict:
    result: dict = {"backend": backend, "workers": workers}
    with namespace(s, backend, workers) as ns, operator(s, backend, ns):
        result["namespace"] = ns
        apply(s.kubectl, ns, real_mpijob(s.image, workers))
        result.update(lose_a_worker(s.kubectl, ns, workers * SLOTS))
        result.update(retries(s.kubectl, ns, backend))
    return result


# --- kwok --------------------------------------------------------------------------------------------

def _ready(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def all_back(pods: dict[str, dict], workers: int, victim_uid: str) -> bool:
    """Every worker index has a Ready pod that is not being deleted, none of them the victim."""
    ready = [p for p in pods.values() if _ready(p)]
    hosts = {p["spec"].get("hostname") for p in ready}
    return (victim_uid not in {p["metadata"]["uid"] for p in ready}
            and hosts >= {f"{NAME}-worker-{i}" for i in range(workers)})


class WorkerWatch:
    """The MPIJob's worker pods by a watch. After `arm(victim_uid)`, the first moment (monotonic time)
    that: all_back holds (`back`), a pod not seen before is there (`first_new`), no pod seen before is
    left (`old_gone`: the whole worker Job made afresh; never, when only the victim is replaced)."""

    def __init__(self, client: RestClient, ns: str, workers: int) -> None:
        self.workers, self.pods, self.victim = workers, {}, None
        self.back = self.first_new = self.old_gone = None
        self.before: set[str] = set()
        self.lock = threading.Lock()
        self.watch = Watch(client, PODS, ns, self._on, selector=f"{JOB_NAME_LABEL}={NAME},{JOB_ROLE_LABEL}=worker")

    def _on(self, typ: str, pod: dict, t: float) -> None:
        uid = pod["metadata"]["uid"]
        with self.lock:
            if typ == "DELETED":
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = pod
            if not self.victim:
                return
            if self.first_new is None and uid not in self.before:
                self.first_new = t
            if self.old_gone is None and not self.before & self.pods.keys():
                self.old_gone = t
            if self.back is None and all_back(self.pods, self.workers, self.victim):
                self.back = t

    def arm(self, victim_uid: str) -> None:
        with self.lock:
            self.victim, self.before = victim_uid, set(self.pods)

    def every_ready(self) -> bool:
        with self.lock:
            return all_back(self.pods, self.workers, "")

    def ready_pod(self, host: str) -> dict:
        with self.lock:
            return next(p for p in self.pods.values() if p["spec"].get("hostname") == host and _ready(p))


def kwok_run(s: Setup, backend: str, workers: int) -> dict:
    result: dict = {"backend": backend, "workers": workers}
    with namespace(s, backend, workers) as ns, operator(s, backend, ns):
        result["namespace"] = ns
        w = WorkerWatch(s.client, ns, workers)
        w.watch.start()
        try:
            apply(s.kubectl, ns, builders.simulated_mpijob(NAME, workers=workers, launcher_runs=None))
            wait_condition(s.kubectl, ns, NAME, "Running", timeout=120)
            wait_until(w.every_ready, 60, interval=0.1, what=f"{workers} workers Ready")
            victim = w.ready_pod(f"{NAME}-worker-1")
            w.arm(victim["metadata"]["uid"])
            t0 = time.monotonic()
            s.kubectl("-n", ns, "delete", "pod", victim["metadata"]["name"], "--wait=false")
            wait_until(lambda: w.back, 180, interval=0.1, what=f"{workers} workers Ready again")
            result["workers_back_s"] = round(w.back - t0, 2)
            for key, t in (("old_gone_s", w.old_gone), ("first_new_s", w.first_new)):
                result[key] = round(t - t0, 2) if t is not None else None
        finally:
            w.watch.stop()
    return result


# --- runs and figures --------------------------------------------------------------------------------

def schedule(sizes: list[int], runs: int, backends: tuple[str, ...]) -> list[tuple[str, int]]:
    """(backend, workers) in order: `runs` rounds, each of every size with every backend once."""
    return [(b, w) for _ in range(runs) for w in sizes for b in backends]


def run_all(cases: list[tuple[str, int]], one: Callable[[str, int], dict], what: str,
            partial: Callable[[list[dict]], None] = lambda _: None) -> list[dict]:
    """Every case by `one`; a run that fails is kept with its error (its figures missing) and the rest go on.
    `partial` is given the runs so far after each one."""
    out: list[dict] = []
    for i, (backend, workers) in enumerate(cases):
        print(f">> recovery, {what}: run {i + 1} of {len(cases)}: {backend}, {workers} workers", file=sys.stderr,
              flush=True)
        try:
            r = one(backend, workers)
        except Exception as e:  # the benchmark goes on; the table says a run is missing
            r = {"backend": backend, "workers": workers, "error": f"{type(e).__name__}: {e}"[:2000]}
        print(f"   {json.dumps(r)}", file=sys.stderr, flush=True)
        out.append(r)
        partial(out)
    return out


def summarize(results: list[dict], figures: tuple, backends: tuple[str, ...]) -> list[dict]:
    """Per size and figure: each backend's spread, and this / Go of the interleaved pairs."""
    out = []
    for workers in sorted({r["workers"] for r in results}):
        side = {b: [r for r in results if (r["workers"], r["backend"]) == (workers, b)] for b in backends}
        rows = []
        for label, key in figures:
            vals = {b: [r.get(key) for r in rs] for b, rs in side.items()}
            row = {"figure": label, "key": key, **{b: spread(v) for b, v in vals.items()}}
            if GO in backends:
                row.update(job_over_go=ratios(vals["job"], vals[GO]),
                           statefulset_over_go=ratios(vals["statefulset"], vals[GO]))
            rows.append(row)
        out.append({"workers": workers, "runs": {b: len(rs) for b, rs in side.items()},
                    "errors": [r["error"] for rs in side.values() for r in rs if "error" in r], "figures": rows})
    return out


def render(summary: list[dict]) -> str:
    """The real-node table: per size and figure, Job / Go / Job over Go, StatefulSet / StatefulSet over Go."""
    lines = ["| workers | figure | this, Job backend | Go v0.8.2 | this / Go (Job) | this, StatefulSet backend "
             "| StatefulSet / Go |", "|---|---|---|---|---|---|---|"]
    for case in summary:
        label = f"{case['workers']} ({'/'.join(str(n) for n in case['runs'].values())} runs)"
        for f in case["figures"]:
            lines.append(f"| {label} | {f['figure']} | {fmt_spread(f['job'])} | {fmt_spread(f[GO])} | "
                         f"{fmt_spread(f['job_over_go'], True)} | {fmt_spread(f['statefulset'])} | "
                         f"{fmt_spread(f['statefulset_over_go'], True)} |")
            label = ""
    return "\n".join(lines + [f"error: {e}" for case in summary for e in case["errors"]])


def render_kwok(summary: list[dict]) -> str:
    """The kwok table: per size and figure, each backend's spread ('-': never, e.g. no pod of before
    gone where only the victim is replaced)."""
    lines = ["| workers (kwok) | figure | this, Job backend | this, StatefulSet backend |", "|---|---|---|---|"]
    for case in summary:
        label = f"{case['workers']} ({case['runs']['job']}/{case['runs']['statefulset']} runs)"
        for f in case["figures"]:
            lines.append(f"| {label} | {f['figure']} | {fmt_spread(f['job'])} | {fmt_spread(f['statefulset'])} |")
            label = ""
    return "\n".join(lines + [f"error: {e}" for case in summary for e in case["errors"]])


def _median(s: dict | None) -> str:
    return f"{s['median']:.1f}" if s else "-"


def last_line(summary: list[dict]) -> str:
    """`recovery median (s): job X, statefulset Y, go Z`: delete -> every rank running again, the
    largest size run ('-' for a side not measured)."""
    rows = summary[-1]["figures"] if summary else []
    f = next((r for r in rows if r["key"] == "ranks_back_s"), {})
    return (f"recovery median (s): job {_median(f.get('job'))}, statefulset {_median(f.get('statefulset'))}, "
            f"go {_median(f.get(GO))}")


def realnode_ready(k: Kubectl) -> str | None:
    """None when node `realnode` is Ready, else why the real-node part is skipped."""
    r = k("get", "node", REALNODE, "-o", "json", check=False)
    if r.returncode != 0:
        return "no node realnode (a cluster started with REAL_NODE=0): `make cluster-up` starts one"
    ready = {c["type"]: c["status"] for c in json.loads(r.stdout)["status"]["conditions"]}.get("Ready")
    return None if ready == "True" else f"node realnode is not Ready ({ready})"


def run(sizes: list[int] | tuple = SIZES, runs: int = RUNS, kwok_sizes: list[int] | tuple = KWOK_SIZES,
        kwok_runs: int = KWOK_RUNS, go: bool = True, realnode: bool = True, kwok: bool = True,
        kubeconfig: str | None = None, log_dir: Path | None = None, partial: Path | None = None) -> dict:
    """Both parts; `partial`: a JSON file rewritten with the runs so far after each one (--from-json reads it)."""
    admin = bench_operator.ensure_cluster(kubeconfig)
    logs = Path(log_dir or tempfile.mkdtemp(prefix="bench-recovery-"))
    logs.mkdir(parents=True, exist_ok=True)
    sa = bench_operator.operator_kubeconfig(logs / "operator.kubeconfig", admin)
    s = Setup(runner(admin), RestClient.from_kubeconfig(admin, qps=0, burst=1), sa, logs)
    out: dict = {"benchmark": "recovery", "go_version": go_operator.VERSION if go else None, "runs": runs,
                 "kwok_runs": kwok_runs, "log_dir": str(logs)}

    def section(key: str, figures: tuple, backends: tuple[str, ...]) -> Callable[[list[dict]], None]:
        def keep(results: list[dict]) -> None:
            out[key] = {"results": results, "summary": summarize(results, figures, backends)}
            if partial is not None:
                partial.write_text(json.dumps(out, indent=2) + "\n")
        return keep

    try:
        skipped = realnode_ready(s.kubectl) if realnode else "--no-realnode"
        if realnode and not skipped:
            s.image = load_images(CLUSTER_DIR, "openmpi4")["openmpi4"]
            if go:
                s.go_build = go_operator.build()
            backends = BACKENDS if go else tuple(b for b in BACKENDS if b != GO)
            keep = section("realnode", FIGURES, BACKENDS)
            keep(run_all(schedule(list(sizes), runs, backends), lambda b, w: realnode_run(s, b, w), "real node", keep))
        else:
            out["realnode_skipped"] = skipped
        if kwok:
            keep = section("kwok", KWOK_FIGURES, KWOK_BACKENDS)
            keep(run_all(schedule(list(kwok_sizes), kwok_runs, KWOK_BACKENDS), lambda b, w: kwok_run(s, b, w),
                         "kwok", keep))
    finally:
        with contextlib.suppress(OSError):
            (logs / "operator.kubeconfig").unlink()  # a token: not kept
    return out


def report(out: dict) -> str:
    """The tables, and the last line."""
    parts = []
    if "realnode" in out:
        parts.append("recovery from a lost worker, real node (Open MPI 4), median (min-max) over the runs\n"
                     + render(out["realnode"]["summary"]))
    else:
        parts.append(f"recovery, real node: skipped ({out.get('realnode_skipped')})")
    if "kwok" in out:
        parts.append("recovery from a lost worker, kwok (simulated pods), median (min-max) over the runs\n"
                     + render_kwok(out["kwok"]["summary"]))
    parts.append(last_line(out.get("realnode", {}).get("summary", [])))
    return "\n\n".join(parts)


def sizes_of(spec: str) -> list[int]:
    """'2,4' -> [2, 4]."""
    items = [x.strip() for x in spec.split(",") if x.strip()]
    if not items or not all(x.isdigit() and int(x) > 0 for x in items):
        raise ValueError(f"{spec!r}: expected worker counts, e.g. 2,4")
    return [int(x) for x in items]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS, help="real node: runs per backend and size")
    ap.add_argument("--workers", default=",".join(map(str, SIZES)), help="real node: worker counts, e.g. 2")
    ap.add_argument("--kwok-runs", type=int, default=KWOK_RUNS)
    ap.add_argument("--kwok-workers", default=",".join(map(str, KWOK_SIZES)))
    ap.add_argument("--no-go", action="store_true", help="without the Go operator (no Go build, no Go runs)")
    ap.add_argument("--no-realnode", action="store_true")
    ap.add_argument("--no-kwok", action="store_true")
    ap.add_argument("--out", default=None, help="write the JSON there (<out>.partial after each run)")
    ap.add_argument("--log-dir", default=None, help="operator logs (default: a temporary directory)")
    ap.add_argument("--from-json", default=None, help="print the report of a run written with --out")
    a = ap.parse_args()
    # SIGTERM as Ctrl-C: the run's operator, namespace and ClusterRole are removed on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.from_json:
        print(report(json.loads(Path(a.from_json).read_text())))
        return 0
    try:
        sizes, kwok_sizes = sizes_of(a.workers), sizes_of(a.kwok_workers)
    except ValueError as e:
        ap.error(str(e))
    out = run(sizes, a.runs, kwok_sizes, a.kwok_runs, go=not a.no_go, realnode=not a.no_realnode,
              kwok=not a.no_kwok, log_dir=a.log_dir and Path(a.log_dir), partial=a.out and Path(a.out + ".partial"))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
