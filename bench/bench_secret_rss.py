"""What the Secret informer's cache costs in memory, with and without the SSH keys' values (issue 24
item 11; not a timed test).

Creates BENCH_SECRETS (1,000) Secrets shaped as the operator makes them for as many MPIJobs (type
kubernetes.io/ssh-auth, an ECDSA P-521 key pair from controller/sshkeys.py, the operator's labels)
in a namespace of its own, then, in a fresh process for each transform, syncs the operator's Secret
informer (label-selected as in controller/mpijob_controller.py) and reports the growth of the
process's RSS (VmRSS) from before the informer started to after its cache synced:

    python -m bench.bench_secret_rss        # a table, then the JSON

`strip_managed_fields` is what the operator cached before issue 24; `strip_secret_data` keeps the
keys' names only. Uses $KUBECONFIG or .cluster/kubeconfig (the local cluster must be up).
"""

from __future__ import annotations

import base64
import gc
import json
import os
import subprocess
import sys
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from client.resources import NAMESPACES, SECRETS
from client.rest import RestClient
from controller import sshkeys
from reconcilers import names
from testsupport.paths import CLUSTER_DIR

N = int(os.environ.get("BENCH_SECRETS", "1000"))
SELECTOR = f"{names.OPERATOR_NAME_LABEL}={names.OPERATOR_NAME}"


def _kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(CLUSTER_DIR / "kubeconfig")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def measure(namespace: str, transform_name: str) -> dict:
    """In this (fresh) process: RSS growth of syncing the Secret informer with the named transform."""
    from informers import transforms
    from informers.factory import InformerFactory

    client = RestClient.from_kubeconfig(_kubeconfig(), qps=100, burst=100)
    client.request("GET", "/version")  # connections and imports warmed before the baseline
    gc.collect()
    before = rss_kib()
    tracemalloc.start()
    factory = InformerFactory(client, namespace=namespace)
    inf = factory.informer_for(SECRETS, label_selector=SELECTOR, transform=getattr(transforms, transform_name))
    factory.start()
    assert factory.wait_for_cache_sync(120)  # the first list is in the Store once synced
    gc.collect()
    after = rss_kib()
    retained = tracemalloc.get_traced_memory()[0]  # what is still allocated: the cache, mostly
    tracemalloc.stop()
    cached = len(inf.store)
    keys = sum(1 for s in inf.store.list() if "PRIVATE KEY" in base64.b64decode(
        (s.get("data") or {}).get("ssh-privatekey") or "" if len((s.get("data") or {}).get(
            "ssh-privatekey") or "") > 1 else "").decode(errors="replace"))
    factory.stop()
    return {"transform": transform_name, "secrets": cached, "private_keys_in_cache": keys,
            "rss_growth_kib": after - before, "rss_kib": after, "retained_kib": retained // 1024}


def _secret(i: int) -> dict:
    key = sshkeys.generate()
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
            "metadata": {"name": f"job-{i}-ssh", "labels": {
                names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME, names.JOB_NAME_LABEL: f"job-{i}"}},
            "data": {"ssh-privatekey": base64.b64encode(key.private_pem.encode()).decode(),
                     "ssh-publickey": base64.b64encode(key.public_openssh.encode()).decode()}}


def main() -> None:
    if len(sys.argv) == 3:  # the child: one measurement
        print(json.dumps(measure(sys.argv[1], sys.argv[2])))
        return
    client = RestClient.from_kubeconfig(_kubeconfig(), qps=200, burst=200)
    ns = f"bench-secrets-{uuid.uuid4().hex[:6]}"
    client.request("POST", NAMESPACES.path(), body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: client.request("POST", SECRETS.path(ns), body=_secret(i)), range(N)))
        results = []
        for transform in ("strip_managed_fields", "strip_secret_data"):
            out = subprocess.run([sys.executable, __file__, ns, transform], capture_output=True, text=True, check=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        client.request("DELETE", NAMESPACES.path(None, ns))
    print(f"{'transform':<22} {'secrets':>8} {'keys cached':>12} {'RSS growth (MiB)':>17} {'retained (MiB)':>15}")
    for r in results:
        print(f"{r['transform']:<22} {r['secrets']:>8} {r['private_keys_in_cache']:>12} "
              f"{r['rss_growth_kib'] / 1024:>17.1f} {r['retained_kib'] / 1024:>15.2f}")
    saved = results[0]["rss_growth_kib"] - results[1]["rss_growth_kib"]
    kept = results[0]["retained_kib"] - results[1]["retained_kib"]
    print(f"saved: RSS {saved / 1024:.1f} MiB, retained {kept / 1024:.2f} MiB for {N} Secrets "
          f"({kept * 1024 / N:.0f} bytes each)")
    print(json.dumps({"secrets": N, "results": results, "rss_saved_kib": saved, "retained_saved_kib": kept}))


if __name__ == "__main__":
    main()
