"""The local cluster through its kubectl, as the e2e tests read it: objects, conditions, pods,
Events, and waits on them. `kubectl` is runner()'s function: the session fixture of
tests/cluster_fixtures.py, or made by a benchmark (bench/recovery.py)."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import kubernetes
import urllib3
import yaml

from reconcilers.names import (
    ATTEMPT_RECORD_FINALIZER,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    OPERATOR_NAME,
    OPERATOR_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    ROLE_WORKER,
)
from testsupport.paths import CLUSTER_DIR, CRD, ROOT
from testsupport.waiting import wait_until

# Fully qualified: on a shared cluster another CRD may also answer to the short name "mpijob".
MPIJOBS = "mpijobs.kubeflow.org"
# Fully qualified: on a shared cluster another CRD may also be called mpijobs (another group), and
# kubectl would then resolve the short name to it.
QUALIFIED = {"mpijob": "mpijobs.v2beta1.kubeflow.org", "mpijobs": "mpijobs.v2beta1.kubeflow.org"}


Kubectl = Callable[..., subprocess.CompletedProcess]
# This process's kubectl calls and the CPU seconds they took (user + system, from the rusage of its
# children around each call): make test prints the sum over its workers (docs/development.md, "Where
# the time goes": a kubectl call is a process, its TLS handshake and its discovery).
# `reads`: the GETs read in this process instead (Reader), and their CPU seconds.
SPENT = {"calls": 0, "cpu_s": 0.0, "reads": 0, "read_cpu_s": 0.0}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# The kinds the read helpers below (get, items) ask for, as the tests name them -> (API prefix,
# resource): read in this process, not through a kubectl process each time. A kubectl call costs about
# 70 ms of CPU (a process, its TLS handshake and discovery), and the tests' polls made 27% of the CPU
# of make test's concurrent phase (docs/development.md, "Where the time goes"). Any other kind goes
# to kubectl.
_CORE = {"pod": "pods", "configmap": "configmaps", "secret": "secrets", "service": "services",
         "event": "events", "resourcequota": "resourcequotas", "serviceaccount": "serviceaccounts"}
_GROUPED = {"job": ("/apis/batch/v1", "jobs"), "statefulset": ("/apis/apps/v1", "statefulsets"),
            "networkpolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
            "mpijob": ("/apis/kubeflow.org/v2beta1", "mpijobs")}
RESOURCES: dict[str, tuple[str, str]] = {
    **{k: ("/api/v1", v) for k, v in _CORE.items()}, **{v: ("/api/v1", v) for v in _CORE.values()},
    **_GROUPED, **{v[1]: v for v in _GROUPED.values()},
    MPIJOBS: _GROUPED["mpijob"], "mpijobs.v2beta1.kubeflow.org": _GROUPED["mpijob"],
}


def resource_path(ns: str, kind: str, name: str = "") -> str | None:
    """The API path of `kind` (as RESOURCES names it) in namespace `ns`, or None for another kind."""
    found = RESOURCES.get(kind)
    if found is None:
        return None
    prefix, plural = found
    return f"{prefix}/namespaces/{ns}/{plural}" + (f"/{name}" if name else "")


class Reader:
    """GETs through one client of this process (kubernetes.client.ApiClient: the operator's own
    client.rest would count the tests' reads in the operator's metrics where it runs in the same
    process). Answers (status, decoded body or None); status 0 when the API server did not answer."""

    def __init__(self, kubeconfig: str) -> None:
        self._kubeconfig = kubeconfig
        self._api: kubernetes.client.ApiClient | None = None

    def __call__(self, path: str, query: dict | None = None) -> tuple[int, dict | None]:
        status, data = self.raw(path, query, "application/json")
        return status, (_as_kubectl_shows(json.loads(data)) if status == 200 else None)

    def raw(self, path: str, query: dict | None = None, accept: str = "*/*") -> tuple[int, bytes]:
        if self._api is None:  # on first use: a runner that reads nothing builds no client
            self._api = kubernetes.config.new_client_from_config(config_file=self._kubeconfig)
        before = time.thread_time()
        try:
            method, url, headers, _, _ = self._api.param_serialize(
                "GET", path, query_params=list((query or {}).items()),
                header_params={"Accept": accept}, auth_settings=["BearerToken"])
            r = self._api.call_api(method, url, header_params=headers, _request_timeout=60)
            return r.status, r.read()
        except (urllib3.exceptions.HTTPError, OSError):
            return 0, b""  # no answer: where kubectl would fail too (get: None; items: AssertionError)
        finally:
            SPENT["reads"] += 1
            SPENT["read_cpu_s"] += time.thread_time() - before


def _as_kubectl_shows(obj: dict) -> dict:
    """Without metadata.managedFields, as `kubectl get -o json` shows an object and each of a list's."""
    for o in [obj, *(obj.get("items") or [])]:
        (o.get("metadata") or {}).pop("managedFields", None)
    return obj


def runner(kubeconfig: str) -> Kubectl:
    """The cluster's kubectl with `kubeconfig`: `kubectl("get", "pods", input=yaml, check=False)`;
    a failure raises AssertionError with its stderr unless check=False. Its `read` (a Reader with the
    same kubeconfig) serves get() and items() below."""

    def run(*args: str, input: str | None = None, check: bool = True, timeout: float = 60):
        for _ in range(2):
            before = _children_cpu()
            r = subprocess.run(
                [str(CLUSTER_DIR / "bin" / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
                input=input, capture_output=True, text=True, timeout=timeout,
            )
            SPENT["calls"] += 1
            SPENT["cpu_s"] += _children_cpu() - before
            # Two pytest-xdist workers applying one cluster-scoped object for the first time at once:
            # client-side apply reads it (absent) and creates it, and the second create is refused
            # AlreadyExists. Applied again, it patches the object the other worker created.
            if not ("apply" in args and r.returncode != 0 and "(AlreadyExists)" in r.stderr):
                break
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {r.stderr.strip()}")
        return r

    run.read = Reader(kubeconfig)  # type: ignore[attr-defined]
    return run


def wait_established(kubectl: Callable, *crds: str, timeout: float = 90) -> None:
    """Until every CRD named (e.g. "mpijobs.kubeflow.org") is Established. Polled rather than `kubectl
    wait`: right after a CRD is created it has no status.conditions yet, and `kubectl wait` then fails
    at once ("accessor error: <nil>") instead of waiting."""
    def established() -> bool:
        r = kubectl("get", *(f"crd/{c}" for c in crds), "-o", "json", check=False)
        if r.returncode != 0:
            return False
        found = json.loads(r.stdout)
        return all(any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (i.get("status") or {}).get("conditions") or [])
                   for i in found.get("items", [found]))

    wait_until(established, timeout, interval=0.2, what=f"CRDs {', '.join(crds)} Established")


def install_crd(kubectl: Callable) -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(kubectl, MPIJOBS)


def service_account_kubeconfig(out: Path) -> str:
    """The CRD and manifests/rbac applied, and a kubeconfig with the mpi-operator ServiceAccount's token."""
    r = subprocess.run([str(ROOT / "hack" / "operator-kubeconfig.sh"), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return str(out)


def namespaced_service_account_kubeconfig(kubectl: Callable, namespace: str, out: Path) -> str:
    """The operator's ServiceAccount and RBAC of manifests/rbac-namespaced/, all inside `namespace`
    (a test namespace, removed with everything in it): a ServiceAccount `mpi-operator`, the shipped
    Role `mpi-operator` bound to it there, and leader election's Role for a Lease in that namespace
    (run the operator with --namespace and --leader-election-namespace set to it). No cluster-wide
    grant: what this kubeconfig may do outside `namespace` is what any ServiceAccount may."""
    text = kubectl("kustomize", str(ROOT / "manifests" / "rbac-namespaced")).stdout
    rendered = [d for d in yaml.safe_load_all(text) if d]
    assert not [d for d in rendered if d["kind"] == "ClusterRoleBinding"], "a cluster-wide binding"
    kubectl("-n", namespace, "create", "serviceaccount", "mpi-operator")
    for d in rendered:
        if d["kind"] not in ("Role", "RoleBinding"):
            continue
        d["metadata"]["namespace"] = namespace
        for s in d.get("subjects") or []:
            s["namespace"] = namespace
        kubectl("apply", "-f", "-", input=json.dumps(d))
    return token_kubeconfig(kubectl, namespace, "mpi-operator", out)


def token_kubeconfig(kubectl: Callable, namespace: str, service_account: str, out: Path) -> str:
    """A kubeconfig at `out` that authenticates as ServiceAccount `namespace`/`service_account` (a token
    of an hour) on the admin kubeconfig's cluster."""
    token = kubectl("-n", namespace, "create", "token", service_account, "--duration=1h").stdout.strip()
    admin = json.loads(kubectl("config", "view", "--minify", "--raw", "-o", "json").stdout)
    cluster = admin["clusters"][0]["cluster"]
    kc = {"apiVersion": "v1", "kind": "Config",
          "clusters": [{"name": "local", "cluster": cluster}],
          "users": [{"name": service_account, "user": {"token": token}}],
          "contexts": [{"name": service_account, "context": {"cluster": "local", "user": service_account,
                                                             "namespace": namespace}}],
          "current-context": service_account}
    out.write_text(json.dumps(kc))
    out.chmod(0o600)
    return str(out)


def apply(kubectl: Callable, ns: str, obj: dict) -> None:
    kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(obj))


def get(kubectl: Callable, ns: str, kind: str, name: str) -> dict | None:
    """The object, or None where kubectl would fail (absent, or the API server did not answer)."""
    read, path = getattr(kubectl, "read", None), resource_path(ns, kind, name)
    if read is not None and path is not None:
        code, obj = read(path)
        return obj if code == 200 else None
    r = kubectl("-n", ns, "get", QUALIFIED.get(kind, kind), name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def items(kubectl: Callable, ns: str, kind: str, selector: str = "", fields: str = "") -> list[dict]:
    """The objects of `kind` in `ns` (with `selector`, a label selector; `fields`, a field selector),
    each with its kind and apiVersion as kubectl shows them (a list from the API server leaves them
    out)."""
    read, path = getattr(kubectl, "read", None), resource_path(ns, kind)
    if read is not None and path is not None:
        query = {k: v for k, v in (("labelSelector", selector), ("fieldSelector", fields)) if v}
        code, listed = read(path, query)
        if code != 200 or listed is None:
            raise AssertionError(f"GET {path} ({query or 'every object'}) answered {code}")
        kind_of = str(listed.get("kind", "")).removesuffix("List")
        return [{"kind": kind_of, "apiVersion": listed.get("apiVersion"), **o} for o in listed.get("items") or []]
    args = ["-n", ns, "get", QUALIFIED.get(kind, kind), "-o", "json"] + (["-l", selector] if selector else []) \
        + (["--field-selector", fields] if fields else [])
    return json.loads(kubectl(*args).stdout)["items"]


def pod_log(kubectl: Callable, pod: dict) -> str:
    """The pod's current output, or "" where `kubectl logs` would fail (the pod gone, its container not
    started yet): of the container kubectl picks, the one its `kubectl.kubernetes.io/default-container`
    annotation names, else the first."""
    meta = pod["metadata"]
    read = getattr(kubectl, "read", None)
    if read is None:
        return kubectl("-n", meta["namespace"], "logs", meta["name"], check=False).stdout
    container = (meta.get("annotations") or {}).get("kubectl.kubernetes.io/default-container") \
        or pod["spec"]["containers"][0]["name"]
    code, data = read.raw(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log", {"container": container})
    return data.decode("utf-8", "replace") if code == 200 else ""


def conditions(kubectl: Callable, ns: str, name: str) -> dict[str, dict]:
    job = get(kubectl, ns, MPIJOBS, name) or {}
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}


def condition_statuses(kubectl: Callable, ns: str, name: str) -> dict[str, str]:
    """type -> status of the MPIJob's conditions ({} while it does not exist)."""
    return {t: c.get("status", "") for t, c in conditions(kubectl, ns, name).items()}


def wait_finished(kubectl: Callable, ns: str, name: str, timeout: float) -> str:
    """"Succeeded" or "Failed", whichever the MPIJob reaches first; after `timeout` s an
    AssertionError with its conditions and the namespace's pods."""
    deadline = time.monotonic() + timeout
    found: dict[str, str] = {}
    while time.monotonic() < deadline:
        found = condition_statuses(kubectl, ns, name)
        for outcome in ("Succeeded", "Failed"):
            if found.get(outcome) == "True":
                return outcome
        time.sleep(0.5)
    listing = kubectl("-n", ns, "get", "pods", "-o", "wide", check=False).stdout
    raise AssertionError(f"MPIJob {ns}/{name} not finished after {timeout}s: {found}\n{listing}")


def role_pods(kubectl: Callable, ns: str, name: str, role: str) -> list[dict]:
    """The pods of MPIJob `name` in `role` (launcher or worker), by the operator's labels."""
    return items(kubectl, ns, "pods", f"{JOB_NAME_LABEL}={name},{JOB_ROLE_LABEL}={role}")


def wait_condition(kubectl: Callable, ns: str, name: str, ctype: str, timeout: float = 90,
                   status: str = "True") -> dict:
    found: dict = {}

    def check() -> bool:
        found.update(conditions(kubectl, ns, name))
        return found.get(ctype, {}).get("status") == status

    wait_until(check, timeout, interval=0.3, what=f"MPIJob {ns}/{name} condition {ctype}={status}")
    return found[ctype]


def wait_event(kubectl: Callable, ns: str, name: str, reason: str, type_: str, timeout: float = 90) -> dict:
    """The first Event of `reason` and `type_` on MPIJob ns/name: the lasting record of a condition
    that may already have been cleared when a poll looks (the operator writes both in one plan)."""
    found: list[dict] = []

    def check() -> bool:
        found[:] = [e for e in events(kubectl, ns, name) if e["reason"] == reason and e["type"] == type_]
        return bool(found)

    wait_until(check, timeout, interval=0.3, what=f"a {type_} Event {reason} on MPIJob {ns}/{name}")
    return found[0]


def pods(kubectl: Callable, ns: str, name: str, role: str) -> list[dict]:
    return items(kubectl, ns, "pods", f"{JOB_NAME_LABEL}={name},{JOB_ROLE_LABEL}={role}")


def live(pods_: list[dict]) -> list[dict]:
    return [p for p in pods_ if p["status"].get("phase") in ("Pending", "Running")
            and not p["metadata"].get("deletionTimestamp")]


def events(kubectl: Callable, ns: str, name: str) -> list[dict]:
    return [e for e in items(kubectl, ns, "events")
            if e["involvedObject"].get("kind") == "MPIJob" and e["involvedObject"].get("name") == name]


def now() -> float:
    return time.monotonic()


def install_replica_index_policy(kubectl: Callable) -> None:
    """manifests/admission's policies, as `make deploy` installs them (cluster-wide, idempotent), and
    in effect: the API server applies a new policy a moment after it is created (its admission plugin
    watches policies), so a dry-run worker pod is made until it comes back with its replica-index."""
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "manifests" / "admission"))
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "replica-index-probe", "namespace": "default", "labels": {
                 OPERATOR_NAME_LABEL: OPERATOR_NAME, JOB_ROLE_LABEL: ROLE_WORKER,
                 "batch.kubernetes.io/job-completion-index": "2"}},
             "spec": {"containers": [{"name": "c", "image": "x"}]}}

    def effective() -> bool:
        r = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe), check=False)
        return r.returncode == 0 and json.loads(r.stdout)["metadata"]["labels"].get(REPLICA_INDEX_LABEL) == "2"

    wait_until(effective, timeout=60, what="the replica-index policy in effect")


class Watch:
    """`kubectl get ... -w -o json` in the background, from its start: every version the API server
    sends, read back with `versions()` once `stop()`ped (a watch misses no version, where polling
    can miss one that lasted less than its interval)."""

    def __init__(self, kubeconfig: str, *args: str, out: Path) -> None:
        self._out = out
        self._file = out.open("w")
        self._proc = subprocess.Popen([str(CLUSTER_DIR / "bin" / "kubectl"), f"--kubeconfig={kubeconfig}", "get",
                                       *args, "--watch", "-o", "json"], stdout=self._file, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._file.close()

    def versions(self) -> list[dict]:
        text, at, out = self._out.read_text(), 0, []
        decoder = json.JSONDecoder()
        while (at := _skip_space(text, at)) < len(text):
            try:
                obj, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                break  # the version being written
            out.append(obj)
        return out


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def release_held_pods(kubectl: Callable, ns: str) -> None:
    """The launcher pods of `ns` still held by the operator's finalizer (reconcilers/failure/hold.py),
    released: the test's operator stopped before its namespace is deleted, and a pod it held would keep
    the namespace Terminating for good (what an operator away does to its pods, docs/operations.md)."""
    r = kubectl("-n", ns, "get", "pods", "-o", "json", check=False)
    for pod in json.loads(r.stdout)["items"] if r.returncode == 0 else []:
        if ATTEMPT_RECORD_FINALIZER in (pod["metadata"].get("finalizers") or []):
            kubectl("-n", ns, "patch", "pod", pod["metadata"]["name"], "--type=strategic", "-p",
                    json.dumps({"metadata": {"$deleteFromPrimitiveList/finalizers": [ATTEMPT_RECORD_FINALIZER]}}),
                    check=False)
