"""Names and labels of an MPIJob's children (docs/architecture.md section 1).

For an MPIJob `pi` in namespace `ns`: Service `pi`, ConfigMap `pi-config`, Secret `pi-ssh`,
launcher Job `pi-launcher`, workers (StatefulSet or Indexed Job) `pi-worker`, whose pods get the
hostnames `pi-worker-<i>` and the DNS names `pi-worker-<i>.pi.ns.svc[.<cluster domain>]`, and the
NetworkPolicy `pi-mpijob-isolation`.
"""

from __future__ import annotations

from typing import Any

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
OPERATOR_NAME = "mpi-operator"
# Upstream's rank order label (Kueue's topology-aware scheduling reads it): worker i gets i, or i+1
# with runLauncherAsWorker; the launcher 0 only with runLauncherAsWorker. A worker's value comes from
# manifests/admission/ (docs/architecture.md section 6.4), told the offset by this template annotation.
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
REPLICA_INDEX_OFFSET_ANNOTATION = "mpijob-operator.dev/replica-index-offset"

API_GROUP = "kubeflow.org"
API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"

ROLE_LAUNCHER = "launcher"
ROLE_WORKER = "worker"

# Annotation on the worker/launcher objects: a hash of the pod template the operator rendered, so
# that template changes are detected without comparing against API-server-defaulted templates.
TEMPLATE_HASH_ANNOTATION = "mpijob-operator.dev/template-hash"
# On an MPIJob: the worker backend for it ("job" or "statefulset"), over --worker-backend. On its
# ConfigMap: the backend its workers were started with (reconcilers/backend.py).
BACKEND_ANNOTATION = "mpijob-operator.dev/worker-backend"
# On an MPIJob: "false" leaves it without its NetworkPolicy (reconcilers/netpol.py), "true" (the
# default) isolates it while the operator's --network-isolation is on.
NETWORK_ISOLATION_ANNOTATION = "mpijob-operator.dev/network-isolation"
# On an MPIJob: a JSON list of NetworkPolicy peers (podSelector, namespaceSelector, ipBlock) admitted
# besides the MPIJob's own pods, e.g. a notebook namespace (reconcilers/netpol.py).
NETWORK_INGRESS_FROM_ANNOTATION = "mpijob-operator.dev/network-ingress-from"


# MPIs whose process manager is Hydra (MPICH, Intel MPI): it runs a host's proxy by fork only when
# the hostfile names that host exactly as gethostname() does, and by ssh otherwise (even for a name
# that resolves to its own address). With runLauncherAsWorker the launcher, which runs no sshd, is
# therefore written as its bare hostname (docs/architecture.md section 9).
HYDRA_IMPLEMENTATIONS = frozenset({"Intel", "MPICH"})


def _meta(job: Any) -> dict:
    if isinstance(job, dict) and isinstance(job.get("metadata"), dict):
        return job["metadata"]
    return {}


def job_name(job: Any) -> str:
    name = _meta(job).get("name")
    return name if isinstance(name, str) else ""


def job_namespace(job: Any) -> str:
    ns = _meta(job).get("namespace")
    return ns if isinstance(ns, str) and ns else "default"


def service_name(job: Any) -> str:
    return job_name(job)


def config_map_name(job: Any) -> str:
    return f"{job_name(job)}-config"


def secret_name(job: Any) -> str:
    return f"{job_name(job)}-ssh"


def launcher_name(job: Any) -> str:
    return f"{job_name(job)}-launcher"


def worker_name(job: Any) -> str:
    return f"{job_name(job)}-worker"


def worker_hostname(job: Any, index: int) -> str:
    return f"{worker_name(job)}-{index}"


def pod_fqdn(job: Any, hostname: str, cluster_domain: str = "") -> str:
    """`<hostname>.<job>.<ns>.svc[.<cluster_domain>]`: the name both worker backends give a pod."""
    fqdn = f"{hostname}.{service_name(job)}.{job_namespace(job)}.svc"
    domain = cluster_domain.strip(".") if cluster_domain else ""
    return f"{fqdn}.{domain}" if domain else fqdn


# The MPIJob's NetworkPolicy (reconcilers/netpol.py) is this operator's own addition, not a child
# upstream makes, so its name must be one that users are unlikely to hold already: a policy of
# theirs named like the MPIJob once failed a running MPIJob (docs/architecture.md section 10).
NETWORK_POLICY_SUFFIX = "-mpijob-isolation"


def network_policy_name(job: Any) -> str:
    return f"{job_name(job)}{NETWORK_POLICY_SUFFIX}"


def legacy_network_policy_name(job: Any) -> str:
    """The name versions before the suffix gave the policy: the MPIJob's own. Replaced once seen, and
    only when this MPIJob controls it (reconcilers/children.py network_policy)."""
    return job_name(job)


def child_names(mpijob: Any) -> dict[str, str]:
    """The names of every child, keyed like the fields of `types.Observed`."""
    return {
        "service": service_name(mpijob),
        "config_map": config_map_name(mpijob),
        "secret": secret_name(mpijob),
        "launcher": launcher_name(mpijob),
        "workers": worker_name(mpijob),
    }


def job_labels(job: Any, role: str | None = None) -> dict[str, str]:
    """Labels the operator puts on a child (and its pod template): job name, operator, role."""
    labels = {JOB_NAME_LABEL: job_name(job), OPERATOR_NAME_LABEL: OPERATOR_NAME}
    if role:
        labels[JOB_ROLE_LABEL] = role
    return labels


def controller_ref(obj: Any) -> dict | None:
    """The controller ownerReference of `obj` that points at an MPIJob, or None."""
    refs = _meta(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if (
            isinstance(ref, dict)
            and ref.get("controller") is True
            and ref.get("kind") == KIND
            and isinstance(ref.get("apiVersion"), str)
            and ref["apiVersion"].split("/")[0] == API_GROUP
            and isinstance(ref.get("name"), str)
        ):
            return ref
    return None


def owner_key(obj: Any) -> str | None:
    """"ns/name" of the MPIJob that controls `obj` (a controller ownerReference of kind MPIJob,
    apiVersion kubeflow.org/*), or None. The namespace is the object's own: owners are namespaced
    like their dependents."""
    ref = controller_ref(obj)
    if ref is None:
        return None
    ns = _meta(obj).get("namespace")
    ns = ns if isinstance(ns, str) and ns else "default"
    return f"{ns}/{ref['name']}"


def is_controlled_by(obj: Any, mpijob: Any) -> bool:
    """True when `obj`'s controller ownerReference names this MPIJob (and, if both have one, its uid)."""
    ref = controller_ref(obj)
    if ref is None or ref.get("name") != job_name(mpijob):
        return False
    obj_ns = _meta(obj).get("namespace")
    if isinstance(obj_ns, str) and obj_ns and obj_ns != job_namespace(mpijob):
        return False
    uid = _meta(mpijob).get("uid")
    return not (uid and ref.get("uid") and ref["uid"] != uid)

# Held on every launcher pod until its end is recorded (reconcilers/failure/hold.py); the feature that
# needs `patch pods` to release it (client/permissions.py): without that grant no pod carries it.
ATTEMPT_RECORD_FINALIZER = "mpijob-operator.dev/attempt-record"
ATTEMPT_RECORD_FEATURE = "attempt-record"
