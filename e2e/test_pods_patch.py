"""Issue 42 item 4, on the local cluster: the ClusterRole's pods patch (there for one annotation on
elastic launchers), pods delete and secrets patch/delete, narrowed by manifests/rbac/operator_writes_policy.yaml
to the operator's own objects. The ServiceAccount of manifests/rbac (operator_kubeconfig, which applies
that directory) is refused a foreign pod's image, any other change of a pod of ours than the
discover-hosts stamp, and any write to a foreign pod or Secret; other users are not constrained; and
the operator still stamps an elastic launcher within seconds (the real node's elastic test,
e2e/test_realnode_mpis.py, shows discover_hosts.sh following the workers under the same policy)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from reconcilers.elastic import REFRESH_ANNOTATION
from reconcilers.names import OPERATOR_NAME_LABEL
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, get, pods, wait_condition
from testsupport.paths import CLUSTER_DIR
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

POLICY = "mpi-operator-pod-writes"


def _as_operator(operator_kubeconfig: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLUSTER_DIR / "bin" / "kubectl"), f"--kubeconfig={operator_kubeconfig}", *args],
                          capture_output=True, text=True, timeout=60)


def _pod(name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                     "nodeSelector": {"no-such-node": "true"}}}  # never scheduled: only the object matters


def _patch(pod: str, patch: dict) -> tuple[str, ...]:
    return ("patch", "pod", pod, "--type=strategic", "-p", json.dumps(patch))


def test_pods_patch_the_operator_may_stamp_its_own_pods_and_nothing_else(kubectl, operator_kubeconfig, namespace):
    n = ("-n", namespace)
    kubectl(*n, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        _pod("foreign", {"app": "someone-else"}), _pod("ours", {OPERATOR_NAME_LABEL: "mpi-operator"})]}))
    kubectl(*n, "create", "secret", "generic", "foreign", "--from-literal=k=v")
    image = {"spec": {"containers": [{"name": "c", "image": "evil.example/miner:1"}]}}
    stamp = {"metadata": {"annotations": {REFRESH_ANNOTATION: "abc"}}}

    # A foreign pod's image: refused by the policy (the ClusterRole alone lets it through).
    def refused_by_policy() -> str | None:
        r = _as_operator(operator_kubeconfig, *n, *_patch("foreign", image))
        return r.stderr if r.returncode != 0 and POLICY in r.stderr else None

    why = wait_until(refused_by_policy, 30, interval=0.5, what="the policy in force")  # it takes a moment to load
    assert "only pods of MPIJobs" in why, why
    assert get(kubectl, namespace, "pod", "foreign")["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    # nor its annotation, nor its end
    for args in (_patch("foreign", stamp), ("delete", "pod", "foreign", "--wait=false")):
        r = _as_operator(operator_kubeconfig, *n, *args)
        assert r.returncode != 0 and "only pods of MPIJobs" in r.stderr, (args, r.stderr)
    # A pod of ours: the stamp passes, anything else is refused.
    for patch in (image, {"metadata": {"labels": {"x": "y"}}}, {"metadata": {"annotations": {"other": "1"}}},
                  {"metadata": {"annotations": {REFRESH_ANNOTATION: "abc", "other": "1"}}},
                  {"spec": {"activeDeadlineSeconds": 5}}):
        r = _as_operator(operator_kubeconfig, *n, *_patch("ours", patch))
        assert r.returncode != 0 and "only the annotation mpijob-operator.dev/discover-hosts" in r.stderr, (patch, r)
    r = _as_operator(operator_kubeconfig, *n, *_patch("ours", stamp))
    assert r.returncode == 0, r.stderr
    assert get(kubectl, namespace, "pod", "ours")["metadata"]["annotations"][REFRESH_ANNOTATION] == "abc"
    # A foreign Secret: neither rewritten nor deleted.
    for args in (("patch", "secret", "foreign", "--type=merge", "-p", '{"data":{"k":"eA=="}}'),
                 ("delete", "secret", "foreign", "--wait=false")):
        r = _as_operator(operator_kubeconfig, *n, *args)
        assert r.returncode != 0 and "only Secrets an MPIJob controls" in r.stderr, (args, r.stderr)
    assert get(kubectl, namespace, "secret", "foreign")["data"] == {"k": "dg=="}
    # Only that ServiceAccount is held: anyone else with the verbs is not.
    kubectl(*n, *_patch("foreign", stamp))
    kubectl(*n, "delete", "secret", "foreign")
    # ...and it may still end a pod of ours (cleanPodPolicy All, the upstream operator's bare workers).
    r = _as_operator(operator_kubeconfig, *n, "delete", "pod", "ours", "--wait=false")
    assert r.returncode == 0, r.stderr


def test_pods_patch_the_elastic_launcher_is_still_stamped_within_seconds(kubectl, operator, namespace, backend):
    """The operator under the policy stamps its elastic launcher when the hosts change (kwok plays
    the pods; the real node's test follows discover_hosts.sh into the launcher)."""
    job = simulated_mpijob("el", workers=2, launcher_runs=None)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"] = [
        "--host-discovery-script", "/etc/mpi/discover_hosts.sh"]
    apply(kubectl, namespace, job)
    wait_condition(kubectl, namespace, "el", "Running", timeout=90)

    def stamp() -> str | None:
        launchers = [p for p in pods(kubectl, namespace, "el", "launcher") if p["status"].get("phase") == "Running"]
        return (launchers[0]["metadata"].get("annotations") or {}).get(REFRESH_ANNOTATION) if launchers else None

    first = wait_until(stamp, 30, interval=0.3, what="the launcher stamped")
    kubectl("-n", namespace, "patch", "mpijobs.kubeflow.org", "el", "--type=merge",
            "-p", '{"spec":{"mpiReplicaSpecs":{"Worker":{"replicas":3}}}}')
    t0 = time.monotonic()
    wait_until(lambda: (stamp() or first) != first, 30, interval=0.3, what="the launcher stamped anew")
    took = time.monotonic() - t0
    cm = get(kubectl, namespace, "configmap", "el-config")
    assert "el-worker-2" in cm["data"]["discover_hosts.sh"]
    print(f"\n[pods_patch] {backend}: launcher stamped {took:.1f}s after the third worker was asked for")
    assert "Forbidden" not in operator.tail(2000) and "-writes" not in operator.tail(2000)


def test_pods_patch_the_operator_may_remove_its_finalizer_and_no_other(kubectl, operator_kubeconfig, namespace):
    """The launcher pods' finalizer mpijob-operator.dev/attempt-record (reconcilers/failure/hold.py) is the
    operator's to remove, with the strategic patch it sends; another finalizer is not, nor adding one.
    Applied again just before (the cluster is shared: a session of another checkout applies its own)."""
    from reconcilers.failure.hold import FINALIZER, release_patch
    from testsupport.paths import ROOT

    n = ("-n", namespace)
    other = "example.com/someone-elses"
    pod = _pod("held", {OPERATOR_NAME_LABEL: "mpi-operator"})
    pod["metadata"]["finalizers"] = [other, FINALIZER]
    kubectl(*n, "apply", "-f", "-", input=json.dumps(pod))
    try:
        kubectl("apply", "-k", str(ROOT / "manifests" / "rbac"))
        # someone else's finalizer, or adding one: refused
        for patch in ({"metadata": {"$deleteFromPrimitiveList/finalizers": [other]}},
                      {"metadata": {"finalizers": [other, FINALIZER, "example.com/more"]}}):
            r = _as_operator(operator_kubeconfig, *n, *_patch("held", patch))
            assert r.returncode != 0 and POLICY in r.stderr, (patch, r.stderr)
        release = release_patch(pod | {"metadata": {**pod["metadata"], "namespace": namespace}}, "test").patch
        r = _as_operator(operator_kubeconfig, *n, *_patch("held", release))
        assert r.returncode == 0, r.stderr
        assert get(kubectl, namespace, "pod", "held")["metadata"]["finalizers"] == [other]
    finally:
        kubectl(*n, "patch", "pod", "held", "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
