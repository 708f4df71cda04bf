"""Label selectors and NetworkPolicy ingress rules evaluated as Kubernetes defines them, for tests
that check who a shipped policy admits without a NetworkPolicy implementation on the node.

- `matches(selector, labels)`: a metav1.LabelSelector (matchLabels and matchExpressions with In,
  NotIn, Exists, DoesNotExist); an empty selector matches everything, an absent one nothing.
- `admits(policy, source, target, port)`: whether the ingress rules of a networking.k8s.io/v1
  NetworkPolicy let a connection from the pod `source` to the pod `target` on the named or numbered
  `port`. Pods are given as {"namespace": {name, labels}, "labels": {...}, "ports": {name: number}}.
  A peer with a namespaceSelector and a podSelector selects the pods matching the second in the
  namespaces matching the first; a podSelector alone, pods of the policy's own namespace; a
  namespaceSelector alone, every pod of the namespaces it selects. ipBlock peers are not modelled
  (a test that needs them must say so: `admits` raises).
"""

from __future__ import annotations

from typing import Any


def matches(selector: dict | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op!r}")
    return True


def _peer_selects(peer: dict, policy_ns: str, source: dict[str, Any]) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError("ipBlock peers are not modelled")
    ns, pod_labels = source["namespace"], source.get("labels") or {}
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    # no namespaceSelector: the policy's own namespace
    in_ns = ns["name"] == policy_ns if ns_sel is None else matches(ns_sel, ns.get("labels") or {})
    return in_ns and (pod_sel is None or matches(pod_sel, pod_labels))


def _port_allowed(ports: list[dict] | None, target: dict[str, Any], port: str | int) -> bool:
    if not ports:
        return True  # no ports: every port
    number = target.get("ports", {}).get(port, port) if isinstance(port, str) else port
    for p in ports:
        want = p.get("port")
        if (p.get("protocol") or "TCP") != "TCP":
            continue
        if want is None or want in (port, number) or target.get("ports", {}).get(want) == number:
            return True
    return False


def admits(policy: dict, source: dict[str, Any], target: dict[str, Any], port: str | int) -> bool:
    """Whether `policy` lets `source` reach `target` on `port` (TCP). A pod the policy does not
    select, or a policy without Ingress in its policyTypes, leaves ingress to other policies: that
    is reported as admitted here."""
    meta, spec = policy["metadata"], policy["spec"]
    if target["namespace"]["name"] != meta["namespace"] or not matches(spec.get("podSelector"),
                                                                          target.get("labels") or {}):
        return True
    if "Ingress" not in (spec.get("policyTypes") or ["Ingress"]):
        return True
    for rule in spec.get("ingress") or []:
        peers = rule.get("from")
        selected = not peers or any(_peer_selects(p, meta["namespace"], source) for p in peers)
        if selected and _port_allowed(rule.get("ports"), target, port):
            return True
    return False
