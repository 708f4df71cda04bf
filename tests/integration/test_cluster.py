"""The local cluster is real: the Job, StatefulSet and garbage-collector controllers, the scheduler,
kwok's steered pod lifecycles and RBAC all do their work on a real kube-apiserver."""

from __future__ import annotations

import json

import pytest
import yaml

from testsupport.builders import EXIT_CODE, EXIT_ON_DELETE, FAIL_AFTER, RUN_FOR
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster


def pods(get_json, ns: str, selector: str) -> list[dict]:
    return get_json("pods", "-n", ns, "-l", selector)["items"]


def test_indexed_job_pods_get_stable_hostnames_and_complete(kubectl, get_json, namespace):
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "idx"},
        "spec": {
            "completionMode": "Indexed", "completions": 3, "parallelism": 3,
            "template": {
                "metadata": {"labels": {"app": "idx"},
                             "annotations": {RUN_FOR: "1s"}},
                "spec": {"subdomain": "idx", "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }))
    # The Job controller counts the 3 successes first (SuccessCriteriaMet) and adds Complete once their
    # pods' finalizers are gone: a later write, waited for.
    job = wait_until(lambda: (j := get_json("job", "-n", namespace, "idx"))
                     .get("status", {}).get("succeeded") == 3
                     and any(c["type"] == "Complete" and c["status"] == "True"
                             for c in j["status"].get("conditions") or []) and j,
                     timeout=60, what="3 succeeded, the Job Complete")
    assert job["status"].get("failed", 0) == 0, job["status"]
    got = sorted((p["spec"]["hostname"], p["status"]["phase"]) for p in pods(get_json, namespace, "app=idx"))
    assert got == [("idx-0", "Succeeded"), ("idx-1", "Succeeded"), ("idx-2", "Succeeded")]


def test_failing_pod_is_retried_until_backoff_limit(kubectl, get_json, namespace):
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "metadata": {"labels": {"app": "bad"},
                             "annotations": {RUN_FOR: "500ms",
                                             EXIT_CODE: "1"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }))

    def failed():
        conds = get_json("job", "-n", namespace, "bad").get("status", {}).get("conditions", [])
        return [c for c in conds if c["type"] == "Failed" and c["status"] == "True"]

    cond = wait_until(failed, timeout=90, what="Job Failed")[0]
    assert cond["reason"] == "BackoffLimitExceeded"
    assert [p["status"]["phase"] for p in pods(get_json, namespace, "app=bad")] == ["Failed", "Failed"]


def test_statefulset_pods_become_ready_and_deleted_pod_returns(kubectl, get_json, namespace):
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "sts"},
        "spec": {
            "replicas": 2, "serviceName": "sts", "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "sts"}},
            "template": {"metadata": {"labels": {"app": "sts"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    }))
    wait_until(lambda: get_json("sts", "-n", namespace, "sts").get("status", {}).get("readyReplicas") == 2,
               timeout=60, what="2 ready replicas")
    assert sorted(p["metadata"]["name"] for p in pods(get_json, namespace, "app=sts")) == ["sts-0", "sts-1"]
    old_uid = get_json("pod", "-n", namespace, "sts-1")["metadata"]["uid"]
    kubectl("delete", "pod", "-n", namespace, "sts-1", "--wait=false")

    def replaced_and_ready():
        # Listed, not read by name: between the delete and the StatefulSet controller's create, sts-1 is
        # absent, and a read by name would fail on NotFound instead of waiting.
        new = [p for p in pods(get_json, namespace, "app=sts")
               if p["metadata"]["name"] == "sts-1" and p["metadata"]["uid"] != old_uid]
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for p in new for c in p["status"].get("conditions", []))

    wait_until(replaced_and_ready, timeout=60, what="sts-1 recreated and Ready")


def test_pod_fails_after_annotated_delay(kubectl, get_json, namespace):
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": {FAIL_AFTER: "1s"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    wait_until(lambda: get_json("pod", "-n", namespace, "p")["status"].get("phase") == "Running",
               timeout=30, what="Running")
    p = wait_until(lambda: (q := get_json("pod", "-n", namespace, "p"))["status"]["phase"] == "Failed" and q,
                   timeout=30, what="Failed")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1


def test_deleting_owner_garbage_collects_dependents(kubectl, get_json, namespace):
    kubectl("create", "configmap", "owner", "-n", namespace)
    uid = get_json("configmap", "-n", namespace, "owner")["metadata"]["uid"]
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dependent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": True}]},
    }))
    kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_until(lambda: kubectl("get", "configmap", "dependent", "-n", namespace, check=False).returncode != 0,
               timeout=60, what="dependent garbage-collected")
    assert "NotFound" in kubectl("get", "configmap", "dependent", "-n", namespace, check=False).stderr


def test_service_account_without_permission_is_forbidden(kubectl, tmp_path, namespace):
    kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    token = kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
    as_sa = token_kubeconfig(tmp_path, token)

    def list_pods():
        return kubectl(f"--kubeconfig={as_sa}", "get", "pods", "-n", namespace, check=False)

    r = list_pods()
    assert r.returncode != 0
    assert "Forbidden" in r.stderr and f"system:serviceaccount:{namespace}:nobody" in r.stderr
    # The same identity succeeds once RBAC grants it the verb: the refusal was RBAC's.
    kubectl("create", "role", "read-pods", "--verb=list", "--resource=pods", "-n", namespace)
    kubectl("create", "rolebinding", "read-pods", "--role=read-pods",
            f"--serviceaccount={namespace}:nobody", "-n", namespace)
    wait_until(lambda: list_pods().returncode == 0, timeout=30, what="allowed after the RoleBinding")


def token_kubeconfig(tmp_path, token: str) -> str:
    from testsupport.paths import CLUSTER_DIR

    admin = yaml.safe_load((CLUSTER_DIR / "kubeconfig").read_text())
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": admin["clusters"][0]["name"], "user": "sa"}}],
        "current-context": "sa",
    }
    path = tmp_path / "sa.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.parametrize("annotations,phase,code", [
    ({}, "Succeeded", 0),  # a daemon such as a worker's `sshd -De` exits 0 on SIGTERM
    ({EXIT_ON_DELETE: "143"}, "Failed", 143),
    ({RUN_FOR: "1h"}, "Failed", 137),  # a program that ignores SIGTERM as PID 1
])
def test_a_deleted_running_pod_exits_as_its_program_would(kubectl, get_json, namespace, annotations, phase, code):
    """kwok is never kinder than a real node: what a deleted pod's container exits with decides whether
    an Indexed Job counts its index as completed. A finalizer keeps the pod readable after it stopped."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "annotations": annotations, "finalizers": ["mpijob-operator.dev/test-hold"]},
           "spec": {"containers": [{"name": "c", "image": "x"}], "restartPolicy": "Never",
                    "nodeSelector": {"type": "kwok"}}}
    kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(pod))
    wait_until(lambda: get_json("pod", "-n", namespace, "p")["status"].get("phase") == "Running", 30, what="Running")
    kubectl("-n", namespace, "delete", "pod", "p", "--wait=false")
    p = wait_until(lambda: (q := get_json("pod", "-n", namespace, "p"))["status"]["phase"] in ("Succeeded", "Failed")
                   and q, timeout=30, what="stopped")
    try:
        assert p["status"]["phase"] == phase
        assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == code
    finally:
        kubectl("-n", namespace, "patch", "pod", "p", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
