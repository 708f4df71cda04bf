"""testsupport.kubectl's reads in the test's own process (Reader) against the same reads through
kubectl: what get() and items() return must not depend on which one served them."""

from __future__ import annotations

import json

import pytest

from testsupport.kubectl import MPIJOBS, RESOURCES, SPENT, get, items, pod_log, resource_path, runner
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


def _through_kubectl(kubectl):
    """The same runner without its Reader: get() and items() fall back to a kubectl process."""
    def run(*args, **kw):
        return kubectl(*args, **kw)
    return run


def _configmap(name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def test_get_and_items_read_in_process_as_kubectl_shows_them(kubectl, namespace):
    for name, labels in (("a", {"role": "x"}), ("b", {"role": "y"})):
        kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(_configmap(name, labels)))
    plain = _through_kubectl(kubectl)
    reads = SPENT["reads"]
    assert get(kubectl, namespace, "configmap", "a") == get(plain, namespace, "configmap", "a")
    assert get(kubectl, namespace, "configmap", "a")["data"] == {"k": "v"}
    assert get(kubectl, namespace, "configmap", "absent") is None is get(plain, namespace, "configmap", "absent")
    for selector in ("", "role=y", "role in (x,y)", "role=none"):
        mine = items(kubectl, namespace, "configmaps", selector)
        theirs = items(plain, namespace, "configmaps", selector)
        # (kube-root-ca.crt, made by the cluster in every namespace, is among them without a selector)
        assert mine == theirs and all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in mine), selector
    assert [o["metadata"]["name"] for o in items(kubectl, namespace, "configmap", "role=y")] == ["b"]
    assert SPENT["reads"] == reads + 8  # served in this process, not by kubectl


def test_an_mpijob_read_in_process_under_each_name_the_tests_use(kubectl, namespace):
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
           "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "l", "image": "x"}]}}}}}}
    kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job))
    want = get(_through_kubectl(kubectl), namespace, "mpijob", "pi")
    for kind in ("mpijob", "mpijobs", MPIJOBS):
        assert get(kubectl, namespace, kind, "pi") == want, kind


@pytest.mark.parametrize("default", [None, "sim-cut-short"])
def test_a_pod_log_read_in_process_is_the_container_kubectl_picks(kubectl, namespace, default):
    """A kwok pod of two containers whose logs differ (hack/kwok/logs/README.md: a container named
    sim-cut-short prints cut-short.log, any other finished.log): the first container's log, or the one
    the default-container annotation names, as `kubectl logs` picks it."""
    meta = {"name": "two", "namespace": namespace,
            "annotations": {"kubectl.kubernetes.io/default-container": default} if default else {}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [
        {"name": "main", "image": "x"}, {"name": "sim-cut-short", "image": "x"}]}}
    kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(pod))
    running = wait_until(lambda: next((p for p in items(kubectl, namespace, "pods")
                                       if p["status"].get("phase") == "Running"), None), 60, what="the pod Running")
    theirs = kubectl("-n", namespace, "logs", "two").stdout
    assert theirs and pod_log(kubectl, running) == theirs
    other = kubectl("-n", namespace, "logs", "two", "-c", "main" if default else "sim-cut-short").stdout
    assert other != theirs  # the two containers' logs differ: the right one was read


@pytest.mark.parametrize(("kind", "path"), [
    ("pod", "/api/v1/namespaces/ns/pods/n"),
    ("events", "/api/v1/namespaces/ns/events/n"),
    ("job", "/apis/batch/v1/namespaces/ns/jobs/n"),
    ("statefulsets", "/apis/apps/v1/namespaces/ns/statefulsets/n"),
    ("networkpolicy", "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/n"),
    ("mpijobs.v2beta1.kubeflow.org", "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/n"),
    ("node", None),  # cluster-scoped and others: kubectl
    ("podgroups", None),
])
def test_resource_path(kind, path):
    assert resource_path("ns", kind, "n") == path
    assert (kind in RESOURCES) == (path is not None)


def test_no_answer_reads_as_kubectl_failing(tmp_path):
    """An API server that does not answer (nothing listens on the port): get() is None, items()
    raises, as when kubectl fails; neither raises the client's own connection error."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    kubectl = runner(str(kc))
    assert get(kubectl, "ns", "pod", "p") is None
    with pytest.raises(AssertionError, match="answered 0"):
        items(kubectl, "ns", "pods")
