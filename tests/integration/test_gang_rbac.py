"""manifests/gang-scheduling/: the operator's extra RBAC for each PodGroup group, against the real
authorizer of the local cluster (the helpers of test_manifests.py).

Each directory holds exactly the verbs the operator uses on the PodGroups of its group (and, for the
Workload API, its Workloads) and nothing for the other groups. The ClusterRole is bound here with a
RoleBinding in the test's namespace only: a ClusterRoleBinding would change the ServiceAccount's
cluster-wide rules that test_manifests.py checks, maybe at the same time, on the same cluster.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.integration.test_manifests import MANIFESTS, NS, SA, can_i, render, rules_of
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

GROUPS = {"scheduler-plugins": "scheduling.x-k8s.io", "volcano": "scheduling.volcano.sh",
          "workload": "scheduling.k8s.io"}
# The Workload API's flavor (--gang-scheduling=workload) has its Workloads besides the PodGroups.
RESOURCES = {"scheduler-plugins": ["podgroups"], "volcano": ["podgroups"], "workload": ["workloads", "podgroups"]}
VERBS = {"get", "list", "watch", "create", "patch", "delete"}


@pytest.mark.parametrize("flavor", sorted(GROUPS))
def test_renders_one_cluster_role_for_its_group(kubectl, flavor):
    docs = render(kubectl, MANIFESTS / "gang-scheduling" / flavor)
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding"]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [GROUPS[flavor]], "resources": RESOURCES[flavor],
                              "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": NS}]
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mpijob-operator" for d in docs)
    kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS / "gang-scheduling" / flavor))


@pytest.mark.parametrize("flavor", sorted(GROUPS))
def test_grants_exactly_the_podgroup_verbs(kubectl, namespace, flavor):
    docs = render(kubectl, MANIFESTS / "gang-scheduling" / flavor)
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    kubectl("apply", "-f", "-", input=json.dumps(role))
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": f"gang-{uuid.uuid4().hex[:6]}", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": role["metadata"]["name"]},
               "subjects": [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": NS}]}
    kubectl("apply", "-f", "-", input=json.dumps(binding))
    group = GROUPS[flavor]
    wait_until(lambda: can_i(kubectl, "create", f"podgroups.{group}", namespace), 30,
               what="the PodGroup RoleBinding to take effect")

    nobody = f"system:serviceaccount:{NS}:nobody-{uuid.uuid4().hex[:6]}"
    extra = rules_of(kubectl, SA, namespace) - rules_of(kubectl, nobody, namespace)
    # (the gang APIs' groups only: Kueue's Workloads, read for issue 51's reasons, are another API)
    gained = {(g, r, v) for g, r, v in extra if g in GROUPS.values() and ("podgroup" in r or "workload" in r)}
    assert gained == {(group, r, v) for r in RESOURCES[flavor] for v in VERBS}, sorted(gained)
    for resource in RESOURCES[flavor]:
        for verb in ("update", "deletecollection"):
            assert not can_i(kubectl, verb, f"{resource}.{group}", namespace)
        assert not can_i(kubectl, "patch", f"{resource}.{group}/status", namespace)
        assert not can_i(kubectl, "list", f"{resource}.{group}", "")
    for other in set(GROUPS.values()) - {group}:
        assert not can_i(kubectl, "create", f"podgroups.{other}", namespace)
