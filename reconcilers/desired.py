"""The desired children of an MPIJob (docs/architecture.md section 1), for both worker backends.

Every builder takes the MPIJob *after* `defaults.with_defaults` and validation, and returns a complete
object (apiVersion, kind, metadata with labels and the controller ownerReference). Nothing here reads
a clock or does I/O. The worker and launcher objects carry the annotation TEMPLATE_HASH_ANNOTATION:
a hash of the pod template as rendered here, which `diff` compares instead of the API server's
defaulted copy of the template.
"""

from __future__ import annotations

import base64
import hashlib
import json

from reconcilers import discovery, names, namewait
from reconcilers.clone import clone
from reconcilers.defaults import LAUNCHER, WORKER
from reconcilers.failure import restartpolicy
from reconcilers.gang import podgroup, workload_gang
from reconcilers.types import Config, Obj, SSHKey

HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_PATH = f"{HOSTFILE_DIR}/hostfile"
DISCOVER_HOSTS = "discover_hosts.sh"
SSH_VOLUME = "ssh-auth"
CONFIG_VOLUME = "mpi-job-config"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
# A lost worker of the Job backend must be replaced, never fail the worker Job.
WORKER_JOB_BACKOFF_LIMIT = 2**31 - 1
# The largest activeDeadlineSeconds the Job controller can count: it computes
# `time.Duration(ads) * time.Second` in int64 nanoseconds, which wraps above this (292 years), and a
# wrapped, negative deadline fails the Job at once. A longer deadline is left to the MPIJob's own
# (reconcilers/outcome.py `deadline`), which stops the launcher when due (docs/architecture.md 3).
MAX_JOB_DEADLINE_S = (2**63 - 1) // 10**9
SSH_CONNECT_ARGS = "-o ConnectionAttempts=10"
# The pod's interface on the pod network (the CRI runtimes name it so). Hydra's proxies on the
# workers dial back to the launcher by its hostname unless told an interface, whose address they
# then use: a retried launcher's name is not in DNS for its first second or so, and a proxy that
# cannot resolve it fails the attempt (docs/architecture.md section 9).
POD_INTERFACE = "eth0"


def owner_reference(mpijob: Obj) -> Obj:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": names.job_name(mpijob),
        "uid": mpijob.get("metadata", {}).get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(mpijob: Obj, name: str, role: str | None = None) -> Obj:
    return {
        "name": name,
        "namespace": names.job_namespace(mpijob),
        "labels": names.job_labels(mpijob, role),
        "ownerReferences": [owner_reference(mpijob)],
    }


def _spec(mpijob: Obj) -> Obj:
    return mpijob["spec"]


def worker_replicas(mpijob: Obj) -> int:
    w = _spec(mpijob)["mpiReplicaSpecs"].get(WORKER)
    return int(w.get("replicas") or 0) if isinstance(w, dict) else 0


def template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


# -- hostfile -------------------------------------------------------------------------------------


def worker_fqdns(mpijob: Obj, config: Config) -> list[str]:
    """The DNS names worker pods get with either backend, in index order."""
    suffix = names.pod_fqdn(mpijob, "", config.cluster_domain)  # ".<job>.<ns>.svc[.<domain>]"
    prefix = names.worker_name(mpijob)
    return [f"{prefix}-{i}{suffix}" for i in range(worker_replicas(mpijob))]


def launcher_fqdn(mpijob: Obj, config: Config) -> str:
    return names.pod_fqdn(mpijob, names.launcher_name(mpijob), config.cluster_domain)


def launcher_host(mpijob: Obj, config: Config) -> str:
    """The launcher's name in the hostfile and discover_hosts.sh (runLauncherAsWorker): its FQDN,
    or for Hydra its bare hostname, the only name Hydra runs locally rather than by ssh
    (docs/architecture.md section 9; it resolves everywhere through the pods' DNS search path)."""
    if _spec(mpijob).get("mpiImplementation") in names.HYDRA_IMPLEMENTATIONS:
        return names.launcher_name(mpijob)
    return launcher_fqdn(mpijob, config)


def hostfile(mpijob: Obj, config: Config) -> str:
    """One line per host: `host slots=N` (Open MPI) or `host:N` (Intel MPI, MPICH); the launcher
    first when runLauncherAsWorker."""
    spec = _spec(mpijob)
    slots = spec["slotsPerWorker"]
    hosts = worker_fqdns(mpijob, config)
    if spec.get("runLauncherAsWorker"):
        hosts = [launcher_host(mpijob, config), *hosts]
    fmt = "{} slots={}" if spec["mpiImplementation"] == "OpenMPI" else "{}:{}"
    return "".join(fmt.format(h, slots) + "\n" for h in hosts)


def _hostname_index(hostname: str) -> tuple[int, str]:
    tail = hostname.rsplit("-", 1)[-1]
    return (int(tail), hostname) if tail.isdigit() else (1 << 62, hostname)


def pod_hostname(pod: Obj) -> str:
    """The hostname a pod got: spec.hostname (Job backend, launcher) or its name (StatefulSet)."""
    spec = pod.get("spec") or {}
    return spec.get("hostname") or (pod.get("metadata") or {}).get("name", "")


def worker_index(mpijob: Obj, pod: Obj) -> int | None:
    """The index of a worker pod of this MPIJob (`<job>-worker-<i>`), from its hostname."""
    prefix = names.worker_name(mpijob) + "-"
    host = pod_hostname(pod)
    tail = host[len(prefix):] if host.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def is_pod_active(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not (pod.get("metadata") or {}).get(
        "deletionTimestamp")


def is_pod_ready(pod: Obj) -> bool:
    """Running, not being deleted, and Ready: what a Job's `ready` and a StatefulSet's `readyReplicas`
    count, read from the pod itself."""
    return is_pod_active(pod) and any(c.get("type") == "Ready" and c.get("status") == "True"
                                      for c in (pod.get("status") or {}).get("conditions") or [])


def pod_role(pod: Obj) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(names.JOB_ROLE_LABEL)


def discover_hosts(mpijob: Obj, pods: list[Obj], config: Config) -> str:
    """A shell script printing the hosts of the workers that run now (for elastic Horovod)."""
    lines = ["#!/bin/sh"]
    if _spec(mpijob).get("runLauncherAsWorker"):
        lines.append(f"echo {launcher_host(mpijob, config)}")
    prefix = names.worker_name(mpijob) + "-"
    hostnames = {pod_hostname(p) for p in pods if pod_role(p) == names.ROLE_WORKER and is_pod_active(p)}
    count = worker_replicas(mpijob)
    suffix = names.pod_fqdn(mpijob, "", config.cluster_domain)
    for h in sorted(hostnames, key=_hostname_index):
        if h.startswith(prefix) and _hostname_index(h)[0] < count:
            lines.append(f"echo {h}{suffix}")
    return "\n".join(lines) + "\n"


# -- shared objects -------------------------------------------------------------------------------


def config_map(mpijob: Obj, config: Config, pods: list[Obj] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        # The backend its workers start with, kept for the MPIJob's life (reconcilers/backend.py).
        "metadata": {**_metadata(mpijob, names.config_map_name(mpijob)),
                     "annotations": {names.BACKEND_ANNOTATION: config.worker_backend}},
        "data": {"hostfile": hostfile(mpijob, config), DISCOVER_HOSTS: discover_hosts(mpijob, pods or [], config)},
    }


def secret(mpijob: Obj, key: SSHKey) -> Obj:
    def b64(s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(mpijob, names.secret_name(mpijob)),
        "type": "kubernetes.io/ssh-auth",
        "data": {"ssh-privatekey": b64(key.private_pem), "ssh-publickey": b64(key.public_openssh)},
    }


def service(mpijob: Obj, *, workers_leaving: bool = False) -> Obj:
    """The headless Service that gives the pods their names. `workers_leaving`: the worker Job is on its
    way out (children.workers_leaving); the Service then selects the launcher alone, so the old workers'
    names stop resolving at once rather than when each pod is gone (publishNotReadyAddresses keeps a
    terminating pod's record), and a launcher restarted meanwhile finds new workers or none
    (docs/architecture.md section 11, "Names while the workers are made afresh")."""
    selector = {names.JOB_NAME_LABEL: names.job_name(mpijob)}
    if workers_leaving:
        selector[names.JOB_ROLE_LABEL] = names.ROLE_LAUNCHER
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(mpijob, names.service_name(mpijob)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector,
        },
    }


# -- pod templates --------------------------------------------------------------------------------


def _ssh_volume(mpijob: Obj) -> Obj:
    path = _spec(mpijob)["sshAuthMountPath"]
    vol: Obj = {
        "secretName": names.secret_name(mpijob),
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa"},
            {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"},
        ],
    }
    # As upstream: 0600 where sshd runs as root; otherwise the default mode, readable by a non-root
    # user (the files are owned by root, and the image's sshd must not insist on 0600).
    if path.rstrip("/") == "/root/.ssh":
        vol["defaultMode"] = 0o600
    return {"name": SSH_VOLUME, "secret": vol}


def _config_volume(mpijob: Obj) -> Obj:
    return {
        "name": CONFIG_VOLUME,
        "configMap": {
            "name": names.config_map_name(mpijob),
            "items": [
                {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                {"key": DISCOVER_HOSTS, "path": DISCOVER_HOSTS, "mode": 0o555},
            ],
        },
    }


def _list_field(obj: Obj, key: str) -> list:
    """obj[key] as a list to append to; an explicit null (`volumes: null`) counts as empty."""
    if obj.get(key) is None:
        obj[key] = []
    return obj[key]


def _add_env(container: Obj, env: list[tuple[str, str]]) -> None:
    """Adds variables the user did not set (a user's own value wins)."""
    existing = _list_field(container, "env")
    have = {e.get("name") for e in existing if isinstance(e, dict)}
    for name, value in env:
        if name not in have:
            existing.append({"name": name, "value": value})


def _add_mount(container: Obj, name: str, path: str) -> None:
    mounts = _list_field(container, "volumeMounts")
    if not any(isinstance(m, dict) and m.get("name") == name for m in mounts):
        mounts.append({"name": name, "mountPath": path})


def _add_volume(pod_spec: Obj, volume: Obj) -> None:
    volumes = _list_field(pod_spec, "volumes")
    if not any(isinstance(v, dict) and v.get("name") == volume["name"] for v in volumes):
        volumes.append(volume)


def _base_template(mpijob: Obj, config: Config, rtype: str, role: str) -> tuple[Obj, Obj]:
    rs = _spec(mpijob)["mpiReplicaSpecs"][rtype]
    template = clone(rs.get("template") or {})
    meta = template.setdefault("metadata", {}) or {}
    template["metadata"] = meta
    meta.pop("name", None)
    meta.pop("namespace", None)
    meta["labels"] = {**(meta.get("labels") or {}), **names.job_labels(mpijob, role)}
    spec = template.setdefault("spec", {})
    dns = spec.setdefault("dnsConfig", {}) or {}
    spec["dnsConfig"] = dns
    search = f"{names.service_name(mpijob)}.{names.job_namespace(mpijob)}.svc." + (
        config.cluster_domain.strip(".") or DEFAULT_CLUSTER_DOMAIN)
    searches = _list_field(dns, "searches")
    if search not in searches:
        searches.append(search)
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    _add_volume(spec, _ssh_volume(mpijob))
    container = spec["containers"][0]
    _add_mount(container, SSH_VOLUME, _spec(mpijob)["sshAuthMountPath"])
    podgroup.decorate_template(template, mpijob, config)
    workload_gang.decorate_template(template, mpijob, config)
    return template, container


def worker_template(mpijob: Obj, config: Config) -> Obj:
    template, container = _base_template(mpijob, config, WORKER, names.ROLE_WORKER)
    spec = template["spec"]
    if config.worker_backend == "statefulset":
        spec["restartPolicy"] = "Always"  # the only policy a StatefulSet allows
    else:
        spec["restartPolicy"] = _spec(mpijob)["mpiReplicaSpecs"][WORKER].get("restartPolicy") or "Never"
        spec["subdomain"] = names.service_name(mpijob)  # the Job controller sets hostname <job>-<index>
    if not container.get("command") and not container.get("args"):
        container["command"] = ["/usr/sbin/sshd", "-De"]
    _add_env(container, [("K_MPI_JOB_ROLE", names.ROLE_WORKER)])
    if _spec(mpijob).get("runLauncherAsWorker"):
        # rank 0 is the launcher: the admission policy numbers the workers from 1
        template["metadata"]["annotations"] = {**(template["metadata"].get("annotations") or {}),
                                               names.REPLICA_INDEX_OFFSET_ANNOTATION: "1"}
    return template


def pod_network(mpijob: Obj) -> bool:
    """Launcher and workers on the pod network (neither template asks for hostNetwork)."""
    specs = _spec(mpijob)["mpiReplicaSpecs"]
    return not any(((rs.get("template") or {}).get("spec") or {}).get("hostNetwork")
                   for rs in specs.values() if isinstance(rs, dict))


def launcher_env(mpijob: Obj) -> list[tuple[str, str]]:
    spec = _spec(mpijob)
    slots = str(spec["slotsPerWorker"])
    env = [("K_MPI_JOB_ROLE", names.ROLE_LAUNCHER)]
    impl = spec["mpiImplementation"]
    if impl == "OpenMPI":
        env += [
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
            ("OMPI_MCA_orte_default_hostfile", HOSTFILE_PATH),
            ("OMPI_MCA_plm_rsh_args", SSH_CONNECT_ARGS),
            ("OMPI_MCA_orte_set_default_slots", slots),
            # Open MPI 5 runs PRRTE, which ignores OMPI_MCA_orte_* (upstream issue #842). With the
            # launcher in the hostfile, PRRTE must not keep FQDNs or it ssh-es to itself.
            ("PRTE_MCA_prte_default_hostfile", HOSTFILE_PATH),
            ("PRTE_MCA_prte_keep_fqdn_hostnames", "false" if spec.get("runLauncherAsWorker") else "true"),
            ("PRTE_MCA_prte_set_default_slots", slots),
            ("PRTE_MCA_plm_ssh_args", SSH_CONNECT_ARGS),
        ]
    elif impl == "Intel":
        env += [
            ("I_MPI_HYDRA_HOST_FILE", HOSTFILE_PATH),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", SSH_CONNECT_ARGS),
            ("I_MPI_PERHOST", slots),
        ]
        if pod_network(mpijob):
            env.append(("I_MPI_HYDRA_IFACE", POD_INTERFACE))
    else:  # MPICH
        # Hydra reads HYDRA_LAUNCHER_EXTRA_ARGS; upstream's HYDRA_LAUNCH_EXTRA_ARGS is read by no
        # MPICH (kept, for manifests and tools that look for it). docs/architecture.md section 9.
        env += [("HYDRA_HOST_FILE", HOSTFILE_PATH), ("HYDRA_LAUNCHER_EXTRA_ARGS", SSH_CONNECT_ARGS),
                ("HYDRA_LAUNCH_EXTRA_ARGS", SSH_CONNECT_ARGS)]
        if pod_network(mpijob):
            env.append(("HYDRA_IFACE", POD_INTERFACE))
    if not spec.get("runLauncherAsWorker"):
        # The launcher needs no GPU: hide the node's GPUs from it (as upstream does).
        env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    return env


def launcher_template(mpijob: Obj, config: Config) -> Obj:
    template, container = _base_template(mpijob, config, LAUNCHER, names.ROLE_LAUNCHER)
    spec = template["spec"]
    spec["hostname"] = names.launcher_name(mpijob)
    spec["subdomain"] = names.service_name(mpijob)
    # In place where the cluster can, else a new pod per retry; ExitCode as a podFailurePolicy
    # (reconcilers/failure/restartpolicy.py, docs/architecture.md section 11).
    pod_policy, restart, _ = restartpolicy.launcher_pod(mpijob, config)
    spec["restartPolicy"] = pod_policy
    if not any(k in container for k in restart):  # the user's own restart fields stay as written
        container.update(restart)
    _add_env(container, launcher_env(mpijob))
    if _spec(mpijob).get("runLauncherAsWorker"):
        template["metadata"]["labels"][names.REPLICA_INDEX_LABEL] = "0"  # as upstream: a rank only then
    _add_volume(spec, _config_volume(mpijob))
    _add_mount(container, CONFIG_VOLUME, HOSTFILE_DIR)
    # mpirun starts only once every host of the hostfile resolves (docs/architecture.md 4.1); an elastic
    # launcher starts with the workers there are, and discovers the rest itself (section 9.2)
    if not discovery.is_elastic(mpijob):
        namewait.add_to(spec, config.launcher_names_wait_s, CONFIG_VOLUME, HOSTFILE_DIR)
    if not any(name == names.ATTEMPT_RECORD_FEATURE for name, _ in config.features_off):
        # held until its end is recorded (reconcilers/failure/hold.py); the Job controller copies a
        # template's finalizers onto the pods it makes
        meta = template["metadata"]
        held = names.ATTEMPT_RECORD_FINALIZER
        meta["finalizers"] = [*(f for f in meta.get("finalizers") or [] if f != held), held]
    return template


# -- workers and launcher -------------------------------------------------------------------------


def _with_hash(meta: Obj, template: Obj) -> Obj:
    meta["annotations"] = {names.TEMPLATE_HASH_ANNOTATION: template_hash(template)}
    return meta


def workers(mpijob: Obj, config: Config, *, running: bool = True) -> Obj:
    """StatefulSet or Indexed Job `<name>-worker`; `running=False` gives the stopped form
    (replicas 0, or the Job suspended)."""
    count = worker_replicas(mpijob)
    template = worker_template(mpijob, config)
    meta = _with_hash(_metadata(mpijob, names.worker_name(mpijob), names.ROLE_WORKER), template)
    if config.worker_backend == "statefulset":
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta,
            "spec": {
                "replicas": count if running else 0,
                "serviceName": names.service_name(mpijob),
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": names.job_labels(mpijob, names.ROLE_WORKER)},
                "template": template,
            },
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimit": WORKER_JOB_BACKOFF_LIMIT,
            # one pod per index at a time: a replacement waits until the old pod is gone, so one
            # DNS name never points at two pods
            "podReplacementPolicy": "Failed",
            "suspend": not running,
            "template": template,
        },
    }


def launcher(mpijob: Obj, config: Config, *, running: bool = True) -> Obj:
    """The launcher Job `<name>-launcher` (suspended when `running=False`). runPolicy's
    ttlSecondsAfterFinished is *not* copied: the operator deletes the whole MPIJob when it runs out."""
    template = launcher_template(mpijob, config)
    rp = _spec(mpijob)["runPolicy"]
    pod_policy, _, failure_policy = restartpolicy.launcher_pod(mpijob, config)
    spec: Obj = {
        # The operator counts the retries (reconcilers/failure/retries.py): the Job's own limit is a net under it.
        "backoffLimit": restartpolicy.job_backoff_limit(restartpolicy.backoff_limit(mpijob), 0, pod_policy),
        "podReplacementPolicy": "Failed",
        "suspend": not running,
        "template": template,
    }
    if failure_policy is not None:
        spec["podFailurePolicy"] = failure_policy
    ads = rp.get("activeDeadlineSeconds")
    if ads is not None and ads <= MAX_JOB_DEADLINE_S:
        spec["activeDeadlineSeconds"] = ads
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _with_hash(_metadata(mpijob, names.launcher_name(mpijob), names.ROLE_LAUNCHER), template),
        "spec": spec,
    }
