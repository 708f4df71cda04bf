"""Issue 42 item 3, on the local cluster: the operator under a ServiceAccount bound to upstream v0.8.2's
ClusterRole rules (testsupport/upstream_rbac.py), as a user who swaps only the image keeps them.

It starts (no informer waits on a refused list), says at start what it lacks and what it does about
it, and an MPIJob submitted then is told why it cannot run: Blocked/RBACMissing and a Warning Event
naming each missing verb and the manifest. Granted what running one needs (but still no
NetworkPolicies, pods/log or StatefulSets) and restarted, the same MPIJob runs to Succeeded with its
workers stopped, and says that network isolation is off and why."""

from __future__ import annotations

import pytest

from client import permissions as perm
from testsupport.builders import simulated_mpijob
from testsupport.kubectl import (
    apply,
    conditions,
    get,
    live,
    pods,
    token_kubeconfig,
    wait_condition,
    wait_event,
    wait_finished,
)
from testsupport.upstream_rbac import UPSTREAM_RULES, bind, unbind
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

HELD = {("batch", "jobs", "get"), ("batch", "jobs", "patch"), ("batch", "jobs", "delete"),
        ("", "services", "get"), ("", "services", "patch"), ("", "configmaps", "get"), ("", "configmaps", "patch"),
        ("", "secrets", "get"), ("", "secrets", "patch"), ("", "secrets", "delete")}


def test_upstream_rbac_the_operator_says_what_it_lacks_and_each_mpijob_why(kubectl, start_operator, namespace,
                                                                             tmp_path):
    roles = [f"e2e-upstream-{namespace}", f"e2e-upstream-{namespace}-granted"]
    kubectl("-n", namespace, "create", "serviceaccount", "upstream-op")
    try:
        bind(kubectl, roles[0], UPSTREAM_RULES, namespace, "upstream-op")
        kubeconfig = token_kubeconfig(kubectl, namespace, "upstream-op", tmp_path / "upstream.kubeconfig")
        # Its caches sync (wait_ready: /readyz) although NetworkPolicies and StatefulSets may not be listed.
        op = start_operator("job", namespace, kubeconfig=kubeconfig, name="upstream")
        log = op.tail(400)
        assert "feature network-isolation off" in log and "feature launcher-log off" in log, log
        assert "no MPIJob starts" in log and perm.MANIFEST in log, log
        for t in HELD | {("networking.k8s.io", "networkpolicies", "list"), ("", "pods/log", "get")}:
            assert perm.spell(t) in log, perm.spell(t)
        code, body = op.get("/healthz")
        assert code == 200 and "network-isolation off" in body and "MPIJobs held" in body, body
        assert op.metric("mpi_operator_rbac_missing", verb="patch", resource="configmaps", effect="held") == 1

        apply(kubectl, namespace, simulated_mpijob("pi", launcher_runs="3s"))
        blocked = wait_condition(kubectl, namespace, "pi", "Blocked", timeout=60)
        assert blocked["reason"] == "RBACMissing", blocked
        for t in HELD:
            assert perm.spell(t) in blocked["message"], blocked["message"]
        assert perm.MANIFEST in blocked["message"]
        warned = wait_event(kubectl, namespace, "pi", "RBACMissing", "Warning", timeout=30)  # sent after the status
        assert "patch configmaps" in warned["message"], warned
        # held before any child: nothing half made that a 403 then stops
        for kind, name in (("service", "pi"), ("configmap", "pi-config"), ("secret", "pi-ssh"), ("job", "pi-launcher"),
                           ("job", "pi-worker")):
            assert get(kubectl, namespace, kind, name) is None, (kind, name)
        op.stop()

        # What running needs granted (a user who applied it), the rest still missing; the operator restarted.
        bind(kubectl, roles[1], [{"apiGroups": [g], "resources": [r], "verbs": [v]} for g, r, v in HELD],
             namespace, "upstream-op")
        op = start_operator("job", namespace, kubeconfig=kubeconfig, name="granted")
        assert "no MPIJob starts" not in op.tail(400)
        assert wait_finished(kubectl, namespace, "pi", timeout=120) == "Succeeded", conditions(kubectl, namespace, "pi")
        wait_until(lambda: not live(pods(kubectl, namespace, "pi", "worker")), 60, what="workers stopped")
        conds = conditions(kubectl, namespace, "pi")
        assert "Blocked" not in conds, conds
        off = conds["PermissionsMissing"]
        assert off["status"] == "True" and "network isolation is off" in off["message"], off
        assert "list networkpolicies.networking.k8s.io" in off["message"] and perm.MANIFEST in off["message"]
        assert get(kubectl, namespace, "networkpolicy", "pi") is None
    finally:
        for role in roles:
            unbind(kubectl, role)
