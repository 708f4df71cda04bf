"""Each MPIJob's NetworkPolicy: its pods closed to everyone but themselves (docs/architecture.md
section 10), as pure functions.

Every worker runs an sshd that accepts the MPIJob's key, and the ranks talk over plain TCP on ports
their MPI picks at run time. For an MPIJob `pi` in namespace `ns` the operator makes the
NetworkPolicy `pi-mpijob-isolation` (names.network_policy_name; controlled by the MPIJob, with our
labels):

    podSelector: {matchLabels: {training.kubeflow.org/job-name: pi,                    # launcher and
                                training.kubeflow.org/operator-name: mpi-operator}}   # workers
    policyTypes: [Ingress]                                             # egress left as it is
    ingress: [{from: [{podSelector: <the same>},
                      ...the peers of the annotation NETWORK_INGRESS_FROM_ANNOTATION]}]   # all ports

as Volcano's `svc` plugin does for its jobs. The job-name label alone is not enough: the Training
Operator puts it on PyTorchJob and TFJob pods too (with its own operator-name), so a PyTorchJob `pi`
beside MPIJob `pi` would have its ingress cut and be admitted to the MPIJob's sshd. No label of the
pods carries the MPIJob's uid (Job pods carry the worker Job's, StatefulSet pods none); the name is
unique in the namespace, and a predecessor's pods are waited for (reconcilers/ownership.py).

On with `--network-isolation` (the default); the MPIJob's annotation NETWORK_ISOLATION_ANNOTATION
"false" leaves one MPIJob without it (its policy, if any, is deleted). Pods on the host's network
cannot be told apart from the node by any NetworkPolicy implementation, so an MPIJob with
`hostNetwork` in a template gets no policy (one would also cut its workers off from a launcher that
uses the host's address); it runs, with the condition NOT_ISOLATED=False and a Warning Event saying so.

The policy is the operator's own addition, not a child upstream makes: an object that holds its name
never fails or holds the MPIJob (a running one under Kueue would release its quota while its pods
run). The MPIJob runs on without it, with NOT_ISOLATED=False/R_NAME_TAKEN and a Warning Event, and
gets its policy once the name is free.

The policy is created with the Service, ConfigMap and Secret, before any pod, while the MPIJob is
active or suspended, and kept when it finishes (with cleanPodPolicy None its workers still run);
the garbage collector removes it with the MPIJob. Drift repair: our labels, and the spec's
`podSelector`, `policyTypes` and `ingress` brought back exactly (reconcilers/diff.py). The peers of
the annotation are written in the canonical form the API server gives back (no empty maps or
lists), so a steady state writes nothing. Nothing here does I/O.
"""

from __future__ import annotations

import json
from typing import Any

from reconcilers import desired, names
from reconcilers.types import Config, Obj

GROUP = "networking.k8s.io"
API = f"{GROUP}/v1"
KIND = "NetworkPolicy"
# The condition of an MPIJob that could not be isolated (hostNetwork): False, reason R_HOST_NETWORK.
NOT_ISOLATED = "NetworkIsolated"
R_HOST_NETWORK = "HostNetwork"
R_NAME_TAKEN = "PolicyNameTaken"  # the policy's name is held by an object this MPIJob does not control
R_NOT_ISOLATED = "NotIsolated"  # the Warning Event's reason
ANNOTATION_VALUES = ("true", "false")
_PEER_KEYS = ("podSelector", "namespaceSelector", "ipBlock")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _annotations(mpijob: Obj) -> dict:
    ann = (mpijob.get("metadata") or {}).get("annotations")
    return ann if isinstance(ann, dict) else {}


def wanted(mpijob: Obj, config: Config) -> bool:
    """Isolation asked for: the operator's flag on and the MPIJob not opted out."""
    return config.network_isolation and _annotations(mpijob).get(names.NETWORK_ISOLATION_ANNOTATION) != "false"


def applies(mpijob: Obj, config: Config) -> bool:
    """The MPIJob gets its NetworkPolicy: isolation asked for, and its pods on the pod network."""
    return wanted(mpijob, config) and desired.pod_network(mpijob)


# -- the object ---------------------------------------------------------------------------------------


def _selector(sel: Any) -> Obj:
    """A label selector in the form the API server stores it: empty maps and lists left out."""
    out: Obj = {}
    if sel.get("matchLabels"):
        out["matchLabels"] = dict(sel["matchLabels"])
    exprs = [{"key": e["key"], "operator": e["operator"], **({"values": list(e["values"])} if e.get("values")
                                                                else {})}
             for e in sel.get("matchExpressions") or []]
    if exprs:
        out["matchExpressions"] = exprs
    return out


def _peer(peer: Obj) -> Obj:
    out: Obj = {}
    for key in ("podSelector", "namespaceSelector"):
        if key in peer:
            out[key] = _selector(peer[key])
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        out["ipBlock"] = {"cidr": block["cidr"], **({"except": list(block["except"])} if block.get("except") else {})}
    return out


def extra_peers(mpijob: Obj) -> list[Obj]:
    """The peers the MPIJob's annotation admits besides its own pods (validated before: `problems`)."""
    raw = _annotations(mpijob).get(names.NETWORK_INGRESS_FROM_ANNOTATION)
    if not raw:
        return []
    return [_peer(p) for p in json.loads(raw)]


def own_pods(mpijob: Obj) -> Obj:
    """The selector of the MPIJob's own pods: its name and this operator's (upstream's pods carry both)."""
    return {"matchLabels": {names.JOB_NAME_LABEL: names.job_name(mpijob),
                            names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME}}


def network_policy(mpijob: Obj, owner: Obj) -> Obj:
    own = own_pods(mpijob)
    return {
        "apiVersion": API,
        "kind": KIND,
        "metadata": {"name": names.network_policy_name(mpijob), "namespace": names.job_namespace(mpijob),
                     "labels": names.job_labels(mpijob), "ownerReferences": [owner]},
        "spec": {
            "podSelector": own,
            "policyTypes": ["Ingress"],
            # No `ports`: every port, since Open MPI, MPICH and Intel MPI open theirs at run time.
            "ingress": [{"from": [{"podSelector": own}, *extra_peers(mpijob)]}],
        },
    }


def not_isolated_message(key: str) -> str:
    return (f"MPIJob {key} runs without network isolation: its pods use hostNetwork, which no NetworkPolicy can "
            "tell apart from the node, so every pod and host that reaches the node reaches them; remove "
            f"hostNetwork from its templates to isolate it, or annotate it {names.NETWORK_ISOLATION_ANNOTATION}: "
            "\"false\" to run it so on purpose")


def name_taken_message(key: str, mpijob: Obj) -> str:
    name = f"{names.job_namespace(mpijob)}/{names.network_policy_name(mpijob)}"
    return (f"MPIJob {key} runs without network isolation: NetworkPolicy {name} already exists and is not "
            "controlled by this MPIJob, so the operator cannot make the policy that closes its pods to other "
            "pods (the run goes on as it is). Delete or rename that object and the policy is made within "
            f"seconds, or annotate the MPIJob {names.NETWORK_ISOLATION_ANNOTATION}: \"false\" to run it "
            "so on purpose")


# -- validation ---------------------------------------------------------------------------------------


def problems(mpijob: Obj) -> list[tuple[str, str]]:
    """(field path, message) for each annotation of this module the operator cannot act on."""
    ann = _annotations(mpijob)
    out: list[tuple[str, str]] = []
    value = ann.get(names.NETWORK_ISOLATION_ANNOTATION)
    if value is not None and value not in ANNOTATION_VALUES:
        out.append((f"metadata.annotations[{names.NETWORK_ISOLATION_ANNOTATION}]",
                    f"unsupported value {value!r}; use \"true\" or \"false\" (quoted), or remove it"))
    raw = ann.get(names.NETWORK_INGRESS_FROM_ANNOTATION)
    if raw is None:
        return out
    path = f"metadata.annotations[{names.NETWORK_INGRESS_FROM_ANNOTATION}]"
    try:
        peers = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as e:
        return [*out, (path, f"is not JSON ({e}); write a JSON list of NetworkPolicy peers, e.g. "
                             '[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "notebooks"}}}]')]
    if not isinstance(peers, list):
        return [*out, (path, "must be a JSON list of NetworkPolicy peers (podSelector, namespaceSelector, ipBlock)")]
    for i, peer in enumerate(peers):
        out += _peer_problems(peer, f"{path}[{i}]")
    return out


def _peer_problems(peer: Any, path: str) -> list[tuple[str, str]]:
    if not isinstance(peer, dict) or not peer:
        return [(path, "must be an object with podSelector, namespaceSelector (either or both) or ipBlock")]
    unknown = sorted(str(k) for k in peer if k not in _PEER_KEYS)
    if unknown:
        return [(path, f"unknown field(s) {', '.join(unknown)}; a peer has {', '.join(_PEER_KEYS)}")]
    if "ipBlock" in peer and len(peer) > 1:
        return [(path, "ipBlock cannot be combined with podSelector or namespaceSelector; make them two peers")]
    out = []
    for key in ("podSelector", "namespaceSelector"):
        if key in peer:
            out += _selector_problems(peer[key], f"{path}.{key}")
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        if not isinstance(block, dict) or not isinstance(block.get("cidr"), str) or not block["cidr"]:
            out.append((f"{path}.ipBlock", "must be an object with a cidr such as 10.0.0.0/8"))
        elif set(block) - {"cidr", "except"} or not _strings(block.get("except") or []):
            out.append((f"{path}.ipBlock", "has only cidr and except (a list of CIDRs)"))
    return out


def _strings(values: Any) -> bool:
    return isinstance(values, list) and all(isinstance(v, str) for v in values)


def _selector_problems(sel: Any, path: str) -> list[tuple[str, str]]:
    if not isinstance(sel, dict) or set(sel) - {"matchLabels", "matchExpressions"}:
        return [(path, "must be a label selector: an object with matchLabels and/or matchExpressions")]
    labels = sel.get("matchLabels")
    if labels is not None and not (isinstance(labels, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        return [(f"{path}.matchLabels", "must map strings to strings; quote numbers and booleans")]
    exprs = sel.get("matchExpressions")
    if exprs is None:
        return []
    if not isinstance(exprs, list):
        return [(f"{path}.matchExpressions", "must be a list of {key, operator, values}")]
    for j, e in enumerate(exprs):
        if not (isinstance(e, dict) and isinstance(e.get("key"), str) and e.get("operator") in _SELECTOR_OPERATORS
                and set(e) <= {"key", "operator", "values"} and _strings(e.get("values") or [])):
            return [(f"{path}.matchExpressions[{j}]",
                     f"must be {{key, operator, values}} with operator one of {', '.join(_SELECTOR_OPERATORS)}")]
    return []
