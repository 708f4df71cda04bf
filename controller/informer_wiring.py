"""The MPIJob controller's informers and their event handlers: which caches it keeps, and which
MPIJob each event queues (docs/architecture.md sections 2 and 3.1). A mixin of MPIJobController
(controller/mpijob_controller.py), which owns the queue, the memory and the expectations these
handlers read.

Every child (Service, ConfigMap, Secret, Jobs, StatefulSet) carries a controller ownerReference
to its MPIJob and pods carry the MPIJob's name as a label, so each event maps to the key
"<namespace>/<mpijob>" of the one MPIJob to reconcile.
"""

from __future__ import annotations

import time

from client.resources import (
    CONFIGMAPS,
    JOBS,
    KUEUE_WORKLOADS,
    MPIJOBS,
    NETWORKPOLICIES,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    VOLCANO_PODGROUPS,
    WORKLOAD_PODGROUPS,
    WORKLOADS,
)
from controller.config import Options
from controller.expectations import Expectations
from controller.job_memory import JobMemories
from controller.workqueue import RateLimitingQueue
from informers.factory import InformerFactory
from informers.store import DeletedFinalStateUnknown, meta_namespace_key
from informers.transforms import slim_kueue_workload, slim_pod, strip_managed_fields, strip_secret_data
from reconcilers import access, names, news
from reconcilers.explain import kueue
from reconcilers.failure import hold, retries
from reconcilers.gang import workload_gang
from reconcilers.types import Observed

OPERATOR_SELECTOR = f"{names.OPERATOR_NAME_LABEL}={names.OPERATOR_NAME}"
POD_INDEX = "mpijob"
# A pod event reconciles its MPIJob this much later, so that a burst of pod events (the workers of
# one MPIJob starting together) is one reconcile, not one per pod; MPIJob and child-object events
# still reconcile at once. Running is read from the Ready pods, so this delay is part of every
# bring-up's wait: 0.25 s rather than 0.5 s cut Running p95 by 8 % at 100 MPIJobs x 2 for 7 % more
# reconciles (docs/architecture.md section 3.1).
POD_EVENT_BATCH_SECONDS = 0.25


def pod_owners(pod: dict) -> list[str]:
    meta = pod.get("metadata") or {}
    job = (meta.get("labels") or {}).get(names.JOB_NAME_LABEL)
    return [f"{meta.get('namespace')}/{job}"] if job else []


def _obj_key(plural: str, obj: dict) -> tuple[str, str, str]:
    """(plural, namespace, name): how expectations and the patches sent name a child."""
    meta = obj.get("metadata") or {}
    return plural, meta.get("namespace") or "", meta.get("name") or ""


def _unwrap(obj: object) -> dict:
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj  # type: ignore[return-value]


class InformerWiring:
    """The informers (`_wire`), the handlers of their events, and what the caches show of one MPIJob
    (`observed`). The controller sets `queue`, `memory`, `expectations` and `_active`."""

    queue: RateLimitingQueue
    memory: JobMemories
    expectations: Expectations
    _active: bool

    def _wire(self, factory: InformerFactory, opts: Options, gang_unavailable: str, kueue_served: bool = False) -> None:
        # Only MPIJobs are resynced: a periodic reconcile of each catches anything an event could not.
        self.mpijobs = factory.informer_for(MPIJOBS, transform=strip_managed_fields,
                                            resync_period=opts.resync_period)
        # The children's informers: our labels only, each store by its resource's plural (observed()).
        self.stores = {MPIJOBS.plural: self.mpijobs.store}
        # How far each store is: the resourceVersion its informer reached (Expectations.observe).
        self.store_rv = {MPIJOBS.plural: lambda: self.mpijobs.last_sync_resource_version}

        def child(resource, transform=strip_managed_fields):
            inf = factory.informer_for(resource, label_selector=OPERATOR_SELECTOR, transform=transform)
            self.stores[resource.plural] = inf.store
            self.store_rv[resource.plural] = lambda: inf.last_sync_resource_version
            return inf

        self.jobs = child(JOBS)
        # Both worker kinds, whatever --worker-backend says: an MPIJob keeps the backend it started
        # with (reconcilers/backend.py), so a restart with the other flag must still see its workers.
        # Not without their grants (the Job backend runs: client/permissions.py STATEFULSET_WORKERS).
        self.statefulsets = None if access.off(self.config, "statefulset-workers") else child(STATEFULSETS)
        self.services = child(SERVICES)
        self.config_maps = child(CONFIGMAPS)
        # Without the keys' values: the plan only needs to know the Secret exists, is ours and has
        # both keys, and no private key of the cluster should sit in this process's memory.
        self.secrets = child(SECRETS, strip_secret_data)
        self.pods = child(PODS, slim_pod)
        self.pods.add_indexers({POD_INDEX: pod_owners})
        # PodGroups only with --gang-scheduling: without it the operator needs no access to their API.
        # With the Workload API, its Workloads too, and neither informer when the cluster does not serve
        # it (an informer would retry a 404 forever and the caches would never sync).
        # Each MPIJob's NetworkPolicy, only with --network-isolation (off: no access to their API needed).
        self.network_policies = child(NETWORKPOLICIES) if opts.network_isolation else None
        self.pod_groups = self.workloads = None
        if opts.gang_scheduling and not gang_unavailable:
            if opts.gang_scheduling == workload_gang.MODE:
                self.workloads = child(WORKLOADS)
                self.pod_groups = child(WORKLOAD_PODGROUPS)
            else:
                self.pod_groups = child(VOLCANO_PODGROUPS if opts.gang_scheduling == "volcano" else PODGROUPS)
        # Kueue's Workloads, read only, when the cluster serves their API (found at start-up): why Kueue
        # keeps an MPIJob suspended (reconcilers/explain/kueue.py). Kueue labels them with nothing of
        # ours, so every Workload of the watched namespaces is listed, slimmed to its conditions, and
        # indexed by the MPIJob that owns it; one of another kind's job maps to no MPIJob.
        self.kueue_workloads = None
        if kueue_served:
            self.kueue_workloads = factory.informer_for(KUEUE_WORKLOADS, transform=slim_kueue_workload)
            self.kueue_workloads.add_indexers({POD_INDEX: _mpijob_owner})
            self.kueue_workloads.add_event_handler(
                on_add=lambda obj: self._enqueue_owner(obj, ""),
                on_update=lambda old, new: self._kueue_updated(old, new),
                on_delete=lambda obj: self._enqueue_owner(_unwrap(obj), ""),
            )

        self.mpijobs.add_event_handler(
            on_add=self._enqueue_mpijob,
            on_update=self._mpijob_updated,
            on_delete=self._mpijob_deleted,
        )
        self.pods.add_event_handler(
            on_add=self._enqueue_pod_owner,
            on_update=lambda old, new: self._enqueue_pod_owner(new),
            on_delete=lambda obj: self._pod_deleted(_unwrap(obj)),
        )
        for inf in self._children():
            if inf is self.pods or inf is self.kueue_workloads:
                continue
            plural = inf.resource.plural
            inf.add_event_handler(
                on_add=lambda obj, plural=plural: self._enqueue_owner(obj, plural),
                on_update=lambda old, new, plural=plural: self._child_updated(old, new, plural),
                # A delete is always news, whatever resourceVersion its last known state had.
                on_delete=lambda obj: self._enqueue_owner(_unwrap(obj), ""),
            )

    def _children(self) -> list:
        infs = [self.jobs, self.services, self.config_maps, self.secrets, self.pods]
        return infs + [inf for inf in (self.statefulsets, self.pod_groups, self.workloads, self.network_policies,
                                       self.kueue_workloads) if inf is not None]

    # ------------------------------------------------------------------ event handlers
    def _enqueue_mpijob(self, obj: dict, resync: bool = False) -> None:
        key = meta_namespace_key(obj)
        # A uid other than the remembered one: a namesake whose predecessor's delete went unseen
        # (a relist shows it as an update). Its memory starts blank.
        self.memory.seen(key, (obj.get("metadata") or {}).get("uid"))
        if not self._active:
            return
        if resync:
            # The periodic resync is a safety net, not news: paced by the queue's overall bucket, so
            # that it never sends every MPIJob (500 blocked ones retrying their refused writes) at
            # the API server in one burst that takes the client's budget (docs/architecture.md 3.2).
            self.queue.add_paced(key)
        else:
            self.queue.add(key)

    def _mpijob_deleted(self, obj: object) -> None:
        key = meta_namespace_key(_unwrap(obj))
        self.memory.forget(key)
        if self._active:
            self.queue.add(key)

    def _mpijob_updated(self, old: dict, new: dict) -> None:
        if old is not new and self._active:
            key = meta_namespace_key(new)
            mem = self.memory.peek(key)
            sent = mem.status_sent if mem is not None and mem.uid == (new.get("metadata") or {}).get("uid") else None
            if news.status_echo(old, new, sent) and not self.expectations.is_deferred(key):
                return  # our own status write coming back (reconcilers/news.py)
        self._enqueue_mpijob(new, resync=old is new)

    def _child_updated(self, old: dict, new: dict, plural: str) -> None:
        owner = names.owner_key(new)
        if owner and self._active and news.counts_only(old, new, self.mpijobs.store.get(owner)) \
                and not self.expectations.is_deferred(owner):
            return  # a Job or StatefulSet counting pods, which cannot change the plan (reconcilers/news.py)
        if owner and self._active and self._patch_echo(owner, plural, old, new):
            return  # a patch of ours coming back, maybe before its answer (reconcilers/news.py)
        self._enqueue_owner(new, plural)

    def _patch_echo(self, owner: str, plural: str, old: dict, new: dict) -> bool:
        """`new` is `old` with exactly the patch the owner's last pass sent to it (once per patch)."""
        key = _obj_key(plural, new)
        ref = names.controller_ref(new) or {}
        with self.memory.lock:
            mem = self.memory.peek(owner)
            if mem is None or mem.uid != ref.get("uid") or key not in mem.patches_sent:
                return False
            if not news.patch_echo(old, new, mem.patches_sent[key]) or self.expectations.is_deferred(owner):
                return False
            del mem.patches_sent[key]
            return True

    def _enqueue_owner(self, obj: dict, plural: str) -> None:
        """Queues the MPIJob that owns `obj`, unless the event echoes a patch of ours to it (an
        empty `plural`: never taken for an echo)."""
        owner = names.owner_key(obj)
        if owner and self._active and not (plural and self._echo(owner, plural, obj)):
            self.queue.add(owner)

    def _echo(self, owner: str, plural: str, obj: dict) -> bool:
        """The event only shows a patch of ours to a child at the very resourceVersion it returned:
        the pass that wrote it planned from everything else the caches show, so reconciling again
        would find nothing to do (reconcilers/news.py)."""
        return self.expectations.echo(owner, _obj_key(plural, obj), (obj.get("metadata") or {}).get("resourceVersion"))

    def _kueue_updated(self, old: dict, new: dict) -> None:
        """A Workload's change queues its MPIJob when its conditions changed (the transform keeps
        nothing else that moves): Kueue's words, which the Suspended condition quotes."""
        def moved(obj: dict) -> tuple:
            return (obj.get("status") or {}).get("conditions"), (obj.get("metadata") or {}).get("deletionTimestamp")

        if moved(old) != moved(new):
            self._enqueue_owner(new, "")

    def _pod_deleted(self, pod: dict) -> None:
        """A worker pod's delete is remembered for its MPIJob's next plan: a StatefulSet can replace
        it before a reconcile sees it deleting (reconcilers/failure/workerloss.py)."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if self._active and labels.get(names.JOB_ROLE_LABEL) == "worker":
            for key in pod_owners(pod):
                job = self.mpijobs.store.get(key)
                if job is not None:
                    with self.memory.lock:
                        self.memory.of(key, job["metadata"].get("uid")).gone_workers.append(pod)
        self._enqueue_pod_owner(pod)

    def _enqueue_pod_owner(self, pod: dict) -> None:
        if not self._active:
            return
        now = time.monotonic()
        for key in pod_owners(pod):
            job = self.mpijobs.store.get(key)
            if job is None:
                # its MPIJob is gone (the garbage collector removing its pods): nothing to do, but
                # release a launcher pod held for its record (reconcilers/failure/hold.py)
                if hold.holds(pod):
                    self.queue.add(key)
                continue
            self.memory.pod_event(key, job["metadata"].get("uid"), now)
            if retries.disruption(pod) is not None and _role(pod) == names.ROLE_WORKER:
                # evicted, preempted, its node lost: it may leave the cache before the reconcile
                # looks, and the plan must still tell that disruption apart (reconcilers/failure/retries.py)
                self.memory.pod_disrupted(key, job["metadata"].get("uid"), pod, now)
            if self.mpijobs.store.get(key) is None:
                self.memory.forget(key)  # deleted meanwhile, its forget maybe before our write: again
                continue
            self.queue.add_after(key, POD_EVENT_BATCH_SECONDS)

    def observed(self, mpijob: dict) -> Observed:
        meta = mpijob["metadata"]
        ns = meta["namespace"]

        def get(store_name: str, name: str) -> dict | None:
            store = self.stores.get(store_name)
            return store.get(f"{ns}/{name}") if store is not None else None

        job_workers = get("jobs", names.worker_name(mpijob))
        sts_workers = get("statefulsets", names.worker_name(mpijob))
        return Observed(
            service=get("services", names.service_name(mpijob)),
            config_map=get("configmaps", names.config_map_name(mpijob)),
            secret=get("secrets", names.secret_name(mpijob)),
            launcher=get("jobs", names.launcher_name(mpijob)),
            workers=job_workers or sts_workers,
            other_workers=sts_workers if job_workers else None,
            pods=self.pods.store.by_index(POD_INDEX, f"{ns}/{meta['name']}"),
            pod_group=get("podgroups", meta["name"]),
            workload=get("workloads", meta["name"]),
            kueue_workload=kueue.owned_workload(
                self.kueue_workloads.store.by_index(POD_INDEX, f"{ns}/{meta['name']}"), meta.get("uid"))
            if self.kueue_workloads is not None else None,
            network_policy=get(NETWORKPOLICIES.plural, names.network_policy_name(mpijob)),
            legacy_network_policy=get(NETWORKPOLICIES.plural, names.legacy_network_policy_name(mpijob)),
        )


def _mpijob_owner(obj: dict) -> list[str]:
    """The MPIJob whose Workload this is ("ns/name"), by its controller ownerReference."""
    key = names.owner_key(obj)
    return [key] if key else []


def _role(pod: dict) -> str | None:
    """A worker's disruption is remembered past the cache; a launcher pod is held instead until its
    end is recorded (reconcilers/failure/hold.py)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(names.JOB_ROLE_LABEL)
