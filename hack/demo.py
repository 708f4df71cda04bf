#!/usr/bin/env python3
"""`make demo`: from nothing to an MPIJob that Succeeded, with both worker backends.

Brings the local cluster up (hack/cluster-up.sh; the real node too where this machine can run
one), installs the CRD and RBAC, runs the operator as its ServiceAccount, submits an MPIJob and
prints its progress as it goes: on the real node hack/realnode/pi-mpijob.yaml (pi computed by 4
MPI ranks over SSH), otherwise examples/pi.yaml on simulated pods. Ends with a summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

from testsupport.operator_process import OperatorProcess
from testsupport.paths import CLUSTER_DIR, ROOT

KUBECTL = [str(CLUSTER_DIR / "bin" / "kubectl"), f"--kubeconfig={CLUSTER_DIR / 'kubeconfig'}"]
TIMEOUT = float(os.environ.get("DEMO_TIMEOUT", "300"))


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([*KUBECTL, *args], input=input, capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise SystemExit(f"[demo] kubectl {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def real_node_ready() -> bool:
    r = kubectl("get", "node", "realnode", "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return r.returncode == 0 and r.stdout == "True"


def snapshot(ns: str, name: str) -> tuple[str, str]:
    job = json.loads(kubectl("-n", ns, "get", "mpijob", name, "-o", "json").stdout)
    conds = [c for c in (job.get("status") or {}).get("conditions", []) if c["status"] == "True"]
    state = ", ".join(f"{c['type']} ({c['reason']})" for c in conds) or "(no status yet)"
    pods = json.loads(kubectl("-n", ns, "get", "pods", "-l", f"training.kubeflow.org/job-name={name}",
                              "-o", "json").stdout)["items"]
    summary = " ".join(sorted(f"{p['metadata']['name']}={p['status'].get('phase', '?')}" for p in pods))
    return state, summary


def run_backend(backend: str, kubeconfig: str, real: bool) -> dict:
    ns = f"demo-{backend}"
    kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=120s", check=False)
    kubectl("create", "namespace", ns)
    manifest = ROOT / ("hack/realnode/pi-mpijob.yaml" if real else "examples/pi.yaml")
    job = yaml.safe_load(manifest.read_text())
    name = job["metadata"]["name"]
    log_path = CLUSTER_DIR / "logs" / f"demo-operator-{backend}.log"
    log_path.unlink(missing_ok=True)
    op = OperatorProcess(kubeconfig, backend, ns, log_path, ("--log-format=console",))
    try:
        op.wait_ready()
        say(f"--- backend {backend}: operator ready (log: {log_path}), submitting {manifest.relative_to(ROOT)}")
        t0 = time.monotonic()
        kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(job))
        last, result = None, "timeout"
        while time.monotonic() - t0 < TIMEOUT:
            op.check_alive()
            state, pods = snapshot(ns, name)
            if (state, pods) != last:
                say(f"{time.monotonic() - t0:6.1f}s  {state:<40} {pods}")
                last = (state, pods)
            if "Succeeded (" in state or "Failed (" in state:
                result = "Succeeded" if "Succeeded (" in state else "Failed"
                break
            time.sleep(0.5)
        wall = time.monotonic() - t0
        output = ""
        if real:
            output = kubectl("-n", ns, "logs", f"job/{name}-launcher").stdout.strip()
            for line in output.splitlines()[-6:]:
                say(f"launcher | {line}")
        time.sleep(1)
        say(f"after the run: {snapshot(ns, name)[1] or '(no pods)'}")
        return {"backend": backend, "job": f"{ns}/{name}", "result": result, "seconds": round(wall, 1),
                "pi": next((ln for ln in output.splitlines() if "pi is approximately" in ln), "")}
    finally:
        op.stop()


def main() -> int:
    t0 = time.monotonic()
    say("bringing up the local cluster (hack/cluster-up.sh; the first run builds Kubernetes: minutes)")
    subprocess.run([str(ROOT / "hack" / "cluster-up.sh")], check=True)
    say(f"cluster up in {time.monotonic() - t0:.0f}s; installing the CRD and RBAC of manifests/")
    kubeconfig = subprocess.run([str(ROOT / "hack" / "operator-kubeconfig.sh")], check=True,
                                capture_output=True, text=True).stdout.strip()
    real = real_node_ready()
    say("real node: " + ("yes: mpirun really runs in pods" if real else "no: pods are simulated by kwok"))
    results = [run_backend(b, kubeconfig, real) for b in ("job", "statefulset")]
    say("summary")
    for r in results:
        say(f"  {r['backend']:<12} {r['job']:<26} {r['result']:<10} {r['seconds']:>6.1f}s  {r['pi']}")
    say(f"total {time.monotonic() - t0:.0f}s; the cluster stays up (make cluster-down to stop it)")
    return 0 if all(r["result"] == "Succeeded" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
