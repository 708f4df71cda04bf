"""manifests/ and examples/ against the real API server of the local cluster.

- Every kustomization renders (`kubectl kustomize`), and the API server accepts what it renders
  (server-side dry-run, so admission and schema validation run, nothing is persisted).
- The RBAC objects are applied for real (namespace `mpi-operator` is left in place; applying again
  is a no-op), then the operator's ServiceAccount is checked against the real authorizer: every verb
  the operator uses is allowed, a sample of others is denied, and the complete set of its rules
  (a SelfSubjectRulesReview as the ServiceAccount, minus what any ServiceAccount gets) is exactly
  the expected one, so the test fails if the ClusterRole or the Role loses or gains a verb.
- The examples are accepted by the MPIJob CRD (installed from manifests/crd/) without a field pruned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from client import permissions
from testsupport import selectors
from testsupport.kubectl import wait_established
from testsupport.paths import ROOT
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

MANIFESTS = ROOT / "manifests"
CRD = MANIFESTS / "crd" / "kubeflow.org_mpijobs.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
NS = "mpi-operator"
SA = f"system:serviceaccount:{NS}:mpi-operator"

# What the operator sends, resource by resource: the map of client/permissions.py (what the code
# sends, and the finalizers update its creates imply), which manifests/rbac/cluster_role.yaml is
# written from (tests/unit/test_least_privilege.py checks the file; this, the API server's answers).
CLUSTER_VERBS: dict[tuple[str, str], set[str]] = {
    k: set(v) for k, v in (dict(permissions.OPERATOR) | dict(permissions.IMPLIED)).items()}
# Leader election, in the operator's namespace only (manifests/rbac/leader_election_role.yaml).
LEASE_VERBS = set(permissions.LEADER_ELECTION[("coordination.k8s.io", "leases")])

# (verb, "resource[.group][/subresource]", namespace: None for "the test's namespace", "" for cluster-wide)
DENIED = [
    ("update", "secrets", None),
    ("update", "configmaps", None),
    ("create", "pods/exec", None),
    ("update", "jobs.batch", None),
    ("update", "statefulsets.apps", None),
    ("update", "networkpolicies.networking.k8s.io", None),
    ("deletecollection", "networkpolicies.networking.k8s.io", None),
    ("create", "deployments.apps", None),
    ("create", "mpijobs.kubeflow.org", None),
    ("update", "mpijobs.kubeflow.org", None),
    ("patch", "mpijobs.kubeflow.org", None),
    ("deletecollection", "mpijobs.kubeflow.org", None),
    ("get", "mpijobs.kubeflow.org/status", None),
    ("delete", "events", None),
    # granted before issue 36 item 9, never sent
    ("get", "mpijobs.kubeflow.org", None),
    ("update", "mpijobs.kubeflow.org/status", None),
    ("patch", "events", None),
    ("create", "events.events.k8s.io", None),
    ("delete", "configmaps", None),
    ("delete", "services", None),
    ("list", "nodes", ""),
    ("list", "namespaces", ""),
    ("create", "clusterroles.rbac.authorization.k8s.io", ""),
    ("create", "rolebindings.rbac.authorization.k8s.io", None),
    ("create", "leases.coordination.k8s.io", None),  # leases outside the operator's namespace
    ("get", "leases.coordination.k8s.io", None),
    ("update", "leases.coordination.k8s.io", None),
    ("delete", "leases.coordination.k8s.io", NS),
    ("list", "leases.coordination.k8s.io", NS),
]


def split(resource: str) -> tuple[str, str, str]:
    """"jobs.batch/status" -> ("batch", "jobs", "status"); "pods" -> ("", "pods", "")."""
    res, _, sub = resource.partition("/")
    name, _, group = res.partition(".")
    return group, name, sub


def can_i(kubectl, verb: str, resource: str, namespace: str) -> bool:
    """Asks the real authorizer, as the operator's ServiceAccount (impersonated, so with its real groups),
    through a SelfSubjectAccessReview: exact group/resource/subresource, no client-side discovery, so
    it answers for mpijobs whether or not the CRD is installed. namespace "" means cluster-wide."""
    group, res, sub = split(resource)
    attrs = {"verb": verb, "group": group, "resource": res, "subresource": sub, "namespace": namespace}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attrs}}
    r = kubectl("create", "--validate=false", f"--as={SA}", "-o", "json", "-f", "-",
                input=json.dumps(review))
    status = json.loads(r.stdout)["status"]
    assert not status.get("evaluationError"), status
    return bool(status.get("allowed"))


def rules_of(kubectl, user: str, namespace: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) allowed to `user` in `namespace`, by a SelfSubjectRulesReview made as them."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": namespace}}
    r = kubectl("create", "--validate=false", f"--as={user}", "-o", "json", "-f", "-",
                input=json.dumps(review))
    status = json.loads(r.stdout)["status"]
    assert not status.get("incomplete"), status.get("evaluationError")
    out = set()
    for rule in status.get("resourceRules", []):
        assert not rule.get("resourceNames"), f"unexpected resourceNames rule: {rule}"
        for g in rule.get("apiGroups", []):
            for res in rule.get("resources", []):
                for v in rule["verbs"]:
                    out.add((g, res, v))
    return out


def expand(verbs: dict[tuple[str, str], set[str]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for (g, r), vs in verbs.items() for v in vs}


def render(kubectl, path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(kubectl("kustomize", str(path)).stdout) if d]


@pytest.fixture(scope="module")
def rbac(kubectl) -> Iterator[None]:
    """manifests/rbac/ applied for real (idempotent), and visible to the authorizer."""
    kubectl("apply", "-k", str(MANIFESTS / "rbac"))
    wait_until(lambda: can_i(kubectl, "update", "leases.coordination.k8s.io", NS)
               and can_i(kubectl, "list", "pods", "default"),
               timeout=30, what="the operator's RBAC to take effect")
    yield


@pytest.fixture(scope="module")
def crd_installed(kubectl) -> str:
    """The MPIJob CRD from manifests/crd/, applied for real and Established."""
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=mpijob-operator-tests",
            "-f", str(CRD))
    wait_established(kubectl, "mpijobs.kubeflow.org")
    return "mpijobs.kubeflow.org"


# -- rendering ------------------------------------------------------------------------------------


def test_install_manifest_holds_what_kustomize_renders(kubectl):
    """deploy/mpijob-operator.yaml (hack/gen_install.py renders manifests/ itself, with no kubectl)
    holds exactly the objects `kubectl kustomize manifests/` renders, field for field."""
    def key(d: dict) -> tuple[str, str, str]:
        return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]

    def words(x):
        """Strings by their words: kustomize re-emits a literal block whose lines are indented more
        than its first with a blank line added (the admission policies' CEL, where whitespace means
        nothing); nothing else differs."""
        if isinstance(x, dict):
            return {k: words(v) for k, v in x.items()}
        if isinstance(x, list):
            return [words(v) for v in x]
        return " ".join(x.split()) if isinstance(x, str) else x

    want = {key(d): d for d in render(kubectl, MANIFESTS)}
    got = {key(d): d for d in yaml.safe_load_all((ROOT / "deploy" / "mpijob-operator.yaml").read_text()) if d}
    assert got.keys() == want.keys()
    for k, d in want.items():
        assert words(got[k]) == words(d), k


def test_kustomizations_render_the_expected_objects(kubectl):
    got = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
           for d in render(kubectl, MANIFESTS / "rbac") + render(kubectl, MANIFESTS / "operator")}
    assert got == {
        ("Namespace", "", NS),
        ("ServiceAccount", NS, "mpi-operator"),
        ("ClusterRole", "", "mpi-operator"),
        ("ClusterRoleBinding", "", "mpi-operator"),
        ("Role", NS, "mpi-operator-leader-election"),
        ("RoleBinding", NS, "mpi-operator-leader-election"),
        ("ClusterRole", "", "kubeflow-mpijobs-edit"),
        ("ClusterRole", "", "kubeflow-mpijobs-view"),
        ("ValidatingAdmissionPolicy", "", "mpi-operator-pod-writes"),
        ("ValidatingAdmissionPolicyBinding", "", "mpi-operator-pod-writes"),
        ("ValidatingAdmissionPolicy", "", "mpi-operator-secret-writes"),
        ("ValidatingAdmissionPolicyBinding", "", "mpi-operator-secret-writes"),
        ("ValidatingAdmissionPolicy", "", "mpi-operator-bare-workers"),
        ("ValidatingAdmissionPolicyBinding", "", "mpi-operator-bare-workers"),
        ("Deployment", NS, "mpi-operator"),
        ("PodDisruptionBudget", NS, "mpi-operator"),
        ("Service", NS, "mpi-operator-metrics"),
        ("NetworkPolicy", NS, "mpi-operator"),
    }
    namespaced = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
                  for d in render(kubectl, MANIFESTS / "rbac-namespaced")}
    assert namespaced == (got - {("ClusterRole", "", "mpi-operator"), ("ClusterRoleBinding", "", "mpi-operator")}
                          - {(k, ns, n) for k, ns, n in got if k in ("Deployment", "PodDisruptionBudget", "Service",
                                                                     "NetworkPolicy")}) | {
        ("Role", "mpijobs", "mpi-operator"), ("RoleBinding", "mpijobs", "mpi-operator")}
    monitoring = render(kubectl, MANIFESTS / "monitoring")
    assert sorted((d["apiVersion"], d["kind"]) for d in monitoring) == [
        ("monitoring.coreos.com/v1", "PrometheusRule"), ("monitoring.coreos.com/v1", "ServiceMonitor")]
    by_kind = {d["kind"]: d for d in monitoring}
    assert by_kind["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    alerts = {r["alert"] for g in by_kind["PrometheusRule"]["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == {"MPIOperatorNoLeader", "MPIOperatorReconcileErrors", "MPIJobStuck", "MPIOperatorReconcileHung"}

    full = render(kubectl, MANIFESTS)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in full}
    assert ("CustomResourceDefinition", "mpijobs.kubeflow.org") in kinds
    assert {(k, n) for k, _, n in got} <= kinds
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mpijob-operator" for d in full)
    deploy = next(d for d in full if d["kind"] == "Deployment")
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "mpijob-operator:dev"


def test_deployment_is_what_the_operator_expects(kubectl):
    deploy = next(d for d in render(kubectl, MANIFESTS / "operator") if d["kind"] == "Deployment")
    spec = deploy["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert deploy["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "mpi-operator"
    assert c["args"] == ["--leader-elect", "--leader-election-namespace=mpi-operator", "--worker-backend=job",
                         "--metrics-bind-address=$(POD_IP):8080", "--health-probe-bind-address=$(POD_IP):8081",
                         "--log-format=json"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"POD_IP": "status.podIP", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert spec["securityContext"]["runAsUser"] == 65532
    assert {"requests", "limits"} <= c["resources"].keys()
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/tmp"]
    svc = next(d for d in render(kubectl, MANIFESTS / "operator") if d["kind"] == "Service")
    assert svc["metadata"]["name"] == "mpi-operator-metrics"
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()


def test_hardened_metrics_bind_the_pod_ip_and_only_prometheus_may_scrape(kubectl):
    """Issue 24 item 12: the shipped Deployment serves /metrics and the probes on the pod's IP only
    (never on every address), and a NetworkPolicy admits only Prometheus pods, to the metrics port
    alone (the kubelet's probes come from the node, which a NetworkPolicy always admits)."""
    rendered = render(kubectl, MANIFESTS / "operator")
    deploy = next(d for d in rendered if d["kind"] == "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    binds = [a for a in c["args"] if "bind-address" in a]
    assert binds and all(a.split("=", 1)[1].startswith("$(POD_IP):") for a in binds), binds
    assert "POD_IP" in {e["name"] for e in c["env"]}
    (policy,) = [d for d in rendered if d["kind"] == "NetworkPolicy"]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert [f["podSelector"]["matchLabels"] for f in rule["from"]] == [{"app.kubernetes.io/name": "prometheus"}]


# -- metrics_policy: who may scrape /metrics (issue 36 item 6) --------------------------------------

PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}


def ns_of(name: str, labels: dict[str, str] | None = None) -> dict:
    """A namespace as the API server holds it: it sets kubernetes.io/metadata.name to the name,
    whatever the creator wrote there (test_a_namespace_cannot_borrow_the_monitoring_namespaces_name)."""
    return {"name": name, "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}}


# (overlay, case, the scraping pod's namespace, its labels, the operator's port, admitted?)
METRICS_POLICY = [
    ("operator", "Prometheus of the monitoring namespace", ns_of("monitoring"), PROMETHEUS, "metrics", True),
    ("operator", "the same, on the health port", ns_of("monitoring"), PROMETHEUS, "health", False),
    ("operator", "another pod of the monitoring namespace", ns_of("monitoring"),
     {"app.kubernetes.io/name": "grafana"}, "metrics", False),
    ("operator", "a pod a tenant labelled prometheus", ns_of("team-a"), PROMETHEUS, "metrics", False),
    ("operator", "the same, its namespace labelled like a monitoring one",
     ns_of("team-a", {"name": "monitoring", "monitoring": "true", **PROMETHEUS}), PROMETHEUS, "metrics", False),
    ("operator", "a prometheus pod beside the operator", ns_of(NS), PROMETHEUS, "metrics", False),
    ("operator", "a prometheus pod of an MPIJob's namespace", ns_of("mpijob-deployed"), PROMETHEUS, "metrics",
     False),
    # manifests/local: the local cluster's Prometheus resource lives in mpi-operator (e2e/test_deployed.py)
    ("local", "the local cluster's Prometheus", ns_of(NS), PROMETHEUS, "metrics", True),
    ("local", "a prometheus pod of the MPIJobs' namespace", ns_of("mpijob-deployed"), PROMETHEUS, "metrics",
     False),
    ("local", "the default monitoring namespace, not used here", ns_of("monitoring"), PROMETHEUS, "metrics",
     False),
]


def operator_pod(rendered: list[dict]) -> dict:
    """The operator's pod as the policy sees it: its labels, namespace and named ports."""
    deploy = next(d for d in rendered if d["kind"] == "Deployment")
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    return {"namespace": ns_of(deploy["metadata"]["namespace"]), "labels": deploy["spec"]["template"]["metadata"][
        "labels"], "ports": {p["name"]: p["containerPort"] for p in c["ports"]}}


@pytest.mark.parametrize(("overlay", "case", "ns", "labels", "port", "admitted"), METRICS_POLICY,
                         ids=[f"{c[0]}: {c[1]}" for c in METRICS_POLICY])
def test_metrics_policy_admits_the_monitoring_namespaces_prometheus_only(kubectl, overlay, case, ns, labels,
                                                                         port, admitted):
    rendered = render(kubectl, MANIFESTS / overlay)
    (policy,) = [d for d in rendered if d["kind"] == "NetworkPolicy"]
    source = {"namespace": ns, "labels": labels}
    assert selectors.admits(policy, source, operator_pod(rendered), port) is admitted


def test_metrics_policy_a_namespace_cannot_borrow_the_monitoring_namespaces_name(kubectl, get_json):
    """The policy selects the monitoring namespace by kubernetes.io/metadata.name, which the API
    server sets to the namespace's name on every create and update: a tenant who writes
    `monitoring` there gets its own name back, and its Prometheus stays refused."""
    name = f"t-forge-{uuid.uuid4().hex[:6]}"
    forged = {"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": "monitoring"}}}
    kubectl("create", "-f", "-", input=json.dumps(forged))
    try:
        kubectl("label", "namespace", name, "kubernetes.io/metadata.name=monitoring", "--overwrite")
        held = get_json("namespace", name)["metadata"]
        assert held["labels"]["kubernetes.io/metadata.name"] == name
        rendered = render(kubectl, MANIFESTS / "operator")
        (policy,) = [d for d in rendered if d["kind"] == "NetworkPolicy"]
        source = {"namespace": {"name": name, "labels": held["labels"]}, "labels": PROMETHEUS}
        assert not selectors.admits(policy, source, operator_pod(rendered), "metrics")
    finally:
        kubectl("delete", "namespace", name, "--wait=false", check=False)


# -- the real API server --------------------------------------------------------------------------


def test_manifests_are_accepted_by_the_api_server(kubectl, rbac, get_json):
    # the namespace exists now (rbac fixture), so the namespaced objects can be dry-run too
    out = kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS / "operator")).stdout
    assert "deployment.apps/mpi-operator" in out and "service/mpi-operator-metrics" in out
    assert "networkpolicy.networking.k8s.io/mpi-operator" in out
    kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS / "rbac"))
    if kubectl("get", "crd", "servicemonitors.monitoring.coreos.com", check=False).returncode == 0:
        kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS / "monitoring"))
    # The namespace enforces the restricted Pod Security Standard, which the operator's pods meet:
    # a server-side dry-run of a pod with the Deployment's template is admitted without a warning.
    deploy = next(d for d in render(kubectl, MANIFESTS / "operator") if d["kind"] == "Deployment")
    ns_labels = get_json("namespace", NS)["metadata"]["labels"]
    assert ns_labels["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "mpi-operator-dry-run", "namespace": NS},
           "spec": deploy["spec"]["template"]["spec"]}
    r = kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod))
    assert "violate" not in r.stderr, r.stderr
    out = kubectl("apply", "--dry-run=server", "-k", str(MANIFESTS)).stdout
    assert "customresourcedefinition.apiextensions.k8s.io/mpijobs.kubeflow.org" in out


def test_operator_is_allowed_every_verb_it_uses(kubectl, rbac, namespace):
    for (group, resource), verbs in CLUSTER_VERBS.items():
        res, _, sub = resource.partition("/")
        qualified = f"{res}.{group}" if group else res
        qualified += f"/{sub}" if sub else ""
        for verb in sorted(verbs):
            assert can_i(kubectl, verb, qualified, namespace), f"{SA} cannot {verb} {qualified}"
            assert can_i(kubectl, verb, qualified, ""), f"{SA} cannot {verb} {qualified} cluster-wide"
    for verb in sorted(LEASE_VERBS):
        assert can_i(kubectl, verb, "leases.coordination.k8s.io", NS), (
            f"{SA} cannot {verb} leases in {NS}")


@pytest.mark.parametrize(("verb", "resource", "where"), DENIED,
                         ids=[f"{v}-{r}-{'ns' if w is None else w or 'cluster'}" for v, r, w in DENIED])
def test_operator_is_denied_what_it_does_not_use(kubectl, rbac, namespace, verb, resource, where):
    ns = namespace if where is None else where
    assert not can_i(kubectl, verb, resource, ns), f"{SA} may {verb} {resource} in {ns or 'the cluster'}"


def test_operator_rules_are_exactly_the_expected_ones(kubectl, rbac, namespace):
    # What every ServiceAccount of the namespace gets anyway (discovery, self reviews, ...):
    nobody = f"system:serviceaccount:{NS}:nobody-{uuid.uuid4().hex[:6]}"
    leases = {("coordination.k8s.io", "leases", v) for v in LEASE_VERBS}
    for ns, expected in ((namespace, expand(CLUSTER_VERBS)), (NS, expand(CLUSTER_VERBS) | leases)):
        extra = rules_of(kubectl, SA, ns) - rules_of(kubectl, nobody, ns)
        assert extra == expected, (
            f"in namespace {ns}: gained {sorted(extra - expected)}, lost {sorted(expected - extra)}")


def test_cluster_role_on_the_server_matches_the_contract(get_json, rbac):
    role = get_json("clusterrole", "mpi-operator")
    got = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
           for r in rule["resources"] for v in rule["verbs"]}
    assert got == expand(CLUSTER_VERBS)
    lease = get_json("role", "-n", NS, "mpi-operator-leader-election")
    assert lease["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                               "verbs": ["get", "create", "update"]}]
    binding = get_json("clusterrolebinding", "mpi-operator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": NS}]


def test_least_privilege_the_namespaced_role_grants_the_map_in_its_namespace_only(kubectl, namespace):
    """manifests/rbac-namespaced/ on the real API server, its Role and RoleBinding moved to the test's
    namespace and bound to a ServiceAccount of their own (the operator's keeps its ClusterRole for the
    other tests): in that namespace exactly the ClusterRole's rules; in any other, and across
    namespaces, nothing more than any ServiceAccount gets (no Secret readable elsewhere)."""
    sa_name = f"op-{uuid.uuid4().hex[:6]}"
    kubectl("-n", namespace, "create", "serviceaccount", sa_name)
    for d in render(kubectl, MANIFESTS / "rbac-namespaced"):
        if (d["kind"], d["metadata"]["name"]) in (("Role", "mpi-operator"), ("RoleBinding", "mpi-operator")):
            d["metadata"]["namespace"] = namespace
            for s in d.get("subjects") or []:
                s.update(name=sa_name, namespace=namespace)
            kubectl("apply", "-f", "-", input=json.dumps(d))
    sa = f"system:serviceaccount:{namespace}:{sa_name}"
    nobody = f"system:serviceaccount:{namespace}:nobody-{uuid.uuid4().hex[:6]}"
    wait_until(lambda: ("", "secrets", "list") in rules_of(kubectl, sa, namespace), timeout=30,
               what="the namespaced Role to take effect")
    extra = rules_of(kubectl, sa, namespace) - rules_of(kubectl, nobody, namespace)
    assert extra == expand(CLUSTER_VERBS), (
        f"gained {sorted(extra - expand(CLUSTER_VERBS))}, lost {sorted(expand(CLUSTER_VERBS) - extra)}")
    for elsewhere in ("default", NS):
        assert rules_of(kubectl, sa, elsewhere) - rules_of(kubectl, nobody, elsewhere) == set(), elsewhere
    for verb, where in (("list", ""), ("get", "default"), ("list", NS)):
        r = kubectl("auth", "can-i", verb, "secrets", f"--as={sa}", *(["-n", where] if where else ["-A"]),
                    check=False)
        assert r.stdout.strip() == "no", (verb, where)


def test_user_roles_are_aggregated_into_edit_and_view(get_json, rbac):
    def verbs(role: str) -> set[str]:
        return {v for rule in get_json("clusterrole", role).get("rules", [])
                if "kubeflow.org" in rule.get("apiGroups", []) and "mpijobs" in rule.get("resources", [])
                for v in rule["verbs"]}

    wait_until(lambda: "create" in verbs("edit") and "list" in verbs("view"), timeout=30,
               what="mpijobs aggregated into edit and view")
    assert "create" in verbs("admin")
    assert not {"create", "update", "patch", "delete"} & verbs("view")


# -- examples -------------------------------------------------------------------------------------


def subset_missing(want, got, path="") -> list[str]:
    """Paths of `want` (the submitted object) that are absent or different in `got` (what the API kept)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [path or "/"]
        return [m for k, v in want.items()
                for m in (subset_missing(v, got[k], f"{path}.{k}") if k in got else [f"{path}.{k}"])]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [path]
        return [m for i, (w, g) in enumerate(zip(want, got, strict=True))
                for m in subset_missing(w, g, f"{path}[{i}]")]
    # the API server normalises quantities (cpu: 1 -> "1"); compare as strings
    return [] if str(want) == str(got) else [f"{path}: {want!r} != {got!r}"]


def test_examples_exist():
    names = {p.name for p in EXAMPLES}
    assert {"pi.yaml", "pi-intel.yaml", "pi-mpich.yaml"} <= names


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_accepted_by_the_crd_without_pruning(kubectl, crd_installed, namespace, example):
    # An example may carry what its MPIJob needs beside it (examples/mpi4py.yaml: a ConfigMap).
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d and d.get("kind") == "MPIJob"]
    assert docs and all(d["apiVersion"] == "kubeflow.org/v2beta1" for d in docs)
    for doc in docs:
        r = kubectl("apply", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                    input=json.dumps(doc))
        kept = json.loads(r.stdout)
        missing = subset_missing(doc["spec"], kept["spec"], "spec")
        assert not missing, f"{example.name}: the API server dropped or changed {missing}"
        launcher = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
        if (launcher["spec"].get("nodeSelector") or {}).get("mpijob-operator.dev/real-node") == "true":
            continue  # runs for real on the local cluster's real node (e2e/test_realnode_mpis.py)
        assert "sim.mpijob-operator.dev/run-for" in launcher["metadata"]["annotations"], (
            "the launcher must finish on the simulated nodes of the local cluster")
