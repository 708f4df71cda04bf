"""What the local cluster itself sustains, without the operator: the figures the operator's throughput
is compared with (docs/architecture.md section 7.1).

- pod creation: PODS pods POSTed at once by WRITERS processes x THREADS threads (the admin user, no
  client-side limit): pods created per second (first create sent -> last acknowledged) and pods
  Running per second (-> the last Running seen by a watch; kwok plays the kubelet);
- sustained writes: WRITERS x THREADS threads PATCHing CONFIGMAPS ConfigMaps for WRITE_SECONDS:
  writes acknowledged per second.

An MPIJob with w workers needs w + 1 pods, so pods Running per second / (w + 1) bounds the MPIJobs
a second any operator brings to Running here; writes per second / (writes per MPIJob) bounds them
by what the operator itself sends.

    python -m bench.bench_cluster
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from bench.bench_operator import Watch, cleanup_namespace, ensure_cluster
from client.errors import ApiError
from client.resources import CONFIGMAPS, NAMESPACES, PODS
from client.rest import RestClient

PODS_N = 2000
CONFIGMAPS_N = 64
WRITERS = 4  # processes: one Python process cannot keep the API server busy on its own
THREADS = 8
WRITE_SECONDS = 15.0


def _pod(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"bench": "1"}},
            "spec": {"containers": [{"name": "c", "image": "fake", "resources": {"requests": {"cpu": "10m"}}}]}}


def _client(kubeconfig: str) -> RestClient:
    return RestClient.from_kubeconfig(kubeconfig, qps=0, burst=1)


def _retrying(fn, attempts: int = 20) -> None:
    for attempt in range(attempts):
        try:
            fn()
            return
        except ApiError as e:
            if e.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                raise
            time.sleep(e.retry_after or 0.1)


def _create_pods(kubeconfig: str, ns: str, names: list[str]) -> float:
    """POSTs the pods from THREADS threads; returns the monotonic time of the last acknowledgement."""
    client = _client(kubeconfig)
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda n: _retrying(lambda: client.request("POST", PODS.path(ns), body=_pod(n))), names))
    return time.monotonic()


def _patch_for(kubeconfig: str, ns: str, seconds: float, seed: int) -> tuple[int, float, float]:
    """PATCHes the ConfigMaps round-robin from THREADS threads for `seconds`; returns (writes, start, end)."""
    client = _client(kubeconfig)
    done = [0] * THREADS
    t0 = time.monotonic()
    stop_at = t0 + seconds

    def loop(t: int) -> None:
        i = seed * THREADS + t
        while time.monotonic() < stop_at:
            name = f"cm-{i % CONFIGMAPS_N:03d}"
            body = {"data": {f"w{seed}-{t}": str(i)}}
            _retrying(lambda name=name, body=body: client.request(
                "PATCH", CONFIGMAPS.path(ns, name), body=body, content_type="application/merge-patch+json"))
            done[t] += 1
            i += WRITERS * THREADS

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(done), t0, time.monotonic()


def pod_creation(client: RestClient, kubeconfig: str, n: int = PODS_N) -> dict:
    ns = f"bench-pods-{uuid.uuid4().hex[:5]}"
    client.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
    running: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()

    def on_pod(typ: str, obj: dict, t: float) -> None:
        if (obj.get("status") or {}).get("phase") == "Running":
            with lock:
                running.setdefault(obj["metadata"]["name"], t)
                if len(running) >= n:
                    done.set()

    watch = Watch(client, PODS, ns, on_pod).start()
    try:
        names = [f"p-{i:05d}" for i in range(n)]
        chunks = [names[i::WRITERS] for i in range(WRITERS)]
        t0 = time.monotonic()
        with ProcessPoolExecutor(WRITERS, mp_context=multiprocessing.get_context("spawn")) as pool:
            acked = list(pool.map(_create_pods, [kubeconfig] * WRITERS, [ns] * WRITERS, chunks))
        # the children's monotonic clocks are the same clock (CLOCK_MONOTONIC is system-wide)
        t_created = max(acked)
        if not done.wait(300):
            raise RuntimeError(f"pod creation baseline: {len(running)} of {n} pods Running after 300 s ({ns})")
        t_running = max(running.values())
    finally:
        watch.stop()
        cleanup = cleanup_namespace(client, ns, 600)
    return {"pods": n, "created_per_s": round(n / (t_created - t0), 1),
            "running_per_s": round(n / (t_running - t0), 1), "all_running_s": round(t_running - t0, 2),
            "cleanup_s": cleanup}


def sustained_writes(client: RestClient, kubeconfig: str, seconds: float = WRITE_SECONDS) -> dict:
    ns = f"bench-writes-{uuid.uuid4().hex[:5]}"
    client.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
    try:
        for i in range(CONFIGMAPS_N):
            client.request("POST", CONFIGMAPS.path(ns), body={"metadata": {"name": f"cm-{i:03d}"}, "data": {}})
        with ProcessPoolExecutor(WRITERS, mp_context=multiprocessing.get_context("spawn")) as pool:
            out = list(pool.map(_patch_for, [kubeconfig] * WRITERS, [ns] * WRITERS, [seconds] * WRITERS,
                                range(WRITERS)))
    finally:
        cleanup_namespace(client, ns, 0)
    writes = sum(o[0] for o in out)
    elapsed = max(o[2] for o in out) - min(o[1] for o in out)
    return {"writes": writes, "seconds": round(elapsed, 1), "writes_per_s": round(writes / elapsed, 1),
            "clients": WRITERS * THREADS}


def run(kubeconfig: str | None = None) -> dict:
    admin = ensure_cluster(kubeconfig)
    client = _client(admin)
    print(">> cluster baseline: pod creation", file=sys.stderr, flush=True)
    pods = pod_creation(client, admin)
    print(">> cluster baseline: sustained writes", file=sys.stderr, flush=True)
    writes = sustained_writes(client, admin)
    return {"benchmark": "cluster", "writers": WRITERS, "threads": THREADS, "pod_creation": pods,
            "sustained_writes": writes}


if __name__ == "__main__":
    print(json.dumps(run(os.environ.get("KUBECONFIG")), indent=2))
