"""`kubectl get mpijobs` shows the state that holds, whatever the order another controller wrote the
conditions in (docs/architecture.md section 6.5): the CRD's State column with the condition-order
MutatingAdmissionPolicy of manifests/admission/, against the real API server. The statuses are
written through the status subresource as the upstream operator orders them."""

from __future__ import annotations

import json

import pytest

from tests.crd_fuzz import base_mpijob
from testsupport.kubectl import wait_established
from testsupport.paths import ROOT

pytestmark = pytest.mark.cluster

T, F = "True", "False"
CASES = {
    # upstream appends Running=False after Succeeded (a job that finished before it was seen Running)
    "succeeded-running-false-last": ([("Created", T), ("Succeeded", T), ("Running", F)], "Succeeded"),
    "succeeded": ([("Created", T), ("Running", F), ("Succeeded", T)], "Succeeded"),
    "failed-first": ([("Failed", T), ("Created", T), ("Running", F)], "Failed"),
    "running": ([("Created", T), ("Running", T)], "Running"),
    "suspended-running-false-last": ([("Created", T), ("Suspended", T), ("Running", F)], "Suspended"),
    "resumed-and-running": ([("Created", T), ("Suspended", F), ("Running", T)], "Running"),
    "resumed-not-running-yet": ([("Created", T), ("Running", F), ("Suspended", F)], "Created"),
    "created": ([("Created", T)], "Created"),
    # issue 51: an MPIJob held reads Waiting (its reason beside it); one restarting still reads Restarting
    "explain-waiting": ([("Waiting", T), ("Created", T)], "Waiting"),
    "explain-restarting-outranks-waiting": ([("Created", T), ("Restarting", T), ("Waiting", T)], "Restarting"),
}


@pytest.fixture(scope="module")
def crd_and_policy(kubectl) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f",
            str(ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"))
    wait_established(kubectl, "mpijobs.kubeflow.org")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "manifests" / "admission"))


def state(kubectl, ns: str, name: str) -> str:
    return kubectl("-n", ns, "get", "mpijob", name, "--no-headers").stdout.split()[1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_column_is_the_condition_that_holds(kubectl, crd_and_policy, namespace, case):
    conditions, want = CASES[case]
    job = base_mpijob("j")
    # managed by nobody: no operator on the shared cluster may rewrite the status under the test
    job["spec"]["runPolicy"]["managedBy"] = "example.com/nobody"
    kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(job))
    status = {"conditions": [{"type": t, "status": s, "reason": f"R{t}", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"} for t, s in conditions]}
    kubectl("-n", namespace, "patch", "mpijob", "j", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))
    assert state(kubectl, namespace, "j") == want
    stored = json.loads(kubectl("-n", namespace, "get", "mpijob", "j", "-o", "json").stdout)["status"]["conditions"]
    assert sorted((c["type"], c["status"]) for c in stored) == sorted(conditions), "no condition lost or changed"
