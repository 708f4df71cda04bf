"""What the controller remembers of each MPIJob between reconciles, in one place (docs/architecture.md
section 3.2).

Ten things outlive a reconcile: the last refused write (reconcilers/refusal.py), a child's name
taken by a foreign object, the pace of its pods (reconcilers/pace.py), the status and the child
patches its last pass wrote (so that their events can be told for echoes, reconcilers/news.py),
the expectations of its writes (controller/expectations.py), what its launcher pods' logs said, the
log reads retried after a transient answer (controller/evidence.py), the worker pods deleted since
its last plan (reconcilers/failure/workerloss.py), and its worker pods last seen disrupted
(reconcilers/failure/retries.py; a launcher pod is held by a finalizer until its end is recorded
instead, reconcilers/failure/hold.py); plus two metric series named after it. A restart loses the last
four harmlessly: a log is read again (its retries counted afresh), and a delete or a disruption the
caches no longer show is a gap docs/architecture.md sections 9.1 and 10 name. All of them belong to
one MPIJob, that is one uid: a namesake created after a delete (the same ns/name, generation 1
again) must start blank, never inherit a refusal or a held write of its predecessor.

So a `JobMemory` carries the uid it was made for, and `JobMemories.of(key, uid)` hands out the one
of that uid, forgetting a predecessor's first. `forget(key)` is the single rule that drops a key:
called on a delete event, on a uid change seen in an update or a relist, and when a reconcile finds
the MPIJob gone from the cache. A memory handed out before a forget is detached: whatever is
written to it afterwards (a worker still finishing the old object's reconcile) is garbage, not
state of the next namesake.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from controller import metrics
from controller.evidence import Retry
from controller.expectations import Expectations
from informers.store import split_key
from reconcilers import names
from reconcilers.failure.evidence import LauncherReport
from reconcilers.pace import Pace
from reconcilers.refusal import Refusal

# How long, and how many, disrupted pods are remembered past the cache: long enough for any reconcile
# to see them (a worker's disruption binds the launcher attempt it ends within seconds), few enough
# that an MPIJob evicted over and over costs little memory.
DISRUPTED_KEEP_S = 600.0
DISRUPTED_MAX = 64


TAKEN_CHILD, TAKEN_POLICY = "child", "policy"


@dataclass
class JobMemory:
    """One MPIJob's memory; `uid` is the MPIJob it was made for."""

    uid: str
    refusal: Refusal | None = None
    refusal_shown: bool = False  # the MPIJob's status and an Event show `refusal` (written by a pass)
    # TAKEN_CHILD or TAKEN_POLICY -> (message, API path) of a name held by a foreign object: a child's,
    # or the MPIJob's NetworkPolicy's, which costs only its isolation (reconcilers/netpol.py)
    taken: dict[str, tuple[str, str]] = field(default_factory=dict)
    pace: Pace = field(default_factory=Pace)
    launcher: str | None = None  # the launcher name of its mpi_operator_job_info series
    status_sent: dict | None = None  # the status its last pass wrote (reconcilers/news.status_echo)
    # (plural, namespace, name) -> the merge patch its last pass sent to that child, until its event
    # is seen (reconcilers/news.patch_echo)
    patches_sent: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    # launcher pod uid -> what its log said, once read (reconcilers/failure/evidence.py, controller/evidence.py)
    reports: dict[str, LauncherReport] = field(default_factory=dict)
    # launcher pod uid -> its log read's transient failures so far, while it is retried (controller/evidence.py)
    log_retries: dict[str, Retry] = field(default_factory=dict)
    # worker pods whose delete event came since the last applied plan (reconcilers/failure/workerloss.py)
    gone_workers: list[dict] = field(default_factory=list)
    # pod uid -> (monotonic time, the pod's last state) for its worker pods seen with a DisruptionTarget
    # condition: an evicted worker can leave the cache before a reconcile sees it (reconcilers/failure/retries.py)
    disrupted: dict[str, tuple[float, dict]] = field(default_factory=dict)


class JobMemories:
    """ns/name -> JobMemory of one uid. Thread-safe: the informers' reflector threads (events), the
    workers (one per key at a time) and the log readers (a memory's `reports` and `log_retries`,
    controller/logreader.py) share it, under `lock`."""

    def __init__(self, expectations: Expectations) -> None:
        self.expectations = expectations
        self._by_key: dict[str, JobMemory] = {}
        # Reentrant: the controller also holds it to read or write a pace whole (pod thread vs worker).
        self.lock = threading.RLock()

    def of(self, key: str, uid: str) -> JobMemory:
        """The memory of the MPIJob `key` with `uid`; a predecessor's (another uid) is forgotten first."""
        with self.lock:
            mem = self._by_key.get(key)
            if mem is not None and mem.uid == uid:
                return mem
            if mem is not None:
                self._forget_locked(key)
            mem = self._by_key[key] = JobMemory(uid)
            return mem

    def peek(self, key: str) -> JobMemory | None:
        with self.lock:
            return self._by_key.get(key)

    def pod_event(self, key: str, uid: str, now: float) -> None:
        """A pod of the cached MPIJob `key` (with `uid`) moved: remember when (reconcilers/pace.py)."""
        with self.lock:
            self.of(key, uid).pace.last_pod_event = now

    def pod_disrupted(self, key: str, uid: str, pod: dict, now: float) -> None:
        """A pod of the cached MPIJob `key` (with `uid`) carries DisruptionTarget: keep its last state
        for DISRUPTED_KEEP_S, at most DISRUPTED_MAX of them (the oldest go first)."""
        with self.lock:
            seen = self.of(key, uid).disrupted
            seen[(pod.get("metadata") or {}).get("uid", "")] = (now, pod)
            for old in sorted(seen, key=lambda u: seen[u][0])[:max(0, len(seen) - DISRUPTED_MAX)]:
                del seen[old]

    def disrupted(self, mem: JobMemory, now: float) -> list[dict]:
        """The disrupted pods `mem` remembers, those older than DISRUPTED_KEEP_S forgotten."""
        with self.lock:
            for u in [u for u, (t, _) in mem.disrupted.items() if now - t > DISRUPTED_KEEP_S]:
                del mem.disrupted[u]
            return [p for _, p in mem.disrupted.values()]

    def seen(self, key: str, uid: str | None) -> None:
        """An add or update of MPIJob `key` carries `uid`: a changed one is a namesake (the delete
        went unseen, e.g. during a watch outage whose relist shows the new object as an update)."""
        with self.lock:
            mem = self._by_key.get(key)
            if mem is not None and uid and mem.uid != uid:
                self._forget_locked(key)

    def forget(self, key: str) -> None:
        """Drops everything remembered of `key`: the one place that does (module docstring)."""
        with self.lock:
            self._forget_locked(key)

    def _forget_locked(self, key: str) -> None:
        mem = self._by_key.pop(key, None)
        self.expectations.forget(key)
        ns, name = split_key(key)
        launcher = mem.launcher if mem is not None and mem.launcher else names.launcher_name(
            {"metadata": {"name": name}})
        with contextlib.suppress(KeyError):
            metrics.job_info.remove(launcher, ns)
        with contextlib.suppress(KeyError):
            metrics.job_not_running_since.remove(ns, name)

    def __len__(self) -> int:
        with self.lock:
            return len(self._by_key)
