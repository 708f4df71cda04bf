"""Plain data passed into and out of the pure reconcilers.

Objects are dicts shaped exactly as the API server sends them (camelCase keys).
Nothing here does I/O; the controller builds `Observed` from its caches and
applies the `Plan` it gets back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from reconcilers.evidence import LauncherReport

Obj = dict[str, Any]

WorkerBackend = Literal["job", "statefulset"]


@dataclass(frozen=True)
class Config:
    """Operator configuration that shapes the desired objects."""

    worker_backend: WorkerBackend = "job"
    # Appended to every pod DNS name (`<pod>.<job>.<ns>.svc.<cluster_domain>`) when set.
    cluster_domain: str = ""
    # The value of runPolicy.managedBy that this operator acts on (unset also means us).
    controller_name: str = "kubeflow.org/mpi-operator"
    # --gang-scheduling: "" (off), "volcano", "workload" (Kubernetes' Workload API,
    # reconcilers/gang/workload_gang.py), or the schedulerName of a scheduler-plugins Coscheduling
    # scheduler (reconcilers/gang/podgroup.py).
    gang_scheduler: str = ""
    # Why the gang's API cannot be used (the cluster does not serve it), found once at start-up;
    # "" when it can. Every MPIJob then says so instead of starting without its gang.
    gang_unavailable: str = ""
    # Why no MPIJob may start: the operator's RBAC lacks a grant that running one needs (found once at
    # start-up, controller/access.py); "" when it has them all. Each MPIJob then says so, Blocked.
    permissions_missing: str = ""
    # Features turned off at start-up because a grant of theirs is missing (client/permissions.py FEATURES):
    # (feature name, what an MPIJob it touches is told). reconcilers/access.py.
    features_off: tuple[tuple[str, str], ...] = ()
    # --network-isolation: each MPIJob gets a NetworkPolicy that admits only its own pods (and the
    # peers its annotation names; reconcilers/netpol.py). Off: no policy is made, none is watched.
    network_isolation: bool = True
    # The API server admits a container's own restartPolicy and restartPolicyRules (Kubernetes >=
    # 1.34; found once at start-up): a failed launcher can then restart in place (restartpolicy.py).
    container_restart_rules: bool = False
    # --launcher-restart: "auto" and "in-place" (in place with both backends), "new-pod" (never in
    # place).
    launcher_restart: str = "auto"
    # --launcher-names-wait: seconds the launcher's init container waits for its hostfile's names to
    # resolve before it fails (reconcilers/namewait.py); 0: no init container.
    launcher_names_wait_s: int = 300


@dataclass(frozen=True)
class SSHKey:
    private_pem: str  # PEM, as written to the Secret's `ssh-privatekey`
    public_openssh: str  # one authorized_keys line, as written to `ssh-publickey`


@dataclass
class Observed:
    """What the informer caches hold of one MPIJob's children (None: not found)."""

    service: Obj | None = None
    config_map: Obj | None = None
    secret: Obj | None = None
    launcher: Obj | None = None  # batch/v1 Job `<name>-launcher`
    workers: Obj | None = None  # apps/v1 StatefulSet or batch/v1 Job `<name>-worker`
    # When both kinds exist under the worker name: the StatefulSet (`workers` is then the Job).
    other_workers: Obj | None = None
    pods: list[Obj] = field(default_factory=list)  # pods labelled with this job's name
    pod_group: Obj | None = None  # the PodGroup `<name>` (only with gang scheduling)
    workload: Obj | None = None  # the scheduling.k8s.io Workload `<name>` (--gang-scheduling=workload)
    # the kueue.x-k8s.io Workload Kueue made for this MPIJob (only when the cluster serves Kueue's API):
    # why Kueue keeps it suspended (reconcilers/explain/kueue.py)
    kueue_workload: Obj | None = None
    # the NetworkPolicy `<name>-mpijob-isolation` (only with --network-isolation; names.network_policy_name)
    network_policy: Obj | None = None
    # the NetworkPolicy `<name>`, as versions before that name called it: replaced if this MPIJob controls it
    legacy_network_policy: Obj | None = None


@dataclass(frozen=True)
class Ref:
    """Identifies one object: `api_version` like "v1" or "batch/v1", `kind` like "Job"."""

    api_version: str
    kind: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Create:
    obj: Obj  # complete object, apiVersion/kind/metadata included


@dataclass(frozen=True)
class Patch:
    ref: Ref
    # JSON merge patch (RFC 7386) of only the fields the operator owns that differ.
    patch: Obj
    # Why, for logs and Events ("drift: spec.replicas 3 != 2", "suspend workers").
    reason: str = ""
    # A strategic merge patch (built-in kinds only): to remove one finalizer from a list that another
    # controller edits too (`$deleteFromPrimitiveList`, reconcilers/failure/hold.py).
    strategic: bool = False


@dataclass(frozen=True)
class Delete:
    ref: Ref
    # "Background" lets the garbage collector remove dependents (pods of a Job).
    propagation: str = "Background"
    # Precondition: only delete this exact object (guards against a recreated namesake).
    uid: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str  # CamelCase, e.g. "MPIJobCreated", "InvalidSpec"
    message: str


@dataclass(frozen=True)
class LogRead:
    """Scan a launcher pod's log (reconcilers/failure/evidence.py): the evidence an exit 0 after a
    worker's loss needs. The controller reads it and plans again with the report (Inputs.reports).
    `since`: the read's `sinceTime` (RFC 3339), just before the first loss seen; None: the whole log."""

    namespace: str
    pod: str
    uid: str
    container: str
    since: str | None = None


@dataclass
class Plan:
    creates: list[Create] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    # The complete new `status`, or None when it is unchanged (no status write).
    status: Obj | None = None
    events: list[Event] = field(default_factory=list)
    # Look again after this many seconds (deadline, TTL) even if nothing changes.
    requeue_after: float | None = None
    # Delete the MPIJob itself (ttlSecondsAfterFinished has run out).
    delete_mpijob: bool = False
    # Minor writes (reconcilers/pace.py) were held back: planned again after `requeue_after`.
    held: bool = False
    # Launcher logs to read before the verdict (reconcilers/failure/evidence.py); reads, not writes.
    read_logs: list[LogRead] = field(default_factory=list)

    @property
    def writes(self) -> int:
        """API writes this plan needs (Events excluded)."""
        return (
            len(self.creates)
            + len(self.patches)
            + len(self.deletes)
            + (self.status is not None)
            + self.delete_mpijob
        )


KeyGen = Callable[[], SSHKey]


@dataclass(frozen=True)
class Inputs:
    """Everything `plan()` needs; `now` is passed in because reconcilers read no clock."""

    mpijob: Obj
    observed: Observed
    config: Config
    now: datetime  # timezone-aware UTC
    # Called only when the SSH Secret must be created; the controller passes a real generator.
    keygen: KeyGen | None = None
    # The last write of a child the API server refused, as the controller remembers it (refusal.py).
    refusal: Refusal | None = None
    # A child's name that the last apply found taken by an object this MPIJob does not control and
    # the caches cannot show (not labelled as ours): the message to report, until the name is free.
    taken: str | None = None
    # The MPIJob's NetworkPolicy name was found so taken: not a clash that holds the job, only its
    # isolation (reconcilers/netpol.py), until the name is free.
    policy_taken: bool = False
    # Seconds to hold the writes that only follow pods (reconcilers/pace.py); 0: write them now.
    settle_s: float = 0.0
    # What the launcher pods' logs said, by pod uid, once read (reconcilers/failure/evidence.py).
    reports: Mapping[str, LauncherReport] = field(default_factory=dict)
    # The last known state of worker pods deleted since the last applied plan: a StatefulSet can
    # replace a pod before any reconcile sees it deleting (reconcilers/failure/workerloss.py).
    gone_workers: tuple[Obj, ...] = ()
    # Pods of this MPIJob last seen with a DisruptionTarget condition that have left the cache since
    # (an evicted pod can be gone before any reconcile looks): the controller's memory of them
    # (reconcilers/failure/retries.py: a disruption is told apart even so).
    disrupted: tuple[Obj, ...] = ()


# -- a refused write, as plain data (what the plan makes of it: reconcilers/refusal.py) ------------------

PERMANENT_STATUS = frozenset({400, 413, 422})


@dataclass(frozen=True)
class Cause:
    field: str  # the child's field as the server named it, e.g. spec.template.spec.containers[1].name
    message: str


@dataclass(frozen=True)
class Refusal:
    """One refused write of a child; `generation` is the MPIJob's metadata.generation at the time."""

    code: int  # HTTP status
    reason: str  # the Status reason: Invalid, RequestEntityTooLarge, Forbidden...
    message: str  # the Status message, as the server wrote it
    kind: str  # the child's kind, e.g. Job
    name: str  # the child's name
    generation: int | None = None
    causes: tuple[Cause, ...] = ()

    @property
    def permanent(self) -> bool:
        return is_permanent(self.code)


def is_permanent(code: int) -> bool:
    return code in PERMANENT_STATUS
