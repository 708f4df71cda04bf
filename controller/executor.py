"""Applies a Plan to the API server: the only place the controller writes.

The Service, ConfigMap, Secret and NetworkPolicy a plan creates go out together (nothing refers to
them before the pods do, and the policy is in force before any pod starts); every other write
follows, one at a time in the plan's order, so a worker object the API server refuses leaves no
launcher to run `mpirun` alone. A reconcile that starts an MPIJob waits for
two round trips fewer, and on a burst of new MPIJobs the work queue reaches their pod events that
much sooner (docs/architecture.md section 7.1).

Transient failures (409 Conflict, 429, 5xx, dropped connections) are retried with tenacity;
a create that meets AlreadyExists, a delete that meets NotFound, or a delete whose uid
precondition fails, count as done (a stale cache or a racing replica already did it). A write the
API server refuses ends the apply and comes back in `Result.refused` (with what was written before
it), so the controller reports it against the very MPIJob it planned for; so does a child's name held
by an object this MPIJob does not control (`Result.foreign`). A patch that meets
NotFound raises ObjectGone (the object was deleted meanwhile: a race, not a refusal). The status
write carries the resourceVersion of the MPIJob the plan was made from: one that changed since, or a
namesake that replaced it, ends the apply at once (`Result.stale`, no retry: only a new plan can fix
it), before the plan's Events.
Anything else is raised, and the work queue retries the MPIJob with backoff.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import tenacity

from client.errors import CONNECTION_ERRORS, ApiError
from client.resources import EVENTS, MPIJOBS, resource_for
from client.rest import RestClient
from controller import logs, metrics
from reconcilers.diff import merge_patch
from reconcilers.types import Create, Delete, Event, Patch, Plan, Ref

log = logs.get("executor")
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
RETRIABLE_STATUS = {409, 429, 500, 502, 503, 504}
CREATE_ROUNDS = 3
# Created together, before the rest: the children that pods read or that guard them, and that refer
# to nothing themselves. A refused NetworkPolicy holds the workers and launcher back (no pod runs
# unprotected while isolation is asked for).
TOGETHER = frozenset({"Service", "ConfigMap", "Secret", "NetworkPolicy"})


class NotLeader(Exception):
    """This replica lost its Lease: it must not write."""


class ForeignObject(Exception):
    """A child's name is taken by an object this MPIJob does not control; `path` is its API path."""

    def __init__(self, message: str, path: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.path, self.kind = path, kind


class PredecessorChild(Exception):
    """A child's name is held by the child of a deleted MPIJob of the same name (another uid), which
    the garbage collector is removing: not a clash, wait for it."""


class ObjectGone(Exception):
    """A patched object was gone (404): deleted since the cache showed it. The next reconcile, from a
    cache that shows the delete, plans from there; nothing to report (docs/architecture.md section 3.2)."""


class StaleStatus(Exception):
    """The status write met 409 Conflict on its resourceVersion precondition: the MPIJob changed since
    the cache showed it, or was deleted and re-created under its name (another uid). The status was
    planned from what is no longer there; the controller plans again from a cache that shows the
    change (docs/architecture.md section 3.2)."""


class Refused(ApiError):
    """The API server refused to create or patch a child (after the retries above): the controller
    turns it into a condition and an Event (reconcilers/refusal.py), not a bare retry loop. Still an
    ApiError, with the server's status, reason, message and body."""

    def __init__(self, error: ApiError, verb: str, kind: str, name: str) -> None:
        super().__init__(error.status, error.reason, error.message, error.body, error.retry_after)
        self.verb, self.kind, self.name = verb, kind, name

    def __str__(self) -> str:
        return f"{self.verb} {self.kind} {self.name}: {super().__str__()}"


def _precondition_failed(e: ApiError) -> bool:
    """A uid precondition that does not hold: a 409 that no retry will change."""
    return e.status == 409 and "precondition" in (e.message or "").lower()


def _retriable(e: BaseException) -> bool:
    if isinstance(e, ApiError):
        return e.status in RETRIABLE_STATUS and e.reason != "AlreadyExists" and not _precondition_failed(e)
    return isinstance(e, CONNECTION_ERRORS)


# 0.1 s doubling to 5 s, plus up to 0.1 s of jitter so that retrying workers do not move in step.
_BACKOFF = tenacity.wait_exponential(multiplier=0.1, max=5.0) + tenacity.wait_random(0, 0.1)


def _wait(retry_state: tenacity.RetryCallState) -> float:
    e = retry_state.outcome.exception() if retry_state.outcome else None
    if isinstance(e, ApiError) and e.retry_after:
        return min(e.retry_after, 10.0)
    return _BACKOFF(retry_state)


# One Retrying for every call, not a decorator applied per call (which copies it each time): its
# per-call state is thread-local, so the workers share it safely.
RETRYING = tenacity.Retrying(
    retry=tenacity.retry_if_exception(_retriable),
    wait=_wait,
    stop=tenacity.stop_after_attempt(5),
    reraise=True,
)


@dataclass
class Result:
    """What the writes returned, for expectations: (resource, ns, name) -> resourceVersion / gone."""

    written: dict[tuple[str, str, str], str] = field(default_factory=dict)
    patched: set[tuple[str, str, str]] = field(default_factory=set)  # of `written`: by a patch, not a create
    gone: dict[tuple[str, str, str], str | None] = field(default_factory=dict)
    mpijob: dict | None = None  # the MPIJob's metadata as the status write returned it
    warnings: list[Event] = field(default_factory=list)
    refused: Refused | None = None  # the write the API server refused; nothing after it was sent
    foreign: ForeignObject | None = None  # a child's name held by an object not ours; nothing after it was sent
    # ("after": the shared children created together are each sent whatever the others' fate)
    stale: StaleStatus | None = None  # the status write's precondition failed; its Events were not sent

    @property
    def stopped(self) -> bool:
        """The apply ended at a write it could not make: the rest of the plan was not sent."""
        return self.refused is not None or self.foreign is not None or self.stale is not None


class Executor:
    def __init__(self, client: RestClient, is_leader: Callable[[], bool], component: str, instance: str) -> None:
        self.client, self.is_leader = client, is_leader
        self.component, self.instance = component, instance
        # Shared by every reconcile worker; its threads hold a keep-alive connection each.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="create")

    def _call(self, method: str, path: str, stale_on_conflict: bool = False, **kw) -> dict:
        def guard() -> None:
            if not self.is_leader():
                raise NotLeader(f"{method} {path}")

        def send() -> dict:
            try:
                return self.client.request(method, path, guard=guard, metadata_only=True, **kw)
            except ApiError as e:
                if stale_on_conflict and e.status == 409:
                    raise StaleStatus(f"{method} {path}: {e.message}") from e  # not retried
                raise

        # The leader guard holds for every attempt, retries included, and is checked after the
        # client's throttle: a write that waited for a token goes out only if we still lead.
        # Of any answer the executor reads the metadata alone (a write's resourceVersion, an
        # existing child's owners and labels): the server sends nothing else.
        return RETRYING(send)

    def apply(self, mpijob: dict, plan: Plan) -> Result:
        res = Result()
        try:
            self._apply(mpijob, plan, res)
        except Refused as e:
            res.refused = e
        except ForeignObject as e:
            res.foreign = e
        except StaleStatus as e:
            res.stale = e
        return res

    def _apply(self, mpijob: dict, plan: Plan, res: Result) -> None:
        together = [c for c in plan.creates if c.obj["kind"] in TOGETHER]
        self._create_together(mpijob, together, res)
        for c in plan.creates:
            if c.obj["kind"] not in TOGETHER:
                self._create(mpijob, c, res)
        for p in plan.patches:
            self._patch(p, res)
        for d in plan.deletes:
            self._delete(d, res)
        if plan.status is not None:
            self._status(mpijob, plan.status, res)
        for ev in [*plan.events, *res.warnings]:
            self.event(mpijob, ev)
        if plan.delete_mpijob:
            meta = mpijob["metadata"]
            self._delete(Delete(Ref(MPIJOBS.api_version, MPIJOBS.kind, meta["namespace"], meta["name"]),
                                uid=meta.get("uid"), reason="ttlSecondsAfterFinished"), res)

    def _create_together(self, mpijob: dict, creates: list[Create], res: Result) -> None:
        """Every create of `creates` sent at once; all are waited for, what was written is recorded, and
        the first failure in the plan's order is raised (the others' were sent all the same)."""
        if len(creates) <= 1:
            for c in creates:
                self._create(mpijob, c, res)
            return
        # The first in this thread, the others on the pool (a hand-off between threads costs CPU),
        # each in a copy of this thread's context: its log lines carry the MPIJob's key.
        futures = [self._pool.submit(contextvars.copy_context().run, self._create, mpijob, c, Result())
                   for c in creates[1:]]
        first: Exception | None = None  # raised once every create has ended
        try:
            self._create(mpijob, creates[0], res)
        except Exception as e:
            first = e
        for f in futures:
            try:
                res.written.update(f.result().written)
            except Exception as e:
                first = first or e
        if first is not None:
            raise first

    def _create(self, mpijob: dict, c: Create, res: Result) -> Result:
        obj = c.obj
        meta = obj["metadata"]
        r = resource_for(obj["apiVersion"], obj["kind"])
        key = (r.plural, meta.get("namespace", ""), meta["name"])
        metrics.api_writes.labels("create", obj["kind"]).inc()
        out = self._create_or_find(mpijob, r, obj)
        log.info("created", kind=obj["kind"], name=meta["name"])
        res.written[key] = out["metadata"]["resourceVersion"]
        return res

    def _create_or_find(self, mpijob: dict, r, obj: dict) -> dict:
        """POST `obj`; on AlreadyExists, the existing object if this MPIJob controls it (the cache was
        behind). An object that vanishes between the AlreadyExists and the GET (the garbage collector
        removing it) is created again; a few rounds at most."""
        meta = obj["metadata"]
        for _ in range(CREATE_ROUNDS):
            try:
                return self._call("POST", r.path(meta.get("namespace")), body=obj)
            except ApiError as e:
                if e.reason != "AlreadyExists":
                    raise Refused(e, "create", obj["kind"], meta["name"]) from e
            try:
                current = self._call("GET", r.path(meta.get("namespace"), meta["name"]))
            except ApiError as e:
                if e.status == 404:
                    continue  # gone meanwhile: create it again
                raise
            self._check_controller(mpijob, obj, current, r.path(meta.get("namespace"), meta["name"]))
            return self._adopt(obj, current)
        raise PredecessorChild(f"{obj['kind']} {meta['namespace']}/{meta['name']} keeps coming and going")

    @staticmethod
    def _check_controller(mpijob: dict, obj: dict, current: dict, path: str = "") -> None:
        meta, job = obj["metadata"], mpijob["metadata"]
        owners = current.get("metadata", {}).get("ownerReferences") or []
        ctrl = next((o for o in owners if o.get("controller")), None)
        if ctrl is not None and ctrl.get("uid") == job["uid"]:
            return
        what = f"{obj['kind']} {meta['namespace']}/{meta['name']}"
        if ctrl is not None and ctrl.get("kind") == "MPIJob" and ctrl.get("name") == job["name"]:
            raise PredecessorChild(f"{what} belongs to a deleted MPIJob {job['name']} (uid {ctrl.get('uid')})")
        raise ForeignObject(f"{what} already exists and is not controlled by MPIJob {meta['namespace']}/"
                            f"{job['name']}; delete or rename that object, or give the MPIJob another name", path,
                            obj["kind"])

    def exists(self, path: str) -> bool:
        """Whether the object at `path` exists (a read: no leader guard)."""
        try:
            self.client.request("GET", path, metadata_only=True)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def _adopt(self, want: dict, current: dict) -> dict:
        """An object this MPIJob controls that lacks our labels was made by the upstream operator
        (labels `app: <name>` only): add ours, once, so the label-filtered informers see it
        (docs/architecture.md section 6.3)."""
        labels = want["metadata"].get("labels") or {}
        have = current["metadata"].get("labels") or {}
        if labels.items() <= have.items():
            return current
        r = resource_for(want["apiVersion"], want["kind"])
        meta = current["metadata"]
        metrics.api_writes.labels("patch", want["kind"]).inc()
        log.info("adopted", kind=want["kind"], name=meta["name"])
        return self._call("PATCH", r.path(meta.get("namespace"), meta["name"]), content_type=MERGE_PATCH,
                          body={"metadata": {"labels": labels, "resourceVersion": meta["resourceVersion"]}})

    def patch(self, p: Patch) -> None:
        """One patch outside a plan (a held pod of a gone MPIJob released, reconcilers/failure/hold.py)."""
        self._patch(p, Result())

    def _patch(self, p: Patch, res: Result) -> None:
        r = resource_for(p.ref.api_version, p.ref.kind)
        metrics.api_writes.labels("patch", p.ref.kind).inc()
        try:
            out = self._call("PATCH", r.path(p.ref.namespace, p.ref.name), body=p.patch,
                             content_type=STRATEGIC_PATCH if p.strategic else MERGE_PATCH)
        except ApiError as e:
            if p.strategic:
                # A held pod's release (reconcilers/failure/hold.py) that did not pass stops nothing
                # else of the plan (a resume, a verdict): the plan sends it again (hold.RETRY_S).
                log.warning("a held pod's release did not pass", pod=p.ref.name, code=e.status, error=str(e)[:300])
                return
            if e.status == 404:
                raise ObjectGone(f"{p.ref.kind} {p.ref.namespace}/{p.ref.name} is gone") from e
            raise Refused(e, "patch", p.ref.kind, p.ref.name) from e
        log.info("patched", kind=p.ref.kind, name=p.ref.name, why=p.reason)
        res.written[(r.plural, p.ref.namespace, p.ref.name)] = out["metadata"]["resourceVersion"]
        res.patched.add((r.plural, p.ref.namespace, p.ref.name))

    def _delete(self, d: Delete, res: Result) -> None:
        r = resource_for(d.ref.api_version, d.ref.kind)
        body: dict = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": d.propagation}
        if d.uid:
            body["preconditions"] = {"uid": d.uid}
        metrics.api_writes.labels("delete", d.ref.kind).inc()
        try:
            self._call("DELETE", r.path(d.ref.namespace, d.ref.name), body=body)
        except ApiError as e:
            # NotFound: already gone. Conflict on the uid precondition: a namesake, not ours to delete.
            if e.status == 404 or (d.uid and _precondition_failed(e)):
                return
            raise
        log.info("deleted", kind=d.ref.kind, name=d.ref.name, why=d.reason)
        res.gone[(r.plural, d.ref.namespace, d.ref.name)] = d.uid

    def _status(self, mpijob: dict, status: dict, res: Result) -> None:
        meta = mpijob["metadata"]
        metrics.api_writes.labels("patch", "MPIJob/status").inc()
        # Only the operator writes status, and expectations keep the cached copy current, so the
        # patch from it also clears what the new status dropped (a merge patch replaces lists whole).
        patch = merge_patch(mpijob.get("status") or {}, status)
        body: dict = {"status": patch}
        # The precondition: the resourceVersion the plan was made from. The API server enforces it on
        # the status subresource (409 Conflict); a metadata.uid in the patch it ignores (v1.37,
        # measured: the namesake's status is written), so the resourceVersion is the guard against a
        # namesake too (it is always newer). Never a needless conflict at steady state: a pass plans
        # only once the cache shows this MPIJob's own last write (expectations), and nothing else
        # writes it but a user or Kueue, whose change the plan must see (docs/architecture.md 3.2).
        if meta.get("resourceVersion"):
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            out = self._call("PATCH", MPIJOBS.path(meta["namespace"], meta["name"], "status"),
                             stale_on_conflict=True, body=body, content_type=MERGE_PATCH)
        except ApiError as e:
            if e.status == 404:
                raise ObjectGone(f"MPIJob {meta['namespace']}/{meta['name']} is gone") from e
            raise
        res.mpijob = out
        res.written[(MPIJOBS.plural, meta["namespace"], meta["name"])] = out["metadata"]["resourceVersion"]
        res.patched.add((MPIJOBS.plural, meta["namespace"], meta["name"]))

    def event(self, mpijob: dict, ev: Event) -> None:
        """Records a core/v1 Event on the MPIJob. Best effort: a lost Event never fails a reconcile."""
        meta = mpijob["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": mpijob.get("apiVersion", MPIJOBS.api_version),
                "kind": "MPIJob",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": ev.type,
            "reason": ev.reason,
            "message": ev.message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._call("POST", EVENTS.path(meta["namespace"]), body=body)
        except NotLeader:
            raise
        except Exception as e:
            log.warning("recording an Event failed", reason=ev.reason, error=str(e))
