"""Validation of an MPIJob beyond (and including) what the CRD's schema and CEL rules say.

The CRD may be installed without its schema rules (or an older one may be), so every rule it has is
repeated here, plus what it cannot express: the length of the children's names, volume name clashes.
`validate` returns every problem with its field path and a message saying what to change; it never
raises, whatever it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reconcilers import apilimits, defaults, names, netpol
from reconcilers.backend import BACKENDS as WORKER_BACKENDS
from reconcilers.failure import evidence
from reconcilers.gang import workload_gang
from reconcilers.names import BACKEND_ANNOTATION
from reconcilers.types import Config

MAX_DNS_LABEL = 63
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

CLEAN_POD_POLICIES = ("Running", "All", "None")
LAUNCHER_CREATION_POLICIES = ("AtStartup", "WaitForWorkersReady")
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
RESTART_POLICIES = ("Never", "OnFailure")
# The launcher also takes upstream's ExitCode: 1-127 fail the MPIJob at once, 128-255 are retried
# (reconcilers/failure/restartpolicy.py). Workers run sshd: an exit code says nothing of the ranks there.
LAUNCHER_RESTART_POLICIES = (*RESTART_POLICIES, "ExitCode")
REPLICA_TYPES = (defaults.LAUNCHER, defaults.WORKER)
RESERVED_VOLUMES = ("ssh-auth", "mpi-job-config")
# The Indexed Job API caps parallelism at 10^5; a StatefulSet this big is unreasonable too.
MAX_WORKERS = 100_000


@dataclass(frozen=True)
class FieldError:
    path: str  # e.g. "spec.mpiReplicaSpecs.Launcher.replicas"
    message: str  # what is wrong and how to fix it

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Checker:
    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def int_field(self, obj: dict, key: str, path: str, minimum: int, what: str) -> None:
        v = obj.get(key)
        if v is None:
            return
        if not _is_int(v):
            self.add(f"{path}.{key}", f"must be an integer ({what}), got {v!r}; write a whole number")
        elif v < minimum:
            self.add(f"{path}.{key}", f"must be >= {minimum} ({what}), got {v}; set it to {minimum} or more")

    def enum_field(self, obj: dict, key: str, path: str, allowed: tuple[str, ...]) -> None:
        v = obj.get(key)
        if v is not None and v not in allowed:
            self.add(f"{path}.{key}", f"unsupported value {v!r}; use one of {', '.join(allowed)}")

    def bool_field(self, obj: dict, key: str, path: str) -> None:
        v = obj.get(key)
        if v is not None and not isinstance(v, bool):
            self.add(f"{path}.{key}", f"must be true or false, got {v!r}")


def validate(mpijob: Any, config: Config | None = None) -> list[FieldError]:
    """Every problem of `mpijob` (after defaulting), as field errors; [] when it can be run. `config`
    gives the cluster domain, which the hostfile's length (and so the worker limit) depends on."""
    try:
        return _validate(defaults.with_defaults(mpijob), config or Config())
    except Exception as e:  # pragma: no cover - a last resort: validation must never raise
        return [FieldError("spec", f"cannot be read ({type(e).__name__}); check the manifest's structure")]


def _validate(job: Any, config: Config) -> list[FieldError]:
    c = _Checker()
    if not isinstance(job, dict):
        c.add("", f"an MPIJob must be an object, got {type(job).__name__}")
        return c.errors
    meta = job.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        c.add("metadata.name", "is required; give the MPIJob a name")
        name = None
    _validate_backend_annotation(c, meta)
    _validate_worker_loss_annotation(c, meta)
    spec = job.get("spec")
    if not isinstance(spec, dict):
        c.add("spec", "is required and must be an object with mpiReplicaSpecs.Launcher")
        return c.errors

    specs = spec.get("mpiReplicaSpecs")
    workers = 0
    if not isinstance(specs, dict):
        c.add("spec.mpiReplicaSpecs", "is required; add a Launcher (replicas: 1) and optionally a Worker")
    else:
        for key in specs:
            if key not in REPLICA_TYPES:
                c.add(f"spec.mpiReplicaSpecs.{key}", "unknown replica type; only Launcher and Worker exist")
        if specs.get(defaults.LAUNCHER) is None:
            c.add("spec.mpiReplicaSpecs.Launcher", "is required; add a Launcher with replicas: 1 and a template")
        for rtype in REPLICA_TYPES:
            rs = specs.get(rtype)
            if rs is None:
                continue
            path = f"spec.mpiReplicaSpecs.{rtype}"
            if not isinstance(rs, dict):
                c.add(path, f"must be an object with replicas, restartPolicy and template, got {rs!r}")
                continue
            replicas = rs.get("replicas")
            if not _is_int(replicas):
                c.add(f"{path}.replicas", f"must be an integer, got {replicas!r}")
            elif rtype == defaults.LAUNCHER and replicas != 1:
                c.add(f"{path}.replicas", f"must be 1 (one launcher runs mpirun), got {replicas}; set it to 1")
            elif rtype == defaults.WORKER:
                if replicas < 0:
                    c.add(f"{path}.replicas", f"must be >= 0, got {replicas}; set the number of workers")
                elif replicas > MAX_WORKERS:
                    c.add(f"{path}.replicas", f"must be <= {MAX_WORKERS}, got {replicas}; use fewer workers")
                else:
                    workers = replicas
            c.enum_field(rs, "restartPolicy", path,
                         LAUNCHER_RESTART_POLICIES if rtype == defaults.LAUNCHER else RESTART_POLICIES)
            _validate_template(c, rs.get("template"), f"{path}.template")

    c.int_field(spec, "slotsPerWorker", "spec", 1, "MPI slots per worker")
    c.bool_field(spec, "runLauncherAsWorker", "spec")
    mount = spec.get("sshAuthMountPath")
    if not isinstance(mount, str) or not mount.startswith("/") or mount.rstrip("/") == "":
        c.add("spec.sshAuthMountPath",
              f"must be an absolute directory path such as /root/.ssh or /home/mpiuser/.ssh, got {mount!r}")
    c.enum_field(spec, "launcherCreationPolicy", "spec", LAUNCHER_CREATION_POLICIES)
    c.enum_field(spec, "mpiImplementation", "spec", MPI_IMPLEMENTATIONS)

    rp = spec.get("runPolicy")
    if not isinstance(rp, dict):
        c.add("spec.runPolicy", f"must be an object, got {rp!r}")
    else:
        path = "spec.runPolicy"
        c.enum_field(rp, "cleanPodPolicy", path, CLEAN_POD_POLICIES)
        c.int_field(rp, "ttlSecondsAfterFinished", path, 0, "seconds")
        c.int_field(rp, "activeDeadlineSeconds", path, 1, "seconds")
        c.int_field(rp, "backoffLimit", path, 0, "retries of the launcher")
        c.bool_field(rp, "suspend", path)
        mb = rp.get("managedBy")
        if mb is not None and not isinstance(mb, str):
            c.add(f"{path}.managedBy", f"must be a string such as kubeflow.org/mpi-operator, got {mb!r}")
        sp = rp.get("schedulingPolicy")
        if sp is not None and not isinstance(sp, dict):
            c.add(f"{path}.schedulingPolicy", f"must be an object, got {sp!r}")

    for path, message in workload_gang.problems(job, config):
        c.add(path, message)
    for path, message in netpol.problems(job):
        c.add(path, message)
    if name is not None:
        _validate_name(c, name, workers)
        if workers and not any(e.path == "metadata.name" for e in c.errors):
            _validate_config_map_size(c, job, config, workers)
    return c.errors


def _validate_backend_annotation(c: _Checker, meta: Any) -> None:
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    value = ann.get(BACKEND_ANNOTATION) if isinstance(ann, dict) else None
    if value is not None and value not in WORKER_BACKENDS:
        c.add(f"metadata.annotations[{BACKEND_ANNOTATION}]",
              f"unsupported worker backend {value!r}; use one of {', '.join(WORKER_BACKENDS)}, or remove it "
              "to take the operator's --worker-backend")


def _validate_worker_loss_annotation(c: _Checker, meta: Any) -> None:
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    value = ann.get(evidence.WORKER_LOSS_ANNOTATION) if isinstance(ann, dict) else None
    if value is not None and value not in evidence.POLICIES:
        c.add(f"metadata.annotations[{evidence.WORKER_LOSS_ANNOTATION}]",
              f"unsupported worker-loss policy {value!r}; use {evidence.EVIDENCE} (an exit 0 after a worker's loss "
              f"is judged by the launcher's log) or {evidence.EXIT_CODE} (the launcher's exit code alone)")


def _validate_config_map_size(c: _Checker, job: dict, config: Config, workers: int) -> None:
    """The hostfile and discover_hosts.sh share one ConfigMap, whose data the API caps at 1 MiB."""
    spec = job["spec"]
    slots, impl = spec.get("slotsPerWorker"), spec.get("mpiImplementation")
    if not _is_int(slots) or impl not in MPI_IMPLEMENTATIONS:
        return  # reported above

    def fits(w: int) -> bool:
        return apilimits.config_map_bytes(names.job_name(job), names.job_namespace(job), config.cluster_domain,
                                          slots, impl, bool(spec.get("runLauncherAsWorker")), w) \
            <= apilimits.MAX_CONFIG_MAP_BYTES

    if not fits(workers):
        most = apilimits.max_workers(fits, workers)
        c.add(f"spec.mpiReplicaSpecs.{defaults.WORKER}.replicas",
              f"{workers} workers do not fit: their hostfile and discover_hosts.sh would exceed the "
              f"ConfigMap limit of {apilimits.MAX_CONFIG_MAP_BYTES} bytes (1 MiB); at most {most} workers fit for "
              "this MPIJob's name, namespace and slotsPerWorker; use that many or fewer")


def _validate_name(c: _Checker, name: str, workers: int) -> None:
    last = f"{name}-worker-{max(workers - 1, 0)}"
    longest = max([f"{name}-launcher", last], key=len)
    if not _DNS1035.match(name):
        c.add("metadata.name",
              f"{name!r} must be a DNS-1035 label (lower-case letters, digits and '-', starting with a "
              "letter, ending with a letter or digit): it names the headless Service; rename the MPIJob")
    elif len(longest) > MAX_DNS_LABEL:
        room = MAX_DNS_LABEL - (len(longest) - len(name))
        c.add("metadata.name",
              f"is too long: the pod hostname {longest!r} would have {len(longest)} characters (at most "
              f"{MAX_DNS_LABEL}); shorten the name to {max(room, 0)} characters or fewer, or use fewer workers")


def _validate_template(c: _Checker, template: Any, path: str) -> None:
    if not isinstance(template, dict):
        c.add(path, "is required: a pod template with spec.containers")
        return
    meta = template.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        c.add(f"{path}.metadata", f"must be an object, got {meta!r}")
    elif isinstance(meta, dict):
        for key in ("labels", "annotations"):
            m = meta.get(key)
            if m is not None and not (isinstance(m, dict) and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in m.items())):
                c.add(f"{path}.metadata.{key}", "must map strings to strings; quote numbers and booleans")
        apilimits.check_metadata(c.add, meta, f"{path}.metadata")
    spec = template.get("spec")
    if not isinstance(spec, dict):
        c.add(f"{path}.spec", "is required: a pod spec with at least one container")
        return
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        c.add(f"{path}.spec.containers", "must list at least one container (the first gets the MPI set-up)")
    else:
        for i, ct in enumerate(containers):
            cp = f"{path}.spec.containers[{i}]"
            if not isinstance(ct, dict):
                c.add(cp, f"must be an object with name and image, got {ct!r}")
                continue
            if not isinstance(ct.get("name"), str) or not ct.get("name"):
                c.add(f"{cp}.name", "is required; name the container")
            if not isinstance(ct.get("image"), str) or not ct.get("image"):
                c.add(f"{cp}.image", "is required; set the container image")
            for key in ("env", "volumeMounts", "command", "args"):
                if ct.get(key) is not None and not isinstance(ct[key], list):
                    c.add(f"{cp}.{key}", f"must be a list, got {ct[key]!r}")
            env = ct.get("env")
            if isinstance(env, list) and not all(isinstance(e, dict) and isinstance(e.get("name"), str)
                                                 for e in env):
                c.add(f"{cp}.env", "every entry must be an object with a name")
            mounts = ct.get("volumeMounts")
            if isinstance(mounts, list) and not all(isinstance(m, dict) for m in mounts):
                c.add(f"{cp}.volumeMounts", "every entry must be an object with name and mountPath")
    volumes = spec.get("volumes")
    if volumes is not None:
        if not isinstance(volumes, list) or not all(isinstance(v, dict) for v in volumes):
            c.add(f"{path}.spec.volumes", "must be a list of volume objects")
        else:
            for i, v in enumerate(volumes):
                if v.get("name") in RESERVED_VOLUMES:
                    c.add(f"{path}.spec.volumes[{i}].name",
                          f"{v['name']!r} is reserved for the operator's volumes "
                          f"({', '.join(RESERVED_VOLUMES)}); rename the volume")
    apilimits.check_pod_spec(c.add, spec, f"{path}.spec", RESERVED_VOLUMES)
    for key in ("nodeSelector",):
        m = spec.get(key)
        if m is not None and not isinstance(m, dict):
            c.add(f"{path}.spec.{key}", f"must be an object, got {m!r}")
    for key in ("tolerations", "initContainers"):
        m = spec.get(key)
        if m is not None and not isinstance(m, list):
            c.add(f"{path}.spec.{key}", f"must be a list, got {m!r}")
    dns = spec.get("dnsConfig")
    if dns is not None and (not isinstance(dns, dict) or not isinstance(dns.get("searches", []), list)):
        c.add(f"{path}.spec.dnsConfig", "must be an object whose searches is a list")
