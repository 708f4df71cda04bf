"""Issue 50 item 9 (`pods_create`): manifests/rbac/bare_worker_policy.yaml holds the operator's pod create
to the bare worker reconcilers/takeover.py renders. The policy names what the operator adds to the Worker
template (the SSH volume and its Secret, the default sshd command, K_MPI_JOB_ROLE); these tests fail when
the rendering adds anything the policy does not allow for, or changes a field the policy compares, so
that a change of desired.py cannot leave the takeover refused on the cluster (e2e/test_pods_create.py
asks the real API server)."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from reconcilers import defaults, desired, names, takeover
from reconcilers.types import Config
from testsupport.builders import mpijob

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac"
POLICY_FILE = RBAC / "bare_worker_policy.yaml"

# the fields of the pod spec the policy compares with the Worker template's
COMPARED = ("serviceAccountName", "automountServiceAccountToken", "hostNetwork", "hostPID", "hostIPC", "hostUsers",
            "shareProcessNamespace", "nodeName", "nodeSelector", "affinity", "runtimeClassName", "resourceClaims",
            "securityContext", "initContainers")
CONTAINER_COMPARED = ("image", "securityContext", "envFrom")


def _docs() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(POLICY_FILE.read_text())}


def _policy_text() -> str:
    """Every CEL expression of the policy, its white space made single spaces."""
    spec = _docs()["ValidatingAdmissionPolicy"]["spec"]
    exprs = [v["expression"] for v in spec["variables"]] + [v["expression"] for v in spec["validations"]]
    return "\n".join(" ".join(e.split()) for e in exprs)


def _worker(template_spec: dict, index: int = 0, **job_spec) -> tuple[dict, dict]:
    job = mpijob("pi", namespace="ns", uid="u-1", workers=2)
    job["spec"].update(job_spec)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(copy.deepcopy(template_spec))
    job = defaults.with_defaults(job)
    pod = takeover.bare_worker(SimpleNamespace(job=job, config=Config()), index)  # type: ignore[arg-type]
    return job, pod


def test_pods_create_the_policy_holds_the_operators_service_account():
    sa = yaml.safe_load((RBAC / "service_account.yaml").read_text())["metadata"]
    user = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    docs = _docs()
    (cond,) = docs["ValidatingAdmissionPolicy"]["spec"]["matchConditions"]
    assert cond["expression"] == f"request.userInfo.username == '{user}'"
    spec = docs["ValidatingAdmissionPolicy"]["spec"]
    assert spec["paramKind"] == {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob"}
    assert spec["failurePolicy"] == "Fail"
    binding = docs["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Deny"}
    # params are looked up before matchConditions: Deny without them would refuse every pod of every
    # namespace without an MPIJob; the binding looks only at pods labelled as an MPIJob's worker
    # (and not at the pods of Jobs and StatefulSets, whose labels the operator may not put on a pod)
    selector = binding["matchResources"]["objectSelector"]
    assert selector["matchLabels"] == {names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME,
                                       names.JOB_ROLE_LABEL: names.ROLE_WORKER}
    assert {e["operator"] for e in selector["matchExpressions"]} == {"DoesNotExist"}
    writes = yaml.safe_load_all((RBAC / "operator_writes_policy.yaml").read_text())
    pods = next(d for d in writes if d["metadata"]["name"] == "mpi-operator-pod-writes")
    (listed,) = [v["expression"] for v in pods["spec"]["variables"] if v["name"] == "controllerLabels"]
    assert sorted(e["key"] for e in selector["matchExpressions"]) == sorted(yaml.safe_load(listed))
    assert binding["validationActions"] == ["Deny"] and binding["policyName"] == \
        docs["ValidatingAdmissionPolicy"]["metadata"]["name"]
    assert POLICY_FILE.name in (RBAC / "kustomization.yaml").read_text()


@pytest.mark.parametrize("template_spec", [
    {},
    {"serviceAccountName": "trainer", "automountServiceAccountToken": False, "hostNetwork": True,
     "securityContext": {"runAsUser": 1000}, "nodeName": "n1", "runtimeClassName": "gvisor",
     "nodeSelector": {"pool": "mpi"}, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}},
    {"hostIPC": True, "initContainers": [{"name": "init", "image": "busybox"}],
     "volumes": [{"name": "data", "hostPath": {"path": "/data"}}]},
], ids=["bare", "hardened", "host"])
def test_pods_create_the_rendering_keeps_every_compared_field_of_the_template(template_spec):
    job, pod = _worker(template_spec)
    t = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    for f in COMPARED:
        assert pod["spec"].get(f) == t.get(f), f
    for c, tc in zip(pod["spec"]["containers"], t["containers"], strict=True):
        assert c["name"] == tc["name"]
        for f in CONTAINER_COMPARED:
            assert c.get(f) == tc.get(f), f


@pytest.mark.parametrize("command, args", [(None, None), (["/opt/sshd.sh"], None), (None, ["-p", "2222"])])
def test_pods_create_what_the_rendering_adds_is_what_the_policy_allows_for(command, args):
    container = {k: v for k, v in (("command", command), ("args", args)) if v is not None}
    job = mpijob("pi", namespace="ns", uid="u-1", workers=2)
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    for k in ("command", "args", "env", "volumeMounts"):
        worker.pop(k, None)
    worker.update(container)
    job = defaults.with_defaults(job)
    pod = takeover.bare_worker(SimpleNamespace(job=job, config=Config()), 0)  # type: ignore[arg-type]
    text = _policy_text()
    c = pod["spec"]["containers"][0]
    # the command: the template's, or sshd when it gives neither (the policy's literal)
    if command is None and args is None:
        assert "c.?command.orValue([]) == " + repr(c["command"]) in text
        assert "args" not in c
    else:
        assert (c.get("command"), c.get("args")) == (command, args)
    # env: only K_MPI_JOB_ROLE=worker is added
    assert c["env"] == [{"name": "K_MPI_JOB_ROLE", "value": names.ROLE_WORKER}]
    assert "e.name == 'K_MPI_JOB_ROLE' && e.?value.orValue('') == 'worker'" in text
    # volumes: only the SSH Secret's, named as the policy names it
    (vol,) = pod["spec"]["volumes"]
    assert vol["name"] == desired.SSH_VOLUME and f"v.name == '{desired.SSH_VOLUME}'" in text
    assert vol["secret"]["secretName"] == job["metadata"]["name"] + "-ssh" == names.secret_name(job)
    assert "params.metadata.name + '-ssh'" in text
    # no container of its own
    assert [x["name"] for x in pod["spec"]["containers"]] == [worker["name"]]
    assert "initContainers" not in pod["spec"]
