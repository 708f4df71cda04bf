"""The operator killed, replaced or loaded: the cluster still converges, with no duplicate child
and no lost MPIJob (docs/architecture.md section 7)."""

from __future__ import annotations

import json
import time

import pytest

from reconcilers.names import JOB_NAME_LABEL
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, conditions, get, items, pods, wait_condition
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


def _succeeded(kubectl, ns: str) -> set[str]:
    return {j["metadata"]["name"] for j in items(kubectl, ns, "mpijobs")
            if any(c["type"] == "Succeeded" and c["status"] == "True"
                   for c in (j.get("status") or {}).get("conditions", []))}


def _secret_uids(kubectl, ns: str) -> dict[str, str]:
    return {s["metadata"]["name"]: s["metadata"]["uid"] for s in items(kubectl, ns, "secrets", JOB_NAME_LABEL)}


def test_sigkill_mid_reconcile_then_restart_converges_without_duplicates(
        kubectl, start_operator, namespace, backend):
    names = [f"k{i}" for i in range(8)]
    op = start_operator(backend, namespace)
    for n in names:
        apply(kubectl, namespace, simulated_mpijob(n, launcher_runs="3s"))
    # Kill it while it is creating children: some MPIJobs half done, some not started.
    wait_until(lambda: items(kubectl, namespace, "configmaps", JOB_NAME_LABEL), 30, interval=0.05, what="first child")
    op.kill()
    secrets_before = _secret_uids(kubectl, namespace)
    start_operator(backend, namespace, name="restarted")
    wait_until(lambda: _succeeded(kubectl, namespace) == set(names), 180, interval=1, what="all Succeeded")
    for n in names:
        launcher_pods = pods(kubectl, namespace, n, "launcher")
        assert len(launcher_pods) == 1, f"{n}: {len(launcher_pods)} launcher pods (duplicate run?)"
        for kind in ("configmap", "secret", "service", "job"):
            assert len(items(kubectl, namespace, kind, f"{JOB_NAME_LABEL}={n}")) == (
                2 if kind == "job" and backend == "job" else 1), (n, kind)
    regenerated = secrets_before.items() - _secret_uids(kubectl, namespace).items()
    assert not regenerated, f"SSH Secrets regenerated after the restart: {regenerated}"


def test_standby_takes_over_when_the_leader_dies(kubectl, start_operator, namespace, backend):
    a = start_operator(backend, namespace, name="a")
    b = start_operator(backend, namespace, name="b")
    ops = wait_until(lambda: sorted((a, b), key=lambda o: -o.metric("mpi_operator_is_leader"))
                     if a.metric("mpi_operator_is_leader") + b.metric("mpi_operator_is_leader") == 1 else None,
                     30, what="exactly one leader")
    leader, standby = ops
    apply(kubectl, namespace, simulated_mpijob("before", launcher_runs="2s"))
    wait_condition(kubectl, namespace, "before", "Succeeded", timeout=90)
    assert standby.metric("mpi_operator_is_leader") == 0
    assert "created" not in standby.tail(400), "the standby wrote while it was not the leader"
    t0 = time.monotonic()
    leader.kill()
    apply(kubectl, namespace, simulated_mpijob("after", launcher_runs="2s"))
    wait_condition(kubectl, namespace, "after", "Succeeded", timeout=120)
    print(f"\nfailover: leader killed -> next MPIJob Succeeded in {time.monotonic() - t0:.1f}s")
    assert standby.metric("mpi_operator_is_leader") == 1


def test_fifty_mpijobs_at_once_all_succeed(kubectl, start_operator, namespace, backend):
    start_operator(backend, namespace, "--threadiness=8")
    names = [f"m{i:02d}" for i in range(50)]
    docs = "\n---\n".join(json.dumps(simulated_mpijob(n, workers=2, launcher_runs="2s")) for n in names)
    t0 = time.monotonic()
    kubectl("-n", namespace, "apply", "-f", "-", input=docs, timeout=120)
    wait_until(lambda: _succeeded(kubectl, namespace) == set(names), 400, interval=2, what="50 Succeeded")
    print(f"\n[{backend}] 50 MPIJobs submitted -> all Succeeded in {time.monotonic() - t0:.1f}s")
    failed = [n for n in names if conditions(kubectl, namespace, n).get("Failed", {}).get("status") == "True"]
    assert not failed
    assert get(kubectl, namespace, "mpijob", names[0])
