"""The operator's RBAC is what its code sends, no more, no less (issue 36 item 9; client/permissions.py).

- Manifests and map agree in both directions: the ClusterRole, the namespaced Role
  (manifests/rbac-namespaced/), leader election's Role and the gang-scheduling roles grant exactly
  the map's (group, resource, verb) triples.
- The code cannot send outside the map: the operator's client is fenced to it (controller/__main__.py
  sets the fence its flags call for; a request outside raises before it is sent), and the unit
  tests' FakeApi holds every request of the executor, controller and informer tests to it.
- No grant is dead: the planner's plans (every lifecycle, both backends, every gang mode) applied by
  the real executor, the informers the controller builds, leader election and the log reader send
  every grant of the map, and nothing else.
The real API server's side (the authorizer's answers for the ServiceAccount, the namespaced Role
applied) is tests/integration/test_manifests.py.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import kubernetes
import pytest
import yaml

from client import permissions as perm
from client.errors import ApiError
from client.rest import RestClient
from controller import __main__ as main_module
from controller import config, evidence
from controller.executor import Executor
from controller.leader import LeaderElector
from controller.mpijob_controller import MPIJobController
from informers.factory import InformerFactory
from reconcilers import desired, names
from reconcilers.gang import podgroup as pg
from reconcilers.gang import workload_gang
from reconcilers.types import LogRead, Observed
from tests.unit import sim
from testsupport.fake_api import FakeApi
from testsupport.paths import ROOT

MANIFESTS = ROOT / "manifests"
ALL_GANGS = dict(perm.GANG)
SCHEDULER = "scheduler-plugins-scheduler"
GANG_FLAG = {"scheduler-plugins": SCHEDULER, "volcano": pg.VOLCANO, "workload": workload_gang.MODE}


def granted(path: Path) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every Role and ClusterRole rule in a manifest file."""
    out = set()
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") not in ("Role", "ClusterRole"):
            continue
        for rule in doc.get("rules") or []:
            assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
            out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


# -- the manifests are the map ------------------------------------------------------------------------------------

OPERATOR_ROLE = perm.expand(perm.OPERATOR) | perm.expand(perm.IMPLIED)
MANIFEST_CASES = [
    ("ClusterRole", MANIFESTS / "rbac" / "cluster_role.yaml", OPERATOR_ROLE),
    ("namespaced Role", MANIFESTS / "rbac-namespaced" / "role.yaml", OPERATOR_ROLE),
    ("leader election Role", MANIFESTS / "rbac" / "leader_election_role.yaml", perm.expand(perm.LEADER_ELECTION)),
    *[(f"gang {mode}", MANIFESTS / "gang-scheduling" / mode / "cluster_role.yaml", perm.expand(grants))
      for mode, grants in ALL_GANGS.items()],
]


@pytest.mark.parametrize(("case", "path", "want"), MANIFEST_CASES, ids=[c[0] for c in MANIFEST_CASES])
def test_least_privilege_each_manifest_grants_exactly_the_map(case, path, want):
    got = granted(path)
    assert not got - want, f"{path.relative_to(ROOT)} grants what the code never sends: {sorted(got - want)}"
    assert not want - got, f"{path.relative_to(ROOT)} lacks what the code sends: {sorted(want - got)}"


def test_least_privilege_the_namespaced_overlay_has_no_cluster_wide_grant():
    """manifests/rbac-namespaced/ drops the ClusterRole and its binding; its Role is bound to the
    operator's ServiceAccount (rendered by kustomize in tests/integration/test_manifests.py)."""
    text = (MANIFESTS / "rbac-namespaced" / "kustomization.yaml").read_text()
    kust = yaml.safe_load(text)
    dropped = [yaml.safe_load(p["patch"]) for p in kust["patches"]]
    assert {(d["kind"], d["metadata"]["name"], d["$patch"]) for d in dropped} == {
        ("ClusterRole", "mpi-operator", "delete"), ("ClusterRoleBinding", "mpi-operator", "delete")}
    (binding,) = yaml.safe_load_all((MANIFESTS / "rbac-namespaced" / "role_binding.yaml").read_text())
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "mpi-operator"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": "mpi-operator"}]


# -- a request as the authorizer names it -----------------------------------------------------------------------

ATTRIBUTES = [
    ("GET", "/apis/kubeflow.org/v2beta1/mpijobs", {}, ("kubeflow.org", "mpijobs", "list", None)),
    ("GET", "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs", {"watch": True},
     ("kubeflow.org", "mpijobs", "watch", "ns")),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("", "pods", "watch", None)),
    ("GET", "/api/v1/namespaces/ns/pods/p/log", {"tailLines": 5}, ("", "pods/log", "get", "ns")),
    ("PATCH", "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/pi/status", None,
     ("kubeflow.org", "mpijobs/status", "patch", "ns")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/mpi-operator/leases/l", None,
     ("coordination.k8s.io", "leases", "update", "mpi-operator")),
    ("POST", "/api/v1/namespaces/ns/events", None, ("", "events", "create", "ns")),
    ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/pi-worker", None, ("batch", "jobs", "delete", "ns")),
    ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", None, ("batch", "jobs", "deletecollection", "ns")),
    ("GET", "/api/v1/namespaces/ns", None, ("", "namespaces", "get", None)),
    ("GET", "/apis/kubeflow.org/v2beta1", None, None),  # discovery
    ("GET", "/metrics", None, None),
]


@pytest.mark.parametrize(("method", "path", "query", "want"), ATTRIBUTES, ids=[f"{m} {p}" for m, p, _, _ in ATTRIBUTES])
def test_least_privilege_attributes_of_a_request(method, path, query, want):
    got = perm.attributes(method, path, query)
    assert (got if got is None else (got.group, got.resource, got.verb, got.namespace)) == want


# -- the code cannot send outside the map ---------------------------------------------------------------------

FENCE = [
    # (fence, method, path, query, allowed?)
    ("all namespaces", "GET", "/apis/batch/v1/jobs", {"watch": True}, True),
    ("all namespaces", "PATCH", "/api/v1/namespaces/a/events/e", None, False),  # events are created, never patched
    ("all namespaces", "POST", "/apis/events.k8s.io/v1/namespaces/a/events", None, False),
    ("all namespaces", "GET", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/pi", None, False),
    ("all namespaces", "PUT", "/apis/kubeflow.org/v2beta1/namespaces/a/mpijobs/pi/status", None, False),
    ("all namespaces", "DELETE", "/api/v1/namespaces/a/configmaps/pi-config", None, False),
    ("all namespaces", "GET", "/api/v1/namespaces/a/pods/p/exec", None, False),
    ("all namespaces", "GET", "/apis/kubeflow.org/v2beta1", None, True),  # discovery
    ("all namespaces", "GET", "/version", None, True),  # public (container restart rules, section 11)
    ("all namespaces", "POST", "/version", None, False),
    ("all namespaces", "GET", "/version/x", None, False),
    ("all namespaces", "GET", "/metrics", None, False),
    ("all namespaces", "PUT", "/apis/coordination.k8s.io/v1/namespaces/mpi-operator/leases/l", None, True),
    ("all namespaces", "PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", None, False),
    ("all namespaces", "POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/a/podgroups", None, False),
    ("one namespace", "GET", "/api/v1/namespaces/a/secrets", {"watch": True}, True),
    ("one namespace", "GET", "/api/v1/namespaces/b/secrets", {"watch": True}, False),
    ("one namespace", "GET", "/api/v1/secrets", None, False),  # across namespaces
    ("gang volcano", "POST", "/apis/scheduling.volcano.sh/v1beta1/namespaces/a/podgroups", None, True),
    ("gang volcano", "POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/a/podgroups", None, False),
]
FENCES = {
    "all namespaces": perm.operator_fence("", "", "mpi-operator"),
    "one namespace": perm.operator_fence("a", "", "mpi-operator"),
    "gang volcano": perm.operator_fence("", pg.VOLCANO, None),
}


@pytest.mark.parametrize(("fence", "method", "path", "query", "allowed"), FENCE,
                         ids=[f"{f}: {m} {p}" for f, m, p, _, _ in FENCE])
def test_least_privilege_the_fence(fence, method, path, query, allowed):
    assert FENCES[fence].allows(method, path, query) is allowed


def test_least_privilege_a_fenced_client_refuses_before_sending():
    """Nothing listens at the configuration's host: a request that got past the fence would fail
    with a connection error, not Unpermitted."""
    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: nothing answers
    client = RestClient(kubernetes.client.ApiClient(cfg), fence=perm.operator_fence("", "", None))
    tokens = client.limiter.tokens if hasattr(client.limiter, "tokens") else None
    for call in (lambda c: c.request("PATCH", "/api/v1/namespaces/a/events/e", body={}),
                 lambda c: c.request("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", body={}),
                 lambda c: c.get_text("/metrics"),
                 lambda c: c.stream("/api/v1/nodes")):
        for c in (client, client.with_own_limiter(5, 10)):
            with pytest.raises(perm.Unpermitted):
                call(c)
    assert tokens is None or client.limiter.tokens == tokens, "a refused call takes no token"
    with pytest.raises(Exception) as e:
        client.request("GET", "/api/v1/namespaces/a/configmaps", timeout=1)
    assert not isinstance(e.value, perm.Unpermitted)  # allowed: sent (and the connection refused)


@pytest.mark.parametrize(("argv", "want"), [
    ([], perm.operator_fence("", "", None)),
    (["--namespace=team-a"], perm.operator_fence("team-a", "", None)),
    (["--leader-elect", "--leader-election-namespace=ops"], perm.operator_fence("", "", "ops")),
    (["--gang-scheduling=volcano", "--namespace=b"], perm.operator_fence("b", pg.VOLCANO, None)),
    (["--gang-scheduling=sched-x"], perm.operator_fence("", "sched-x", None)),
])
def test_least_privilege_the_operator_fences_its_client_for_its_flags(monkeypatch, argv, want):
    """main() sets the fence of its flags on the client every request goes through (the Executor's,
    the informers', leader election's, the log reader's)."""
    assert main_module.fence_of(config.parse(argv)) == want

    class Wired(Exception):
        pass

    def capture(client, *a, **kw):
        raise Wired(client)

    monkeypatch.setattr(main_module.RestClient, "from_kubeconfig",
                        classmethod(lambda cls, *a, **kw: RestClient(kubernetes.client.ApiClient())))
    monkeypatch.setattr(main_module, "Executor", capture)
    monkeypatch.setattr(main_module.signal, "signal", lambda *a: None)
    with pytest.raises(Wired) as e:
        main_module.main(argv)
    assert e.value.args[0].fence == want


def test_least_privilege_the_unit_tests_fake_api_holds_requests_to_the_map():
    api = FakeApi()
    api.request("GET", "/api/v1/namespaces/ns/configmaps")
    with pytest.raises(perm.Unpermitted):
        api.request("PATCH", "/api/v1/namespaces/ns/events/e", body={})
    with pytest.raises(perm.Unpermitted):
        api.stream("/api/v1/nodes")


# -- every grant is sent by some code path, and nothing else ---------------------------------------------------

def _foreign_labels(obj: dict) -> dict:
    """`obj` with our labels gone: drift that the plan repairs with a patch."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = {"someone": "else"}
    return obj


def _plans(backend: str, gang: str) -> list[tuple[dict, object]]:
    """(MPIJob, Plan) of the lifecycles a plan can take: create, drift repair, suspend and resume,
    cleanPodPolicy All, the TTL, a Secret that lost its keys, a stray worker object."""
    cfg = {"gang_scheduler": GANG_FLAG[gang]} if gang else {}
    out = []

    def record(job, obs, **kw):
        p = sim.run(job, obs, backend=backend, **cfg, **kw)
        out.append((copy.deepcopy(job), p))
        return p

    job = sim.mpijob(run_policy={"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60})
    record(job, Observed())
    job, obs, _ = sim.converge(job, backend=backend, **cfg)
    # drift: every child lost our labels
    drifted = replace(obs, **{f: _foreign_labels(getattr(obs, f)) for f in
                              ("service", "config_map", "secret", "launcher", "workers", "pod_group", "workload",
                               "network_policy")
                              if getattr(obs, f) is not None})
    for f in ("service", "config_map", "secret", "launcher", "workers", "pod_group", "workload", "network_policy"):
        o = getattr(drifted, f)
        if o is not None:  # still ours (the controller reference), only the labels drifted
            o["metadata"]["ownerReferences"] = getattr(obs, f)["metadata"]["ownerReferences"]
    record(job, drifted)
    # the Secret lost its keys
    record(job, replace(obs, secret={**obs.secret, "data": {}}))
    # a stray worker object of the other kind
    other = "statefulset" if backend == "job" else "job"
    _, stray_obs, _ = sim.converge(copy.deepcopy(job), backend=other, **cfg)
    record(job, replace(obs, other_workers=stray_obs.workers))
    # network isolation turned off by the MPIJob's annotation: its NetworkPolicy deleted (reconcilers/netpol.py)
    opted_out = copy.deepcopy(job)
    opted_out["metadata"]["annotations"] = {names.NETWORK_ISOLATION_ANNOTATION: "false"}
    record(opted_out, obs)
    # running (sim.running_state, with the gang mode's config)
    ready = "readyReplicas" if backend == "statefulset" else "ready"
    obs = replace(obs, workers=sim.with_status(obs.workers, **{ready: 2}),
                  launcher=sim.with_status(obs.launcher, active=1, ready=1),
                  pods=[sim.pod(job, "launcher")] + [sim.pod(job, "worker", i, backend=backend) for i in range(2)])
    job, obs, _ = sim.converge(job, obs, backend, **cfg)
    # suspended; its pods gone, the gang's objects released; then resumed
    suspended = copy.deepcopy(job)
    suspended["spec"]["runPolicy"]["suspend"] = True
    record(suspended, obs, now=sim.at(10))
    sjob, sobs, _ = sim.converge(suspended, obs, backend, now=sim.at(10), **cfg)
    sobs = replace(sobs, pods=[], workers=sim.with_status(sobs.workers, **{ready: 0, "succeeded": 2}),
                   launcher=sim.with_status(sobs.launcher, active=0, ready=0) if sobs.launcher else None)
    record(sjob, sobs, now=sim.at(15))
    sobs = replace(sobs, pod_group=None, workload=None)
    sjob = copy.deepcopy(sjob)
    sjob["spec"]["runPolicy"]["suspend"] = False
    record(sjob, sobs, now=sim.at(20))
    # an MPIJob the upstream operator started (its launcher Job without our hash, its bare workers
    # gone): the lost workers created again as upstream makes them (reconcilers/takeover.py)
    launcher = copy.deepcopy(obs.launcher)
    launcher["metadata"]["annotations"].pop(names.TEMPLATE_HASH_ANNOTATION, None)
    record(job, replace(obs, workers=None, launcher=launcher, pods=[]))
    # an elastic launcher: its pod gets the hosts' digest (reconcilers/elastic.py)
    ejob = copy.deepcopy(job)
    ejob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"] = [
        "--host-discovery-script", "/etc/mpi/discover_hosts.sh", "python", "t.py"]
    record(ejob, obs)
    # finished under cleanPodPolicy All: pods removed; the TTL runs out
    done, logs = sim.exited_0(replace(obs, launcher=sim.job_finished(obs.launcher, "Complete")))
    record(job, done, now=sim.at(400))  # the verdict waits for the launcher's log (a read: pods/log get)
    p = record(job, done, now=sim.at(400), reports=logs)
    job["status"] = p.status
    record(job, done, now=sim.at(1000), reports=logs)
    return out


def _server(job: dict):
    """Answers as the API server would in substance: a create meets AlreadyExists (the cache was
    behind), so the executor reads the object, which this MPIJob controls; other writes pass."""
    def respond(method: str, path: str, body):
        if method == "POST" and not path.endswith("/events"):
            raise ApiError(409, "AlreadyExists", "already exists")
        if method == "GET":
            name = path.rsplit("/", 1)[1]
            return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "7", "labels": {},
                                 "ownerReferences": [desired.owner_reference(job)]}}
        return {"metadata": {"name": job["metadata"]["name"], "resourceVersion": "8"}}
    return respond


def _sent(api: FakeApi) -> set[tuple[str, str, str]]:
    out = set()
    for method, path, _ in api.calls:
        a = perm.attributes(method, path)
        if a is not None:
            out.add((a.group, a.resource, a.verb))
    for path in api.watch_paths:
        a = perm.attributes("GET", path, {"watch": True})
        out.add((a.group, a.resource, a.verb))
    return out


def test_least_privilege_every_grant_is_sent_by_the_code_and_nothing_else():
    sent: set[tuple[str, str, str]] = set()
    # the planner's plans, applied by the real executor
    for backend in sim.BACKENDS:
        for gang in ("", *perm.GANG):
            for job, p in _plans(backend, gang):
                job["metadata"].update(resourceVersion="5")
                api = FakeApi(respond=_server(job))
                executor = Executor(api, is_leader=lambda: True, component="mpi-operator", instance="t")
                executor.apply(job, p)
                for ev in p.events[:1]:
                    executor.event(job, ev)
                sent |= _sent(api)
    # the informers the controller builds, for each gang mode: a list, then a watch
    for gang in ("", *perm.GANG):
        api = FakeApi()
        factory = InformerFactory(api, namespace="ns")
        MPIJobController(config.Options(gang_scheduling=GANG_FLAG.get(gang, "")), factory,
                         Executor(api, is_leader=lambda: True, component="c", instance="t"), kueue_served=True)
        factory.start()
        assert factory.wait_for_cache_sync(timeout=10)
        factory.stop()
        sent |= _sent(api)
    # leader election: the Lease read, created once, then renewed
    lease: dict = {}

    def lease_server(method, path, body):
        if method == "GET" and not lease:
            raise ApiError(404, "NotFound", "not found")
        if method in ("POST", "PUT"):
            lease.update(body)
        return copy.deepcopy(lease)

    api = FakeApi(respond=lease_server)
    elector = LeaderElector(api, "mpi-operator", "mpi-operator", "me")
    assert elector._try_acquire_or_renew() and elector._try_acquire_or_renew()
    sent |= _sent(api)
    # the launcher's log, for the verdict on an Open MPI exit 0 (controller/evidence.py)
    api = FakeApi("mpirun: all ranks done")
    evidence.read(api, LogRead("ns", "pi-launcher-abc", "uid-1", "launcher"))
    sent |= _sent(api)

    grants = perm.expand(perm.OPERATOR) | perm.expand(perm.LEADER_ELECTION)
    for g in perm.GANG.values():
        grants |= perm.expand(g)
    assert not grants - sent, f"granted, never sent (drop from the map and manifests): {sorted(grants - sent)}"
    assert not sent - grants, f"sent but not granted: {sorted(sent - grants)}"


def test_least_privilege_finalizers_update_is_implied_by_what_the_creates_carry():
    """mpijobs/finalizers update is granted without being sent: every child's controller reference
    asks blockOwnerDeletion, which OwnerReferencesPermissionEnforcement allows only with it."""
    assert {("kubeflow.org", "mpijobs/finalizers"): frozenset({"update"})} == perm.IMPLIED
    job = sim.mpijob()
    p = sim.run(job, Observed(), backend="job", gang_scheduler=SCHEDULER)
    refs = [r for c in p.creates for r in c.obj["metadata"]["ownerReferences"]]
    assert refs and all(r["blockOwnerDeletion"] is True and r["controller"] is True for r in refs)
