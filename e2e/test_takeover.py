"""Issue 42 item 6, the real upgrade on the real node: MPIJobs started by the Kubeflow MPI Operator (Go)
v0.8.2 (bench/go_operator.py builds it from its module: hack/build-mpi-operator-go.sh), their ranks
computing, that operator stopped and this one started (docs/architecture.md section 6.3).

- A bare worker deleted mid-run comes back as upstream makes it; the launcher Job's retry finds every
  host and the MPIJob ends Succeeded with pi from every rank.
- A second MPIJob suspended (its bare workers and upstream's launcher Job stopped) and resumed runs
  afresh in this operator's shape and ends Succeeded.

The Go operator runs as a ServiceAccount of the test's namespace bound to upstream's own ClusterRole
(read from its module); this operator with the ServiceAccount of manifests/ (and its admission policy)."""

from __future__ import annotations

import json
import time

import pytest

from bench import go_operator
from reconcilers.names import TEMPLATE_HASH_ANNOTATION
from testsupport.kubectl import conditions, get, items, role_pods, token_kubeconfig, wait_finished
from testsupport.paths import ROOT
from testsupport.realnode_mpi import SSHD, launcher_logs, mpijob, rank_hosts, ready_workers, wait_launcher_running
from testsupport.upstream_rbac import bind, unbind
from testsupport.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.builds("mpi-images", "mpi-operator-go")]

PI = ["mpirun", "-n", "4", "--hostfile", "/etc/mpi/hostfile", "/opt/pi"]


def _live(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p["status"].get("phase") in ("Pending", "Running")
            and not p["metadata"].get("deletionTimestamp")]


def _every_rank(logs: str) -> None:
    assert "pi is approximately 3.14159" in logs, logs[-3000:]
    assert sorted(rank_hosts(logs)) == [0, 1, 2, 3], logs[-3000:]


def test_takeover_of_the_go_operators_mpijobs_mid_run(kubectl, realnode, mpi_image, start_operator, namespace,
                                                      tmp_path):
    t0 = time.monotonic()
    binary, module = go_operator.build()
    print(f"\n[takeover] Go operator v{go_operator.VERSION} ready in {time.monotonic() - t0:.0f}s (cached after once)")
    image = mpi_image("openmpi4")
    role = f"e2e-takeover-{namespace}"
    kubectl("-n", namespace, "create", "serviceaccount", "upstream-op")
    upstream_role = go_operator.cluster_role((module / "manifests" / "base" / "cluster-role.yaml").read_text(), role)
    try:
        bind(kubectl, role, upstream_role["rules"], namespace, "upstream-op")
        kc = token_kubeconfig(kubectl, namespace, "upstream-op", tmp_path / "go.kubeconfig")
        go = go_operator.GoOperatorProcess(binary, kc, namespace, namespace, tmp_path / "go.log", ())
        try:
            go.wait_ready()
            # long runs: the ranks still compute when the operators change hands
            kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(
                mpijob("kill", "openmpi4", image, args=[*PI, "20000000000"], backoff=3, worker_command=SSHD)))
            kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(
                mpijob("sus", "openmpi4", image, args=[*PI, "20000000000"], backoff=3, worker_command=SSHD)))
            for name in ("kill", "sus"):
                wait_launcher_running(kubectl, namespace, name)
            bare = {p["metadata"]["name"]: p for p in role_pods(kubectl, namespace, "kill", "worker")}
            assert set(bare) == {"kill-worker-0", "kill-worker-1"}, "upstream's bare workers"
            assert all(p["metadata"]["ownerReferences"][0]["kind"] == "MPIJob" for p in bare.values())
        finally:
            go.stop()
            print(f"--- Go operator log, last lines ---\n{go.tail(20)}")

        # manifests/rbac again, as the upgrade applies it (on the shared cluster another checkout's may
        # have been applied since the session began); the operator says at start if a grant is missing
        kubectl("apply", "-k", str(ROOT / "manifests" / "rbac"))
        op = start_operator("job", namespace)
        assert "RBAC: every grant the operator sends is granted" in op.tail(400), op.tail(40)
        # taken over: upstream's children adopted (our labels on its ConfigMap)
        wait_until(lambda: "training.kubeflow.org/operator-name" in (
            (get(kubectl, namespace, "configmap", "kill-config") or {}).get("metadata", {}).get("labels") or {}),
            60, what="upstream's children adopted")

        # 1. A taken-over MPIJob suspended (its pods stopped, which also leaves the real node's CPU to the other)...
        patch = lambda v: kubectl("-n", namespace, "patch", "mpijobs.kubeflow.org", "sus", "--type=merge",  # noqa: E731
                                  "-p", json.dumps({"spec": {"runPolicy": {"suspend": v}}}))
        upstreams = get(kubectl, namespace, "job", "sus-launcher")["metadata"]["uid"]
        patch(True)
        wait_until(lambda: not _live(role_pods(kubectl, namespace, "sus", "worker")
                                     + role_pods(kubectl, namespace, "sus", "launcher")), 120, what="sus stopped")
        # gone, or already replaced by this operator's own, suspended (reconcilers/takeover.py suspend)
        wait_until(lambda: ((get(kubectl, namespace, "job", "sus-launcher") or {}).get("metadata") or {}).get(
            "uid") != upstreams, 60, what="upstream's launcher Job gone")
        # 2. A bare worker lost mid-run comes back, as upstream makes it.
        victim = bare["kill-worker-0"]
        t_kill = time.monotonic()
        assert conditions(kubectl, namespace, "kill").get("Succeeded", {}).get("status") != "True", "ran out already"
        kubectl("-n", namespace, "delete", "pod", "kill-worker-0", "--wait=false")

        def back() -> dict | None:
            ws = [p for p in ready_workers(kubectl, namespace, "kill") if p["metadata"]["name"] == "kill-worker-0"]
            return ws[0] if ws and ws[0]["metadata"]["uid"] != victim["metadata"]["uid"] else None

        new = wait_until(back, 120, interval=0.3, what="kill-worker-0 back, Ready")
        print(f"[takeover] bare worker deleted -> back Ready: {time.monotonic() - t_kill:.1f}s")
        assert new["metadata"]["ownerReferences"][0]["kind"] == "MPIJob", "a bare pod, as upstream's"
        assert new["spec"]["hostname"] == "kill-worker-0" and new["spec"]["subdomain"] == "kill"
        assert new["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "0"
        assert wait_finished(kubectl, namespace, "kill", 600) == "Succeeded"
        assert int(get(kubectl, namespace, "job", "kill-launcher")["status"].get("failed") or 0) >= 1, \
            "the launcher's attempt cut short by the loss failed, and a retry ran"
        _every_rank(launcher_logs(kubectl, namespace, "kill"))
        wait_until(lambda: not _live(role_pods(kubectl, namespace, "kill", "worker")), 60, what="workers stopped")
        assert {j["metadata"]["name"] for j in items(kubectl, namespace, "jobs") if j["metadata"]["name"].startswith(
            "kill")} == {"kill-launcher"}, "upstream's launcher ran it out; no worker Job beside the bare pods"

        # 3. ...and resumed: afresh, in this operator's shape.
        patch(False)
        assert wait_finished(kubectl, namespace, "sus", 600) == "Succeeded"
        launcher = get(kubectl, namespace, "job", "sus-launcher")
        assert TEMPLATE_HASH_ANNOTATION in launcher["metadata"]["annotations"], "our launcher Job"
        assert get(kubectl, namespace, "job", "sus-worker") is not None, "our worker Job"
        _every_rank(launcher_logs(kubectl, namespace, "sus"))
    finally:
        unbind(kubectl, role)
