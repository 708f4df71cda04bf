"""Bad input never sticks in silence (issue #14): an MPIJob the CRD admits but the API server would
refuse a child of is InvalidSpec at once, with a Warning Event naming the field; what validation
cannot foresee ends Failed/ChildRefused (permanent) or shows Blocked until it passes (quota)."""

from __future__ import annotations

import copy
import json
import re
import time

import pytest

from testsupport.builders import simulated_mpijob
from testsupport.kubectl import apply, conditions, events, get, wait_condition
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster
W = "spec.mpiReplicaSpecs.Worker.template"


def worker_container(job: dict) -> dict:
    return job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def bad(name: str, change) -> dict:
    job = simulated_mpijob(name, launcher_runs="2s")
    change(job)
    return job


def _set(path: list, value):
    def change(job):
        obj = job
        for k in path[:-1]:
            obj = obj.setdefault(k, {}) if isinstance(k, str) else obj[k]
        obj[path[-1]] = value
    return change


WT = ["spec", "mpiReplicaSpecs", "Worker", "template"]
WC = [*WT, "spec", "containers", 0]
CASES = [
    ("dup-containers", lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        copy.deepcopy(worker_container(j))), f"{W}.spec.containers[1].name"),
    ("long-container", _set([*WC, "name"], "c" * 64), f"{W}.spec.containers[0].name"),
    ("umlaut-container", _set([*WC, "name"], "wörker"), f"{W}.spec.containers[0].name"),
    ("label-value", _set([*WT, "metadata"], {"labels": {"team": "zürich"}}), f"{W}.metadata.labels"),
    ("annotation-key", _set([*WT, "metadata"], {"annotations": {"schlüssel": "v"}}), f"{W}.metadata.annotations"),
    ("env-name", _set([*WC, "env"], [{"name": "A=B", "value": "1"}]), f"{W}.spec.containers[0].env[0].name"),
    ("big-annotations", _set([*WT, "metadata"], {"annotations": {"a": "x" * (257 * 1024)}}),
     f"{W}.metadata.annotations"),
    ("dup-volume", _set([*WT, "spec", "volumes"], [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
     f"{W}.spec.volumes[1].name"),
    ("mount-no-volume", _set([*WC, "volumeMounts"], [{"name": "nope", "mountPath": "/x"}]),
     f"{W}.spec.containers[0].volumeMounts[0].name"),
    ("cpu-lots", _set([*WC, "resources"], {"requests": {"cpu": "lots"}}),
     f"{W}.spec.containers[0].resources.requests.cpu"),
    ("resources-big", _set([*WC, "resources"], "big"), f"{W}.spec.containers[0].resources"),
    ("many-workers", _set(["spec", "mpiReplicaSpecs", "Worker", "replicas"], 25000),
     "spec.mpiReplicaSpecs.Worker.replicas"),
]


def test_what_the_api_server_would_refuse_is_invalid_spec_within_seconds(kubectl, start_operator, namespace):
    op = start_operator("job", namespace, "--log-format=json")
    docs = []
    for name, change, _ in CASES:
        job = bad(name, change)
        job["spec"]["runPolicy"]["suspend"] = name == "many-workers"  # large counts are sent suspended
        docs.append(json.dumps(job))
    # create, not apply: apply would copy the 257 KiB annotation into the MPIJob's own metadata
    r = kubectl("-n", namespace, "create", "-f", "-", input="\n---\n".join(docs), timeout=120, check=False)
    # A CRD with a full pod template schema (manifests/crd/) refuses some of these at admission
    # already: that is the first line of defence, and its message must name the field as well.
    admission = dict(re.findall(r'MPIJob\.kubeflow\.org "([^"]+)" is invalid: (.*)', r.stderr))
    for name, _, field in CASES:
        if name in admission:
            leaf = field.rsplit(".", 1)[-1].split("[")[0]  # name, labels, cpu, replicas...
            assert leaf in admission[name], (name, admission[name])
            continue
        failed = wait_condition(kubectl, namespace, name, "Failed", timeout=30)
        assert failed["reason"] == "InvalidSpec" and field in failed["message"], (name, failed)
        warnings = wait_until(lambda name=name: [e for e in events(kubectl, namespace, name)
                                                 if e["type"] == "Warning" and e["reason"] == "InvalidSpec"],
                              30, what=f"{name}: Warning Event")
        assert field in warnings[0]["message"], (name, warnings[0]["message"])
        assert get(kubectl, namespace, "configmap", f"{name}-config") is None, f"{name}: a child was created"
    print(f"\n{len(CASES)} MPIJobs: {len(admission)} refused at admission, {len(CASES) - len(admission)} InvalidSpec")
    log = op.log_path.read_text()
    assert "Traceback" not in log
    for line in log.splitlines():
        json.loads(line)  # --log-format=json: every line


def test_a_permanent_refusal_fails_with_the_servers_words_and_clears_when_the_spec_is_fixed(
        kubectl, start_operator, namespace):
    """imagePullPolicy is not checked by validation: the Job create is refused with 422."""
    op = start_operator("job", namespace, "--log-format=json")
    job = simulated_mpijob("pull", launcher_runs="2s", policy="AtStartup")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["imagePullPolicy"] = "Sometimes"
    apply(kubectl, namespace, job)
    failed = wait_condition(kubectl, namespace, "pull", "Failed", timeout=20)
    field = "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].imagePullPolicy"
    assert failed["reason"] == "ChildRefused", failed
    assert field in failed["message"] and "Unsupported value" in failed["message"], failed["message"]
    warned = wait_until(lambda: [e for e in events(kubectl, namespace, "pull")
                                 if e["type"] == "Warning" and "ChildRefused" in e["message"]], 15, what="Event")
    assert field in warned[0]["message"]
    # No retry loop: the refusal is logged once, however long we wait.
    wait_until(lambda: op.log_path.read_text().count("the API server refused a child") >= 1, 10, what="log line")
    count = op.log_path.read_text().count("the API server refused a child")
    time.sleep(5)
    assert op.log_path.read_text().count("the API server refused a child") == count == 1
    assert len([e for e in events(kubectl, namespace, "pull") if "ChildRefused" in e["message"]]) == 1
    # The spec fixed (a new generation): Failed goes and the MPIJob runs to the end.
    kubectl("-n", namespace, "patch", "mpijobs.v2beta1.kubeflow.org", "pull", "--type=json", "-p", json.dumps([
        {"op": "replace", "path": "/spec/mpiReplicaSpecs/Launcher/template/spec/containers/0/imagePullPolicy",
         "value": "IfNotPresent"}]))
    wait_condition(kubectl, namespace, "pull", "Succeeded", timeout=60)
    assert "Traceback" not in op.log_path.read_text()


def test_a_quota_refusal_shows_blocked_and_clears_when_the_quota_is_raised(kubectl, start_operator, namespace):
    kubectl("-n", namespace, "create", "quota", "jobs", "--hard=count/jobs.batch=1")
    wait_until(lambda: (get(kubectl, namespace, "resourcequota", "jobs") or {}).get("status", {}).get("hard"),
               30, what="the quota controller to fill the quota's status")
    op = start_operator("job", namespace, "--log-format=json")
    apply(kubectl, namespace, simulated_mpijob("q", launcher_runs="2s"))  # WaitForWorkersReady: workers first
    blocked = wait_condition(kubectl, namespace, "q", "Blocked", timeout=30)
    assert blocked["reason"] == "ChildRefused" and "exceeded quota" in blocked["message"], blocked
    assert "Failed" not in conditions(kubectl, namespace, "q")
    kubectl("-n", namespace, "patch", "quota", "jobs", "-p", json.dumps({"spec": {"hard": {"count/jobs.batch": "5"}}}))
    wait_condition(kubectl, namespace, "q", "Succeeded", timeout=60)
    assert "Blocked" not in conditions(kubectl, namespace, "q")
    warnings = [e for e in events(kubectl, namespace, "q") if e["type"] == "Warning" and e["reason"] == "ChildRefused"]
    assert len(warnings) == 1, warnings  # one per transition, not per retry
    assert "Traceback" not in op.log_path.read_text()
