"""The rules of the Kubeflow MPI Operator v0.8.2's ClusterRole `mpi-operator`, as /work/shared/UPSTREAM.md
lists them: what a user who upgrades by swapping only the image keeps (docs/operations.md, "Missing
RBAC"). Used by tests/unit/test_upstream_rbac.py and e2e/test_upstream_rbac.py."""

from __future__ import annotations

import json

UPSTREAM_RULES: list[dict] = [
    {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"],
     "verbs": ["create", "list", "watch", "update"]},
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["create", "get", "list", "watch", "delete", "update", "patch"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["create", "get", "update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "list", "update", "watch"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create", "get"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs", "mpijobs/finalizers", "mpijobs/status"], "verbs": ["*"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]},
    {"apiGroups": ["scheduling.incubator.k8s.io", "scheduling.sigs.dev", "scheduling.volcano.sh"],
     "resources": ["queues", "podgroups"], "verbs": ["*"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["*"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]},
]


def grants(rules: list[dict], triples: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Those of `triples` (group, resource, verb) that `rules` allow, as RBAC matches them ("*" any verb)."""
    return {(g, r, v) for (g, r, v) in triples
            if any(g in rule["apiGroups"] and r in rule["resources"] and (v in rule["verbs"] or "*" in rule["verbs"])
                   for rule in rules)}


def bind(kubectl, name: str, rules: list[dict], namespace: str, service_account: str) -> None:
    """A ClusterRole `name` of `rules` bound to ServiceAccount `namespace`/`service_account`: remove it
    with unbind() (cluster-wide objects outlive the test's namespace)."""
    objs = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
             "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]}]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def unbind(kubectl, name: str) -> None:
    kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found", check=False)
