"""Issue 50 item 9 (`pods_create`), on the real API server: the ClusterRole's pods create (there for the
takeover's lost bare worker, docs/architecture.md section 6.3) held by manifests/rbac/bare_worker_policy.yaml
to exactly the bare worker the operator makes for the MPIJob that controls it. As the operator's
ServiceAccount (operator_kubeconfig applies manifests/rbac), in a namespace holding an MPIJob, a pod
labelled and owned like that MPIJob's bare worker is refused, with a message that says why, when it is
privileged, runs as another ServiceAccount, mounts a hostPath or picks its node; the exact bare worker
reconcilers/takeover.py renders is admitted. (e2e/test_takeover.py makes one for real, on the real node.)

No pod is run: every create is a server-side dry run, which admission policies judge as any create."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from reconcilers import defaults, takeover
from reconcilers.types import Config
from testsupport.builders import mpijob
from testsupport.kubectl import get
from testsupport.paths import CLUSTER_DIR
from testsupport.waiting import wait_until

pytestmark = pytest.mark.cluster

POLICY = "mpi-operator-bare-workers"
WORKER_SA = "mpi-worker"


def _as_operator(operator_kubeconfig: str, namespace: str, pod: dict) -> subprocess.CompletedProcess:
    """A server-side dry run of creating `pod`, as the operator's ServiceAccount: admission policies
    judge it as any create, and nothing runs, should a policy be missing (on main, say)."""
    args = [str(CLUSTER_DIR / "bin" / "kubectl"), f"--kubeconfig={operator_kubeconfig}", "-n", namespace,
            "create", "-f", "-", "--dry-run=server"]
    return subprocess.run(args, input=json.dumps(pod), capture_output=True, text=True, timeout=60)


def _job_with_a_hardened_worker(name: str) -> dict:
    """An MPIJob whose Worker template sets what the policy compares, in the forms the API server then
    fills in (a Secret volume without defaultMode, an env var from a fieldRef without apiVersion), so
    that the exact bare worker is admitted only if the policy tolerates the server's defaults."""
    job = mpijob(name, workers=2)
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["serviceAccountName"] = WORKER_SA
    spec["securityContext"] = {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}
    spec["volumes"] = [{"name": "scratch", "emptyDir": {}}, {"name": "creds", "secret": {"secretName": "creds"}}]
    c = spec["containers"][0]
    c["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    c["env"] = [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]
    c["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    spec["nodeSelector"] = {"no-such-node": "true"}  # never scheduled should a dry run ever not be one
    return job


def _bare_worker(stored: dict, index: int) -> dict:
    """The pod the takeover creates for worker `index` of the MPIJob as the API server stores it."""
    ctx = SimpleNamespace(job=defaults.with_defaults(copy.deepcopy(stored)), config=Config())
    return takeover.bare_worker(ctx, index)  # type: ignore[arg-type]


def _host_path(spec: dict) -> None:
    spec["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    spec["containers"][0]["volumeMounts"].append({"name": "root", "mountPath": "/host"})


# (what the pod asks for beyond MPIJob hard's bare worker, the change, what the refusal says)
REFUSED: list[tuple[str, Callable[[dict], object], str]] = [
    # a ServiceAccount that exists: the ServiceAccount admission plugin refuses a missing one first
    ("another ServiceAccount", lambda s: s.update(serviceAccountName="powerful"),
     "runs as ServiceAccount powerful, MPIJob hard's Worker template as mpi-worker"),
    ("a hostPath of its own", _host_path, "volume(s) root are not in MPIJob hard's Worker template"),
    ("a node of its choice", lambda s: s.update(nodeName="control-plane"),
     "nodeName differ(s) from MPIJob hard's Worker template"),
    ("a node by label", lambda s: s.update(nodeSelector={"kubernetes.io/hostname": "control-plane"}),
     "nodeSelector differ(s) from MPIJob hard's Worker template"),
    ("the host's PID namespace", lambda s: s.update(hostPID=True), "hostPID differ(s)"),
    ("a Secret the template does not read", lambda s: s["volumes"][1]["secret"].update(secretName="someone-elses"),
     "volume(s) creds are not in MPIJob hard's Worker template"),
    ("an image of its own", lambda s: s["containers"][0].update(image="evil.example/miner:1"),
     "'s container(s) "),
    ("the pod's security context", lambda s: s.update(securityContext={"runAsUser": 0}),
     "securityContext differs from MPIJob hard's Worker template"),
]


def _refused(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0, f"admitted: {r.stdout}"
    assert POLICY in r.stderr and "Forbidden" in r.stderr, r.stderr
    return r.stderr


def test_pods_create_the_operator_may_create_only_the_bare_worker_its_mpijob_makes(
        kubectl, operator_kubeconfig, namespace):
    n = ("-n", namespace)
    for sa in (WORKER_SA, "powerful"):
        kubectl(*n, "create", "serviceaccount", sa)
    kubectl(*n, "create", "secret", "generic", "creds", "--from-literal=token=t")
    kubectl(*n, "apply", "-f", "-", input=json.dumps(_job_with_a_hardened_worker("hard")))
    stored = get(kubectl, namespace, "mpijob", "hard")
    exact = _bare_worker(stored, 1)

    privileged = copy.deepcopy(exact)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}

    # (a) a privileged container: refused once the policy is in force (it takes a moment to load, and
    # its params, the namespace's MPIJobs, to be seen); on main's manifests it is admitted
    def refused_privileged() -> str | None:
        r = _as_operator(operator_kubeconfig, namespace, privileged)
        return r.stderr if r.returncode != 0 and POLICY in r.stderr else None

    why = wait_until(refused_privileged, 30, interval=0.5, what="the bare-worker policy in force")
    assert "hard-worker-1's container(s) " in why and "differ from MPIJob hard's Worker template" in why, why
    assert "privileged" in why, why

    # (b) another ServiceAccount, (c) a hostPath or a node of its choice, and the rest the policy holds
    for what, change, says in REFUSED:
        pod = copy.deepcopy(exact)
        change(pod["spec"])
        why = _refused(_as_operator(operator_kubeconfig, namespace, pod))
        assert says in why, (what, why)
    # the MPIJob's name with another uid (an MPIJob of that name deleted and made again)
    stale = copy.deepcopy(exact)
    stale["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-0000-0000-000000000000"
    assert "that MPIJob has uid " + stored["metadata"]["uid"] in _refused(
        _as_operator(operator_kubeconfig, namespace, stale))

    # The exact bare worker the takeover makes is admitted, and so is worker 0.
    for pod in (exact, _bare_worker(stored, 0)):
        r = _as_operator(operator_kubeconfig, namespace, pod)
        assert r.returncode == 0, r.stderr

    # Only the operator's ServiceAccount is held: the namespace's admin may create the privileged one.
    kubectl(*n, "create", "-f", "-", "--dry-run=server", input=json.dumps(privileged))


def test_pods_create_refused_in_a_namespace_without_mpijobs(kubectl, operator_kubeconfig, namespace):
    """No MPIJob in the namespace, no bare worker to make: whatever the pod says, it is refused."""
    kubectl("-n", namespace, "create", "serviceaccount", WORKER_SA)
    kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(_job_with_a_hardened_worker("gone")))
    pod = _bare_worker(get(kubectl, namespace, "mpijob", "gone"), 0)
    kubectl("-n", namespace, "delete", "mpijobs.kubeflow.org", "gone")

    def refused() -> str | None:
        r = _as_operator(operator_kubeconfig, namespace, pod)
        return r.stderr if r.returncode != 0 and POLICY in r.stderr else None

    why = wait_until(refused, 30, interval=0.5, what="refused without an MPIJob")
    assert "no params found" in why, why
    # Only pods labelled as an MPIJob's worker are looked at: any other pod of a namespace without an
    # MPIJob, anyone's, the operator's ServiceAccount's aside, is none of this policy's business (the
    # params are looked up before the policy's matchConditions: an unnarrowed binding refused them all).
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "labels": {"app": "x"}},
             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    # nor a worker pod of a Job or a StatefulSet (their controllers label them), such as an MPIJob's
    # worker Job makes (tests/integration/test_replica_index.py makes them without an MPIJob)
    of_a_job = copy.deepcopy(pod)
    of_a_job["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = "0"
    for p in (plain, of_a_job):
        r = kubectl("-n", namespace, "create", "-f", "-", "--dry-run=server", input=json.dumps(p), check=False)
        assert r.returncode == 0, r.stderr
    # ...which is why the operator's ServiceAccount may not put such a label on the pods it creates
    r = _as_operator(operator_kubeconfig, namespace, of_a_job)
    assert r.returncode != 0 and "may create only bare worker pods" in r.stderr, r.stderr
    assert "batch.kubernetes.io/job-completion-index, a label the Job and StatefulSet controllers" in r.stderr
