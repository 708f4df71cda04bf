"""Reads what a launcher pod reported as it ended: the end of its log, for the verdict on an Open MPI
exit 0 (reconcilers/failure/evidence.py says what is looked for; docs/architecture.md 9.1).

A read, not a write: no leadership guard. Once per launcher pod (by uid, in the MPIJob's memory:
controller/job_memory.py), and again only after an answer that can change:
- The newest lines always arrive: the last LOG_TAIL_LINES lines are asked for without `limitBytes`
  (with both, the kubelet seeks to the start of those lines and writes forward until the byte limit,
  which drops the newest bytes, where PRRTE's message is), streamed, and only the last
  LOG_LIMIT_BYTES kept in memory (client/rest.py get_tail).
- What cannot come back is a report at once, `unreadable`: 404 (the pod gone), 400 (the container
  unknown), 403 (RBAC: `get pods/log`), any other 4xx.
- What can (429, 5xx: an API server rolling, a kubelet timing out; a connection error) is tried again
  through the work queue, never a sleep in a worker: after 1, 2, 4, 8, 16, 30 s, a Retry-After
  honoured, and `unreadable` once a failure comes RETRY_FOR_S (a minute) after the first. A restart
  forgets the count and reads afresh, which changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from client.errors import CONNECTION_ERRORS, ApiError
from client.rest import RestClient
from controller import logs
from reconcilers.failure import evidence
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import LogRead

log = logs.get("evidence")
# The API server relays the log from the node's kubelet: a node that does not answer must not hold
# a reconcile worker for long. It bounds the connect, each read and the whole answer.
READ_TIMEOUT_S = 15.0
# Waits between the tries of a read that met a transient answer, and how long after the first such
# answer a read is given up (`unreadable`): about a minute in all.
RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
RETRY_FOR_S = 60.0
# Answers that can change if asked again: throttled, or the API server or a kubelet away for a while.
TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})


@dataclass
class Retry:
    """A launcher pod's read that met transient answers: when the first came (monotonic), how many,
    and when the next try may go."""

    first: float
    failures: int
    next_at: float
    why: str


@dataclass(frozen=True)
class Transient:
    """An answer worth another try; `retry_after` what the server asked for, if anything."""

    why: str
    retry_after: float | None = None


def read(client: RestClient, want: LogRead) -> LauncherReport | Transient:
    path = f"/api/v1/namespaces/{want.namespace}/pods/{want.pod}/log"
    query: dict = {"tailLines": evidence.LOG_TAIL_LINES}
    if want.container:
        query["container"] = want.container
    try:
        data = client.get_tail(path, evidence.LOG_LIMIT_BYTES, timeout=READ_TIMEOUT_S, query=query)
    except ApiError as e:
        why = f"{e.status} {e.reason}: {e.message}"[:300]
        if e.status in TRANSIENT or e.status >= 500:
            return Transient(why, e.retry_after)
        if e.status == 403:
            why = f"{why} (the operator's RBAC must grant get pods/log)"[:400]
        return LauncherReport(want.uid, unreadable=why)
    except CONNECTION_ERRORS as e:
        return Transient(f"{type(e).__name__}: {e}"[:300])
    report = evidence.scan(want.uid, data.decode("utf-8", "replace"))
    log.info("the launcher's log was read", pod=want.pod, cut_short=report.cut_short)
    return report


def read_wanted(client: RestClient, reports: dict[str, LauncherReport], retries: dict[str, Retry],
                wanted: Sequence[LogRead], now: float, off: str | None = None) -> tuple[bool, float | None]:
    """Reads each launcher log a plan waits on (reconcilers/failure/workerloss.py judge) that `reports`
    (the MPIJob's memory, by pod uid) has no report of yet and whose retry (`retries`) is due at
    `now` (monotonic). Returns (a report was added: plan again now, seconds until the next retry is
    due or None). `off`: why the operator may not read logs (its RBAC lacks pods/log, controller/access.py):
    each wanted log is unreadable for that reason, without a request."""
    added, wait = False, None
    for want in wanted:
        if want.uid in reports:
            continue
        if off is not None:
            reports[want.uid], added = LauncherReport(want.uid, unreadable=off), True
            continue
        retry = retries.get(want.uid)
        if retry is not None and now < retry.next_at:
            wait = _sooner(wait, retry.next_at - now)
            continue
        got = read(client, want)
        if isinstance(got, LauncherReport):
            if got.unreadable is not None:
                log.warning("the launcher's log could not be read", pod=want.pod, error=got.unreadable)
            reports[want.uid], added = got, True
            retries.pop(want.uid, None)
            continue
        retry = _failed(retry, got, now)
        if now - retry.first >= RETRY_FOR_S:
            why = f"{got.why} (tried {retry.failures} times over {now - retry.first:.0f}s)"
            log.warning("the launcher's log could not be read; giving up", pod=want.pod, error=why)
            reports[want.uid], added = LauncherReport(want.uid, unreadable=why), True
            retries.pop(want.uid, None)
            continue
        retries[want.uid] = retry
        log.info("the launcher's log could not be read yet; trying again", pod=want.pod, error=got.why,
                 failures=retry.failures, after=round(retry.next_at - now, 1))
        wait = _sooner(wait, retry.next_at - now)
    return added, wait


def _failed(retry: Retry | None, got: Transient, now: float) -> Retry:
    """The retry after one more transient answer: the next delay of RETRY_DELAYS_S, or the server's
    Retry-After if longer, but never past the give-up time (the last try lands on it)."""
    first = retry.first if retry is not None else now
    failures = (retry.failures if retry is not None else 0) + 1
    delay = max(RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S)) - 1], got.retry_after or 0.0)
    delay = min(delay, max(first + RETRY_FOR_S - now, 0.0))
    return Retry(first, failures, now + delay, got.why)


def _sooner(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)
