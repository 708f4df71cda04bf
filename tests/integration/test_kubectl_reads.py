"""testsupport.kubectl's reads in the test's own process (Reader) against the same reads through
kubectl: what get() and items() return must not depend on which one served them."""

from __future__ import annotations

import json

import pytest

from testsupport.kubectl import MPIJOBS, RESOURCES, SPENT, get, items, resource_path

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
