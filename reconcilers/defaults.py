"""Defaults of the kubeflow.org/v2beta1 MPIJob, applied in memory before every plan.

They follow the Kubeflow MPI Operator's `SetDefaults_MPIJob`, with these documented differences:
- `runPolicy.cleanPodPolicy` defaults to `Running` (upstream's Go default is `None` although its
  doc comment says Running; docs/architecture.md section 1 makes both Running and All stop the
  workers when the job ends).
- `runPolicy.backoffLimit` defaults to 6 (the Job API's default, written out so it shows in plans).
- The launcher's `restartPolicy` defaults to `Never` (upstream: OnFailure): every failed attempt is
  then a failed pod the launcher Job counts against backoffLimit, which the status shows as
  Restarting.
- The worker's `restartPolicy` defaults to `Never`; it is only used by the Job backend (the
  StatefulSet backend's pods always use `Always`).

The CRD (manifests/crd/) persists the same defaults where it can, so they also show in
`kubectl get mpijob -o yaml`; applying them here too keeps the operator right with a CRD
installed without them. `with_defaults` never raises: fields of the wrong type are left alone for
validation to report.
"""

from __future__ import annotations

from typing import Any

from reconcilers.clone import clone

DEFAULT_SLOTS_PER_WORKER = 1
DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"
DEFAULT_LAUNCHER_CREATION_POLICY = "AtStartup"
DEFAULT_MPI_IMPLEMENTATION = "OpenMPI"
DEFAULT_CLEAN_POD_POLICY = "Running"
DEFAULT_BACKOFF_LIMIT = 6
DEFAULT_LAUNCHER_RESTART_POLICY = "Never"
DEFAULT_WORKER_RESTART_POLICY = "Never"

LAUNCHER = "Launcher"
WORKER = "Worker"


def _setdefault(d: Any, key: str, value: Any) -> None:
    if isinstance(d, dict) and d.get(key) is None:
        d[key] = value


def with_defaults(mpijob: Any) -> Any:
    """A deep copy of `mpijob` with the defaults filled in (a non-dict is returned as a copy)."""
    job = clone(mpijob)
    if not isinstance(job, dict):
        return job
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return job
    _setdefault(spec, "slotsPerWorker", DEFAULT_SLOTS_PER_WORKER)
    _setdefault(spec, "runLauncherAsWorker", False)
    _setdefault(spec, "sshAuthMountPath", DEFAULT_SSH_AUTH_MOUNT_PATH)
    _setdefault(spec, "launcherCreationPolicy", DEFAULT_LAUNCHER_CREATION_POLICY)
    _setdefault(spec, "mpiImplementation", DEFAULT_MPI_IMPLEMENTATION)
    _setdefault(spec, "runPolicy", {})
    rp = spec["runPolicy"]
    _setdefault(rp, "cleanPodPolicy", DEFAULT_CLEAN_POD_POLICY)
    _setdefault(rp, "backoffLimit", DEFAULT_BACKOFF_LIMIT)
    _setdefault(rp, "suspend", False)
    specs = spec.get("mpiReplicaSpecs")
    if isinstance(specs, dict):
        launcher = specs.get(LAUNCHER)
        _setdefault(launcher, "replicas", 1)
        _setdefault(launcher, "restartPolicy", DEFAULT_LAUNCHER_RESTART_POLICY)
        worker = specs.get(WORKER)
        _setdefault(worker, "replicas", 0)
        _setdefault(worker, "restartPolicy", DEFAULT_WORKER_RESTART_POLICY)
    return job
