"""The MPIJob controller: informer events -> work queue -> plan (pure) -> executor.

The informers and their event handlers are in controller/informer_wiring.py; the launcher log reads
a verdict waits on run on controller/logreader.py's threads (controller/evidence.py), never here.
Each event maps to the key "<namespace>/<mpijob>" of the one MPIJob to reconcile; a key is never
worked by two threads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from client.errors import CONNECTION_ERRORS, ApiError
from client.resources import MPIJOBS, NETWORKPOLICIES, resource_for
from controller import explain_metrics, logs, metrics, sshkeys
from controller.config import Options
from controller.executor import (
    Executor,
    ForeignObject,
    NotLeader,
    ObjectGone,
    PredecessorChild,
    Refused,
    Result,
    StaleStatus,
)
from controller.expectations import Expectations
from controller.informer_wiring import (  # noqa: F401 (POD_EVENT_BATCH_SECONDS: tests read it here)
    OPERATOR_SELECTOR,
    POD_EVENT_BATCH_SECONDS,
    POD_INDEX,
    InformerWiring,
    pod_owners,
)
from controller.job_memory import TAKEN_CHILD, TAKEN_POLICY, JobMemories, JobMemory
from controller.logreader import LogReader
from controller.workqueue import RateLimitingQueue, default_controller_rate_limiter
from informers.factory import InformerFactory
from informers.store import split_key
from reconcilers import names, pace, refusal, status
from reconcilers.failure import hold
from reconcilers.plan import plan as make_plan
from reconcilers.types import Config, Inputs, Plan

log = logs.get("controller")
TAKEN_RECHECK_SECONDS = 5.0  # how often a name taken by a foreign object is looked at again
# seconds: the longest per-MPIJob backoff before retrying a write refused for a while; the work
# queue's overall bucket still applies (so 500 blocked MPIJobs retry at --queue-qps, not 50/s).
REFUSAL_RETRY_MAX = 10.0
# A reconcile running longer than this is hung (a reconcile takes milliseconds; the executor's
# retries and timeouts bound a slow API server to a few minutes): /healthz fails, the kubelet restarts us.
WORKER_HANG_SECONDS = 600.0
# An informer whose cache has not followed the API server for this long (no watch open, no list
# that succeeded) is stuck: /healthz fails. Well above the reflector's longest backoff (30 s) and
# the longest Retry-After taken (60 s, client/errors.py), so an API server away for minutes
# restarts nothing (docs/architecture.md section 3.2).
INFORMER_STALE_SECONDS = 600.0
EVENT_METRICS = {
    "MPIJobCreated": metrics.jobs_created,
    "MPIJobSucceeded": metrics.jobs_successful,
    "MPIJobFailed": metrics.jobs_failed,
}


def _expected(e: Exception) -> bool:
    """A network or API error that retrying is meant to get past: a warning, not a traceback."""
    return isinstance(e, (ApiError, *CONNECTION_ERRORS))


class MPIJobController(InformerWiring):
    def __init__(
        self,
        opts: Options,
        factory: InformerFactory,
        executor: Executor,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        keygen: Callable = sshkeys.generate,
        gang_unavailable: str = "",
        container_restart_rules: bool = False,
        permissions_missing: str = "",
        features_off: tuple[tuple[str, str], ...] = (),
        health_note: str = "",
        kueue_served: bool = False,
    ) -> None:
        self.opts, self.executor, self.now, self.keygen = opts, executor, now, keygen
        self.config = Config(
            worker_backend=opts.worker_backend,  # type: ignore[arg-type]
            cluster_domain=opts.cluster_domain,
            controller_name=opts.controller_name,
            gang_scheduler=opts.gang_scheduling,
            # why the gang's API is not served (found at start-up, controller/__main__.py), or ""
            gang_unavailable=gang_unavailable,
            network_isolation=opts.network_isolation,
            # the API server admits container restart rules (found at start-up): --launcher-restart says
            # where a failed launcher restarts in place (reconcilers/failure/restartpolicy.py)
            container_restart_rules=container_restart_rules,
            launcher_restart=opts.launcher_restart,
            launcher_names_wait_s=opts.launcher_names_wait,
            # the operator's RBAC as found at start-up (controller/access.py; reconcilers/access.py)
            permissions_missing=permissions_missing,
            features_off=features_off,
        )
        self.health_note = health_note  # what /healthz adds to "ok": features off, MPIJobs held
        self.queue = RateLimitingQueue(
            "mpijob", default_controller_rate_limiter(qps=opts.queue_qps, burst=opts.queue_burst)
        )
        self.expectations = Expectations()
        # Everything remembered of one MPIJob (uid) between reconciles, forgotten in one place
        # (controller/job_memory.py): refusals, a taken name, the pods' pace, expectations, series.
        self.memory = JobMemories(self.expectations)
        # Reads launcher logs on threads of its own; a reconcile only asks (controller/logreader.py).
        self.log_reader = LogReader(lambda: self.executor.client, self.memory.lock, self.queue.add,
                                    self.queue.add_after, threads=opts.log_readers)
        # Set once the workers run (this replica leads): a standby neither queues nor remembers
        # anything, and its takeover queues every cached MPIJob (docs/architecture.md section 3.2).
        self._active = False
        self._wire(factory, opts, gang_unavailable, kueue_served)
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ workers
    def run_workers(self) -> None:
        self._active = True
        self.log_reader.start()
        for key in self.mpijobs.store.list_keys():  # a standby queued nothing: take every MPIJob now
            self.queue.add(key)
        for pod in self.pods.store.list():  # and the held launcher pods of MPIJobs gone meanwhile
            for key in pod_owners(pod) if hold.holds(pod) else []:
                if self.mpijobs.store.get(key) is None:
                    self.queue.add(key)
        for i in range(self.opts.threadiness):
            t = threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("workers started", threads=self.opts.threadiness, backend=self.opts.worker_backend)

    def shutdown(self, timeout: float = 20.0) -> bool:
        """Stops the workers; True once every one has returned (no write of ours is in flight)."""
        self.queue.shutdown()
        self.log_reader.stop()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def healthy(self, hang_s: float | None = None, stale_s: float | None = None,
                now: float | None = None) -> tuple[bool, str]:
        """For /healthz: false when this process cannot do its job, so the kubelet restarts it: an
        informer stopped (its list/watch or resync thread gone) or stale (its cache not following
        the API server for more than `stale_s`: never synced, or failing since), a worker thread
        dead, or a reconcile running longer than `hang_s` (a worker hung). `now`: monotonic time."""
        informers = [self.mpijobs, *self._children()]
        stopped = [inf.name for inf in informers if inf.dead()]
        if stopped:
            return False, f"informers stopped: {', '.join(stopped)}"
        stale_s = INFORMER_STALE_SECONDS if stale_s is None else stale_s
        stale = [f"{inf.name} for {s:.0f}s" for inf in informers if (s := inf.stale_for(now)) > stale_s]
        if stale:
            return False, f"informers not synced with the API server (more than {stale_s:.0f}s): {', '.join(stale)}"
        if self._active and not self.queue.shutting_down():
            dead = [t.name for t in self._threads if not t.is_alive()]
            if dead:
                return False, f"worker threads dead: {', '.join(dead)}"
        hang_s = WORKER_HANG_SECONDS if hang_s is None else hang_s
        key, running = self.queue.longest_running()
        if key is not None and running > hang_s:
            return False, f"a worker has been reconciling {key} for {running:.0f}s (more than {hang_s:.0f}s): hung"
        return True, f"ok; {self.health_note}" if self.health_note else "ok"

    def _worker(self) -> None:
        while True:
            key, shutting_down = self.queue.get()
            if shutting_down:
                return
            try:
                self._process(key)
            finally:
                self.queue.done(key)

    def _process(self, key: str) -> None:
        structlog.contextvars.bind_contextvars(mpijob=key)
        started = time.perf_counter()
        try:
            if self.sync(key):
                self.queue.forget(key)
        except NotLeader:
            # Only a lapse of the Lease, which is final (controller/leader.py): the process stops
            # leading and exits, and the next leader queues every cached MPIJob, this one included.
            log.warning("not the leader any more: the next leader reconciles this MPIJob")
        except PredecessorChild as e:
            log.info("waiting for the garbage collector to remove a deleted namesake's child", detail=str(e))
            self.queue.add_after(key, 1.0)
        except ObjectGone as e:
            # Deleted since the cache showed it: its delete event is on the way; nothing to report.
            log.info("an object was deleted meanwhile; reconciling again", detail=str(e))
            self.queue.add_rate_limited(key)
        except Exception as e:
            metrics.reconcile_errors.labels(type(e).__name__).inc()
            if _expected(e):  # the API server away or busy: one line, the error's text
                log.warning("reconcile failed; retrying with backoff", error=f"{type(e).__name__}: {e}",
                            retries=self.queue.num_requeues(key))
            else:
                log.error("reconcile failed; retrying with backoff", error=str(e),
                          retries=self.queue.num_requeues(key), exc_info=True)
            self.queue.add_rate_limited(key)
        finally:
            metrics.reconcile_duration.observe(time.perf_counter() - started)
            structlog.contextvars.unbind_contextvars("mpijob")

    def _refused(self, key: str, mpijob: dict, mem: JobMemory, e: Refused) -> bool:
        """Remember a refused write. A new refusal is shown by the next pass, which plans with it
        (refusal.report); the same one again only waits for the next retry. `mpijob` and `mem` are
        those the refused plan was made from: never a namesake's."""
        metrics.reconcile_errors.labels(e.reason or str(e.status)).inc()
        r = refusal.Refusal(e.status, e.reason, e.message, e.kind, e.name,
                            (mpijob.get("metadata") or {}).get("generation"), refusal.causes_of(e.body))
        if refusal.same(mem.refusal, r):
            if mem.refusal_shown:
                self._retry_refused(key, r)
            else:  # the pass that shows it met it again (a permanent one's plan): show it after a backoff
                self.queue.add_rate_limited(key)
            return False
        log.warning("the API server refused a child", verb=e.verb, kind=e.kind, name=e.name, code=e.status,
                    reason=e.reason, error=e.message, permanent=r.permanent)
        mem.refusal, mem.refusal_shown = r, False
        self.queue.add(key)  # show it now; the retry's backoff starts once it is shown
        return False

    def _shown(self, key: str, mem: JobMemory) -> bool:
        """A pass showed the refusal in `mem`: retry what can pass, with backoff."""
        mem.refusal_shown = True
        self._retry_refused(key, mem.refusal)
        return False

    def _retry_refused(self, key: str, r: refusal.Refusal) -> None:
        if r.permanent:
            self.queue.forget(key)  # no retry: only a new generation of the spec changes the answer
        else:
            # Backoff, capped per MPIJob (what lifts the refusal, a ResourceQuota raised, sends this
            # MPIJob no event), inside the queue's overall rate (workqueue.MaxOfRateLimiter.when_capped).
            self.queue.add_rate_limited(key, item_cap=REFUSAL_RETRY_MAX)

    def _stale(self, key: str, e: StaleStatus) -> bool:
        """The status was planned from an MPIJob that changed since, or that a namesake replaced: plan
        again, once the cache shows the change (its event is on the way; the backoff covers a cache
        that is slow to show it)."""
        log.info("the MPIJob changed since the plan was made; planning again", detail=str(e))
        self.queue.add_rate_limited(key)
        return False

    def _taken(self, key: str, mem: JobMemory, e: ForeignObject) -> bool:
        """A child's name is held by a foreign object. The plan reports it (condition + Event) from
        the next pass on; the name is looked at again every few seconds, since no informer shows an
        object without our labels."""
        metrics.reconcile_errors.labels("ResourceExists").inc()
        # the NetworkPolicy's costs the MPIJob its isolation only (reconcilers/netpol.py)
        what = TAKEN_POLICY if e.kind == NETWORKPOLICIES.kind else TAKEN_CHILD
        if mem.taken.get(what, (None,))[0] != str(e):
            log.warning("a child's name is taken", error=str(e))
        mem.taken[what] = (str(e), e.path)
        self.queue.add(key)
        return False

    # ------------------------------------------------------------------ one reconcile
    def sync(self, key: str) -> bool:
        """One reconcile of `key`; False when it set the key's retry itself (a refusal, a taken
        name), so that its backoff must not be reset."""
        mpijob = self.mpijobs.store.get(key)
        if mpijob is None:
            self.memory.forget(key)
            self._release_orphans(key)
            return True
        mem = self.memory.of(key, mpijob["metadata"].get("uid"))
        taken = self._still_taken(mem, TAKEN_CHILD)
        policy_taken = self._still_taken(mem, TAKEN_POLICY) is not None
        if taken or policy_taken:
            self.queue.add_after(key, TAKEN_RECHECK_SECONDS)
        if not self._caught_up(key):
            log.debug("waiting for the cache to show our writes", pending=len(self.expectations.pending(key)))
            self.queue.add_after(key, 5.0)  # safety net; the informer event normally comes first
            return True
        mem.launcher = names.launcher_name(mpijob)
        metrics.job_info.labels(mem.launcher, split_key(key)[0]).set(1)
        last = mem.refusal
        if last is not None and last.permanent and last.generation != mpijob["metadata"].get("generation"):
            mem.refusal = last = None  # the spec changed: try again
        observed = self.observed(mpijob)
        cached = {(p.get("metadata") or {}).get("uid") for p in observed.pods}
        disrupted = tuple(p for p in self.memory.disrupted(mem, time.monotonic())
                          if (p.get("metadata") or {}).get("uid") not in cached)
        with self.memory.lock:  # the pod informer's thread appends to it
            gone = tuple(mem.gone_workers)
        inputs = Inputs(mpijob, observed, self.config, self.now(), self.keygen, refusal=last,
                        taken=taken, policy_taken=policy_taken, settle_s=self._settle(mem, mpijob),
                        reports=self._reports(mem),
                        gone_workers=gone, disrupted=disrupted)
        plan = make_plan(inputs)
        showing = last is not None and not mem.refusal_shown
        if showing:
            plan = refusal.report(plan, last)
        if plan.status is not None:
            mem.status_sent = plan.status  # before the write: its event may come before the answer
        with self.memory.lock:  # read by the informers' threads (_patch_echo)
            mem.patches_sent = {(resource_for(p.ref.api_version, p.ref.kind).plural, p.ref.namespace,
                                 p.ref.name): p.patch for p in plan.patches}
        try:
            result = self._apply(key, mpijob, plan)
        finally:
            if self.memory.peek(key) is None:
                self.memory.forget(key)  # deleted while we worked: drop the series we may have set
        if result.stale is not None:
            return self._stale(key, result.stale)
        if result.foreign is not None:
            return self._taken(key, mem, result.foreign)
        if result.refused is not None:
            return self._refused(key, mpijob, mem, result.refused)
        if showing:
            return self._shown(key, mem)
        self._held(mem, plan.held)
        with self.memory.lock:  # planned and applied: those deletes are in the status now, if they mattered
            mem.gone_workers = [p for p in mem.gone_workers if not any(p is g for g in gone)]
        if plan.read_logs:
            self._read_logs(key, mem, plan)
        if last is not None and not last.permanent:
            # The writes passed this time: forget the refusal and plan again, which clears Blocked.
            mem.refusal = None
            log.info("a refused write passed", kind=last.kind, name=last.name)
            self.queue.add(key)
        if plan.requeue_after is not None:
            self.queue.add_after(key, max(plan.requeue_after, 0.0))
        return True

    def _release_orphans(self, key: str) -> None:
        """The MPIJob is gone (its garbage collector removing the pods): the launcher pods held for their
        record are released, or they would stay Terminating for good (reconcilers/failure/hold.py).
        Each release is one patch; a pod already gone, or released, is no error."""
        patches = hold.release_all(self.pods.store.by_index(POD_INDEX, key), "its MPIJob is gone")
        for p in patches:
            self.executor.patch(p)  # (one that did not pass is logged, and sent again below)
        if patches:
            self.queue.add_after(key, hold.RETRY_S)  # a released pod leaves the cache: nothing sent then

    def _apply(self, key: str, mpijob: dict, plan: Plan) -> Result:
        result = Result()
        if plan.writes or plan.events:
            log.debug("applying plan", creates=len(plan.creates), patches=len(plan.patches),
                      deletes=len(plan.deletes), status=plan.status is not None, events=len(plan.events))
            result = self.executor.apply(mpijob, plan)
            for ok, rv in result.written.items():
                self.expectations.expect_object(key, ok, rv, quiet=ok in result.patched)
            for ok, uid in result.gone.items():
                if ok[0] != MPIJOBS.plural:
                    self.expectations.expect_gone(key, ok, uid)
            for ev in plan.events if not result.stopped else []:  # an apply that stopped sent none
                if ev.reason in EVENT_METRICS:
                    EVENT_METRICS[ev.reason].inc()
                log.info("event", type=ev.type, reason=ev.reason, message=ev.message)
            if not result.stopped:
                explain_metrics.record(mpijob, plan.events, self.now())  # why and how long (issue 51)
        if not result.stopped:
            self._record_progress(key, mpijob, plan.status)
        return result

    @staticmethod
    def _record_progress(key: str, mpijob: dict, new_status: dict | None) -> None:
        ns, name = split_key(key)
        job_status = new_status if new_status is not None else (mpijob.get("status") or {})
        suspended = bool(((mpijob.get("spec") or {}).get("runPolicy") or {}).get("suspend"))
        since = status.not_running_since(job_status, suspended)
        if since is None:
            with contextlib.suppress(KeyError):
                metrics.job_not_running_since.remove(ns, name)
        else:
            metrics.job_not_running_since.labels(ns, name).set(since.timestamp())

    def _read_logs(self, key: str, mem: JobMemory, plan: Plan) -> None:
        """The launcher logs the verdict waits on, asked of the reader threads (controller/logreader.py),
        which queue `key` again with what they said; a report known now (no pods/log granted: judged
        without it) plans again at once, a retry not yet due when it is."""
        off = dict(self.config.features_off).get("launcher-log")
        added, wait = self.log_reader.ask(key, mem, plan.read_logs, off=off)
        if added:
            self.queue.add(key)
        elif wait is not None:
            self.queue.add_after(key, wait)

    def _reports(self, mem: JobMemory) -> dict:
        with self.memory.lock:  # the reader threads add to it
            return dict(mem.reports)

    def _settle(self, mem: JobMemory, mpijob: dict) -> float:
        bringing_up = pace.bringing_up(mpijob)
        with self.memory.lock:  # the pod informer's thread writes the pace too: read it whole
            return pace.settle_remaining(mem.pace, time.monotonic(), bringing_up=bringing_up)

    def _held(self, mem: JobMemory, held: bool) -> None:
        """Remember since when this MPIJob's minor writes are held (the cap of pace.py counts from
        there); once its pods are quiet, its pace starts afresh."""
        now = time.monotonic()
        with self.memory.lock:
            kept = mem.pace
            if held:
                kept.held_since = kept.held_since or now
            elif pace.settle_remaining(pace.Pace(kept.last_pod_event), now) == 0:
                mem.pace = pace.Pace()
            else:
                kept.held_since = None

    def _still_taken(self, mem: JobMemory, what: str) -> str | None:
        """The message of a name found taken by a foreign object, while that object exists (`what`:
        TAKEN_POLICY, the NetworkPolicy's name, or TAKEN_CHILD, any other child's)."""
        found = mem.taken.get(what)
        if found is None:
            return None
        if self.executor.exists(found[1]):
            return found[0]
        log.info("the object in the way is gone", detail=found[0])
        del mem.taken[what]
        return None

    def _caught_up(self, key: str) -> bool:
        # Marked first: the event that shows a pending write, if it comes while we look, enqueues
        # `key` again instead of passing as an echo (Expectations.echo); satisfied() unmarks it.
        self.expectations.deferred(key)
        for ok in self.expectations.pending(key):
            store, store_rv = self.stores.get(ok[0]), self.store_rv.get(ok[0])
            cached = store.get(f"{ok[1]}/{ok[2]}") if store is not None else None
            self.expectations.observe(key, ok, cached, store_rv() if store_rv is not None else None)
        return self.expectations.satisfied(key)
