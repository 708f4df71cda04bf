"""Reads launcher logs apart from the reconcile workers (docs/architecture.md section 9.1).

A log comes from the launcher's node through the API server: a kubelet that does not answer holds
its reader for READ_TIMEOUT_S a try, and a read scans up to LOG_SCAN_LIMIT_BYTES for up to
READ_DEADLINE_S (controller/evidence.py). Inside a reconcile worker, a few unreachable kubelets
would stall every MPIJob of the cluster. So a reconcile only asks (`ask`: no I/O), and a small pool
of reader threads reads:

- Bounded in concurrency: `threads` readers; in waiting reads: a queue of `capacity` pods, beyond
  which a plan's read waits its turn (its key looked at again after BUSY_RETRY_S).
- Deduplicated per pod: a launcher pod's log is queued or read by one reader at a time, however
  many reconciles ask for it meanwhile.
- The outcome is stored where the next reconcile of that MPIJob finds it (its memory's `reports`
  and `log_retries`, controller/job_memory.py), then its key is queued: data still flows cache ->
  queue -> reconcile -> plan -> apply, and only a reconcile writes.
- A read that cannot be done ends as controller/evidence.py says: tried again through the queue,
  then a report `unreadable` that the verdict weighs (reconcilers/failure/workerloss.py judge).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from client.rest import RestClient
from controller import evidence, logs
from controller.job_memory import JobMemory
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import LogRead

log = logs.get("logreader")
READERS = 4  # reads at once: each mostly waits on a node
CAPACITY = 256  # launcher pods waiting for a reader; one per MPIJob that just ended, at most
BUSY_RETRY_S = 2.0  # when the queue is full, a plan's key is looked at again after this long


@dataclass(frozen=True)
class _Job:
    key: str
    mem: JobMemory
    want: LogRead


class LogReader:
    """The reader threads. `client()` gives the client a read goes through (the executor's);
    `lock` guards every JobMemory's `reports` and `log_retries` (the JobMemories' lock);
    `enqueue`/`enqueue_after` queue an MPIJob's key for a reconcile."""

    def __init__(self, client: Callable[[], RestClient], lock: threading.Lock, enqueue: Callable[[str], None],
                 enqueue_after: Callable[[str, float], None], threads: int = READERS, capacity: int = CAPACITY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.lock, self.enqueue, self.enqueue_after = client, lock, enqueue, enqueue_after
        self.threads, self.clock = threads, clock
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=capacity)
        self._taken: set[str] = set()  # pod uids queued or being read
        self._mu = threading.Lock()
        self._workers: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, name=f"log-reader-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self) -> None:
        """Ends the readers once their current read is over (bounded by its timeouts; they are daemons)."""
        for _ in self._workers:
            try:
                self._jobs.put_nowait(None)
            except queue.Full:
                break  # the daemon threads end with the process

    def ask(self, key: str, mem: JobMemory, wanted: Sequence[LogRead],
            off: str | None = None) -> tuple[bool, float | None]:
        """A reconcile's plan waits on `wanted` (reconcilers/failure/workerloss.py judge): queues each
        that has no report, is not queued already and whose retry is due. Returns (a report was added:
        plan again now, seconds until the key is to be looked at again or None). `off`: why the
        operator may not read logs (its RBAC lacks pods/log, controller/access.py): each wanted log is
        unreadable for that reason, without a request."""
        added, wait = False, None
        for want in wanted:
            with self.lock:
                if off is not None and want.uid not in mem.reports:
                    mem.reports[want.uid], added = LauncherReport(want.uid, unreadable=off), True
                    continue
                after = evidence.due(mem.reports, mem.log_retries, want, self.clock())
            if after is None:
                continue
            if after > 0:
                wait = after if wait is None else min(wait, after)
            elif not self._submit(_Job(key, mem, want)):
                wait = BUSY_RETRY_S if wait is None else min(wait, BUSY_RETRY_S)
        return added, wait

    def _submit(self, job: _Job) -> bool:
        """Queues `job` unless its pod is queued or read already; False when the queue is full."""
        with self._mu:
            if job.want.uid in self._taken:
                return True
            try:
                self._jobs.put_nowait(job)
            except queue.Full:
                log.warning("too many launcher logs wait for a reader; trying again", pod=job.want.pod,
                            waiting=self._jobs.qsize(), after=BUSY_RETRY_S)
                return False
            self._taken.add(job.want.uid)
            return True

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._read(job)
            except Exception:  # a bug must not end a reader: the key is looked at again
                log.exception("a launcher log read failed", pod=job.want.pod)
                with self._mu:
                    self._taken.discard(job.want.uid)
                self.enqueue_after(job.key, BUSY_RETRY_S)

    def _read(self, job: _Job) -> None:
        got = evidence.read(self.client(), job.want, clock=self.clock)
        with self.lock:
            wait = evidence.settle(job.mem.reports, job.mem.log_retries, job.want, got, self.clock())
        with self._mu:  # after the outcome is stored: a reconcile in between finds it, never a gap
            self._taken.discard(job.want.uid)
        if wait is None:
            self.enqueue(job.key)
        else:
            self.enqueue_after(job.key, wait)

    def waiting(self) -> int:
        """Pods queued or being read (for tests and logs)."""
        with self._mu:
            return len(self._taken)
