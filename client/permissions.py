"""What the operator may ask of the API server, as RBAC names it: (API group, resource, verb), the
resource with its subresource (`mpijobs/status`). One static map, which manifests/rbac/ is written
from, and a fence that holds the code to it (docs/architecture.md section 5.1):

- tests/unit/test_least_privilege.py checks the manifests against this map in both directions
  (every grant here is in the ClusterRole, the namespaced Role and the gang-scheduling roles, and
  nothing more), and that the planner, the executor, the informers, leader election and the log
  reader send every grant of it (none is dead);
- the operator's RestClient carries a `Fence` of it (controller/__main__.py): a request outside it
  raises `Unpermitted` before it is sent, so no code path can use a verb the manifests do not
  grant; the unit tests' FakeApi holds every request it sees to the same map.

A new child kind or verb: add it here, then to manifests/rbac/cluster_role.yaml and
manifests/rbac-namespaced/role.yaml (the test names what is missing where). Each grant says which
code sends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Grants = Mapping[tuple[str, str], frozenset[str]]  # (group, resource[/subresource]) -> verbs

# A child the plan creates and keeps: list/watch (its informer), create, patch (drift repair,
# suspend, scale), get (a create that meets AlreadyExists reads whose the object is, and a name taken
# by a foreign object is looked at again: controller/executor.py `_create_or_find`, `exists`).
_CHILD = frozenset({"get", "list", "watch", "create", "patch"})

# The MPIJobs and their children, in every namespace the operator watches: the ClusterRole
# (manifests/rbac/cluster_role.yaml), or with --namespace the Role of manifests/rbac-namespaced/.
OPERATOR: Grants = {
    # informers (list, watch); delete when ttlSecondsAfterFinished runs out (Plan.delete_mpijob). Never
    # a GET: reconciles read the cache.
    ("kubeflow.org", "mpijobs"): frozenset({"list", "watch", "delete"}),
    # conditions, replicaStatuses and times: a merge patch of the status subresource (executor._status)
    ("kubeflow.org", "mpijobs/status"): frozenset({"patch"}),
    # launcher Job and worker Job: deleted to be recreated (a resume, a worker index that ended)
    ("batch", "jobs"): _CHILD | {"delete"},
    # worker StatefulSet: deleted when it is a stray beside the worker Job of a job-backend MPIJob
    ("apps", "statefulsets"): _CHILD | {"delete"},
    # the headless Service and the hostfile ConfigMap: never deleted (the garbage collector does)
    ("", "services"): _CHILD,
    ("", "configmaps"): _CHILD,
    # the SSH Secret: deleted (and created afresh) when someone removed a key from it
    ("", "secrets"): _CHILD | {"delete"},
    # each MPIJob's NetworkPolicy (--network-isolation, on by default; reconcilers/netpol.py): deleted
    # when the MPIJob's annotation turns isolation off or a template takes hostNetwork
    ("networking.k8s.io", "networkpolicies"): _CHILD | {"delete"},
    # pods are the Job/StatefulSet controllers': watched (readiness, discover_hosts.sh), deleted under
    # cleanPodPolicy All and for the upstream operator's bare workers (reconcilers/takeover.py),
    # patched with one annotation on an elastic launcher's pod (reconcilers/elastic.py); created only
    # as a taken-over MPIJob's lost bare worker, as upstream makes it (reconcilers/takeover.py; the
    # admission policy of manifests/rbac/bare_worker_policy.yaml refuses any other pod), and read (get)
    # when that create meets AlreadyExists, as for every child
    ("", "pods"): frozenset({"list", "watch", "patch", "delete", "create", "get"}),
    # the end of a launcher pod's log, for the verdict on an Open MPI exit 0 (controller/evidence.py)
    ("", "pods/log"): frozenset({"get"}),
    # core/v1 Events on MPIJobs, each a new one (executor.event): never patched, never events.k8s.io
    ("", "events"): frozenset({"create"}),
    # Kueue's Workloads, read only: the informer (list, watch; never a GET, reconciles read the cache)
    # when the cluster serves Kueue, for why Kueue keeps an MPIJob suspended (reconcilers/explain/kueue.py)
    ("kueue.x-k8s.io", "workloads"): frozenset({"list", "watch"}),
}

# Granted without being sent: every child's controller ownerReference carries blockOwnerDeletion:
# true (reconcilers/desired.py owner_reference), which the OwnerReferencesPermissionEnforcement
# admission plugin allows only to whoever may update the owner's finalizers.
IMPLIED: Grants = {
    ("kubeflow.org", "mpijobs/finalizers"): frozenset({"update"}),
}

# --leader-elect: the Lease in --leader-election-namespace only (manifests/rbac/leader_election_role.yaml):
# read it, create it once, renew or take it over by update (controller/leader.py).
LEADER_ELECTION: Grants = {
    ("coordination.k8s.io", "leases"): frozenset({"get", "create", "update"}),
}

# --gang-scheduling: the PodGroup (or Workload) of each MPIJob, a child like the others, also deleted
# (suspend, finish); manifests/gang-scheduling/<mode>/cluster_role.yaml.
_GANG_CHILD = _CHILD | {"delete"}
GANG: Mapping[str, Grants] = {
    "scheduler-plugins": {("scheduling.x-k8s.io", "podgroups"): _GANG_CHILD},
    "volcano": {("scheduling.volcano.sh", "podgroups"): _GANG_CHILD},
    "workload": {("scheduling.k8s.io", "workloads"): _GANG_CHILD, ("scheduling.k8s.io", "podgroups"): _GANG_CHILD},
}


def gang_mode(gang_scheduling: str) -> str | None:
    """The GANG key of a --gang-scheduling value: "" -> None, "volcano", "workload", any other
    scheduler name -> "scheduler-plugins" (reconcilers/gang/podgroup.py, reconcilers/gang/workload_gang.py)."""
    if not gang_scheduling:
        return None
    return gang_scheduling if gang_scheduling in ("volcano", "workload") else "scheduler-plugins"


def expand(grants: Grants) -> set[tuple[str, str, str]]:
    return {(g, r, v) for (g, r), verbs in grants.items() for v in verbs}


@dataclass(frozen=True)
class Attributes:
    """A request as the API server's authorizer sees it (k8s.io/apiserver RequestInfo)."""

    group: str
    resource: str  # with "/subresource"
    verb: str
    namespace: str | None  # None: cluster-wide (a list or watch across namespaces)


def _watching(query: Mapping | None) -> bool:
    w = (query or {}).get("watch")
    return w is True or str(w).lower() in ("true", "1")


def attributes(method: str, path: str, query: Mapping | None = None) -> Attributes | None:
    """The RBAC attributes of a request, or None for a non-resource path (discovery, /metrics).
    /api/v1/namespaces/ns/pods/x/log -> ("", "pods/log", "get", "ns"); a GET of a collection is a
    list, or a watch with ?watch=true; a DELETE of one, deletecollection."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # discovery of a group version
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    method = method.upper()
    if method == "GET":
        verb = "get" if named else ("watch" if _watching(query) else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return Attributes(group, resource, verb, namespace)


def self_review(method: str, path: str) -> bool:
    """A SelfSubjectAccessReview: what may I do? Any authenticated user may ask (the system:basic-user
    ClusterRole), so no manifest grants it; the operator asks once per grant at start-up
    (controller/access.py)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    return method.upper() == "POST" and parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]


def discovery(method: str, path: str) -> bool:
    """A GET of the API's discovery documents (/api, /apis, /apis/<group>[/<version>]), which every
    authenticated user may read (the system:discovery ClusterRole), or of /version, which anyone may
    (system:public-info-viewer; read once at start-up, controller/__main__.py)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    return method.upper() == "GET" and ((parts[:1] == ["api"] and len(parts) <= 2)
                                        or (parts[:1] == ["apis"] and len(parts) <= 3)
                                        or parts == ["version"])


class Unpermitted(Exception):
    """A request outside the operator's grants: a bug (the manifests would refuse it with 403 anyway);
    never sent, never retried."""


@dataclass(frozen=True)
class Scope:
    grants: Grants
    namespace: str | None = None  # None: every namespace, and across namespaces


@dataclass(frozen=True)
class Fence:
    scopes: tuple[Scope, ...]

    def allows(self, method: str, path: str, query: Mapping | None = None) -> bool:
        attrs = attributes(method, path, query)
        if attrs is None:
            return discovery(method, path)
        if self_review(method, path):
            return True
        for scope in self.scopes:
            verbs = scope.grants.get((attrs.group, attrs.resource), frozenset())
            if attrs.verb in verbs and (scope.namespace is None or attrs.namespace == scope.namespace):
                return True
        return False

    def check(self, method: str, path: str, query: Mapping | None = None) -> None:
        if not self.allows(method, path, query):
            attrs = attributes(method, path, query)
            what = (f"{attrs.verb} {attrs.resource}" + (f".{attrs.group}" if attrs.group else "")
                    + (f" in {attrs.namespace}" if attrs.namespace else " across namespaces")) if attrs \
                else f"{method} {path}"
            raise Unpermitted(f"{what}: not in the operator's grants (client/permissions.py, manifests/rbac/)")


def operator_fence(namespace: str = "", gang_scheduling: str = "", lease_namespace: str | None = None) -> Fence:
    """What the operator process may send: OPERATOR (+ the gang mode's grants) in `namespace` (""
    means every namespace), and leader election's Lease in `lease_namespace` (None: no --leader-elect)."""
    grants = dict(OPERATOR)
    mode = gang_mode(gang_scheduling)
    if mode:
        grants.update(GANG[mode])
    scopes = [Scope(grants, namespace or None)]
    if lease_namespace is not None:
        scopes.append(Scope(LEADER_ELECTION, lease_namespace))
    return Fence(tuple(scopes))


def everything() -> Fence:
    """Every grant of every mode, in any namespace: what any code path of the operator may send."""
    grants = dict(OPERATOR) | dict(LEADER_ELECTION)
    for g in GANG.values():
        grants |= dict(g)
    return Fence((Scope(grants),))


# -- what runs without which grant (docs/operations.md, "Missing RBAC") ---------------------------------------------

Triple = tuple[str, str, str]  # (group, resource[/subresource], verb)
MANIFEST = "manifests/rbac/cluster_role.yaml (kubectl apply -k manifests/rbac/)"
MANIFEST_NAMESPACED = "manifests/rbac-namespaced/role.yaml (kubectl apply -k manifests/rbac-namespaced/)"
LEASE_MANIFEST = "manifests/rbac/leader_election_role.yaml (kubectl apply -k manifests/rbac/)"

# Without these the operator cannot even tell an MPIJob why it does nothing: it refuses to start.
ESSENTIAL: Grants = {
    ("kubeflow.org", "mpijobs"): frozenset({"list", "watch"}),
    ("kubeflow.org", "mpijobs/status"): frozenset({"patch"}),
    ("", "events"): frozenset({"create"}),
}


@dataclass(frozen=True)
class Feature:
    """A part of the operator that turns off, alone, when one of its grants is missing."""

    name: str
    grants: Grants
    without: str  # what the operator does without it, as users read it


# The features a missing grant turns off; every other grant of OPERATOR (and the gang mode's) is needed
# to run an MPIJob at all: without one, each MPIJob is held, Blocked, and says which (reconcilers/access.py).
NETWORK_ISOLATION = Feature(
    "network-isolation", {("networking.k8s.io", "networkpolicies"): _CHILD | {"delete"}},
    "network isolation is off: MPIJobs run without their NetworkPolicy (as with --network-isolation=false)")
LAUNCHER_LOG = Feature(
    "launcher-log", {("", "pods/log"): frozenset({"get"})},
    "the launcher's log is not read: an Open MPI launcher that exits 0 after losing a worker is judged "
    "without it, as cut short (Failed/WorkerLost)")
ELASTIC_REFRESH = Feature(
    "elastic-refresh", {("", "pods"): frozenset({"patch"})},
    "elastic launchers are not stamped: their discover_hosts.sh follows the workers at the kubelet's "
    "own pace (60-90 s) instead of within seconds")
STATEFULSET_WORKERS = Feature(
    "statefulset-workers", {("apps", "statefulsets"): _CHILD | {"delete"}},
    "StatefulSets are not watched: an MPIJob that began with --worker-backend=statefulset is not seen "
    "as such, and a stray worker StatefulSet beside a worker Job is not removed")
TAKEOVER_WORKERS = Feature(
    "takeover-workers", {("", "pods"): frozenset({"create", "get"})},
    "a lost bare worker of an MPIJob the upstream operator started is not created again: the launcher's "
    "retries fail without it")
ATTEMPT_RECORD = Feature(
    "attempt-record", {("", "pods"): frozenset({"patch"})},
    "launcher pods are not held until their end is recorded: a launcher drained or evicted while the "
    "operator is away can leave before it is judged (docs/architecture.md section 11)")
KUEUE_REASONS = Feature(
    "kueue-reasons", {("kueue.x-k8s.io", "workloads"): frozenset({"list", "watch"})},
    "Kueue's Workloads are not watched: an MPIJob Kueue keeps suspended reads only Suspended, not why "
    "(the ClusterQueue's quota short, an admission check pending)")
FEATURES: tuple[Feature, ...] = (NETWORK_ISOLATION, LAUNCHER_LOG, ELASTIC_REFRESH, STATEFULSET_WORKERS,
                                 TAKEOVER_WORKERS, ATTEMPT_RECORD, KUEUE_REASONS)


def spell(t: Triple) -> str:
    """("", "pods/log", "get") -> "get pods/log"; ("batch", "jobs", "patch") -> "patch jobs.batch"."""
    group, resource, verb = t
    return f"{verb} {resource}" + (f".{group}" if group else "")


def spell_all(triples: set[Triple] | frozenset[Triple]) -> str:
    return ", ".join(spell(t) for t in sorted(triples, key=lambda t: (t[1], t[0], t[2])))


@dataclass(frozen=True)
class Assessment:
    """What the operator does with the grants it was found to lack (controller/access.py asks)."""

    refuse: frozenset[Triple] = frozenset()  # ESSENTIAL (or the Lease) missing: it does not start
    blocked: frozenset[Triple] = frozenset()  # needed to run any MPIJob: each is held, Blocked
    off: tuple[tuple[Feature, frozenset[Triple]], ...] = ()  # features turned off, with what they lack

    @property
    def missing(self) -> frozenset[Triple]:
        return self.refuse | self.blocked | frozenset(t for _, ts in self.off for t in ts)

    def feature_off(self, name: str) -> bool:
        return any(f.name == name for f, _ in self.off)


def needed(backend: str, gang_scheduling: str, network_isolation: bool,
           lease: bool = False) -> set[Triple]:
    """Every grant this configuration may send: what the operator asks about at start-up."""
    grants = dict(OPERATOR)
    mode = gang_mode(gang_scheduling)
    if mode:
        grants.update(GANG[mode])
    if not network_isolation:
        grants.pop(("networking.k8s.io", "networkpolicies"))
    out = expand(grants)
    if lease:
        out |= expand(LEADER_ELECTION)
    return out


def assess(missing: set[Triple], backend: str) -> Assessment:
    """Sorts missing grants: essential ones (or leader election's) refuse the start; a feature's turn that
    feature off (StatefulSets only with the Job backend: with --worker-backend=statefulset they run the
    workers); every other one holds each MPIJob."""
    essential = expand(ESSENTIAL) | expand(LEADER_ELECTION)
    refuse = frozenset(t for t in missing if t in essential)
    rest = set(missing) - refuse
    off = []
    for f in FEATURES:
        if f is STATEFULSET_WORKERS and backend == "statefulset":
            continue
        lacks = frozenset(rest & expand(f.grants))
        if lacks:
            off.append((f, lacks))
            rest -= lacks
    return Assessment(refuse, frozenset(rest), tuple(off))
