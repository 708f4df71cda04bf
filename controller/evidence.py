"""Reads what a launcher pod reported as it ended: its log, scanned for the verdict on an Open MPI
exit 0 (reconcilers/failure/evidence.py says what is looked for; docs/architecture.md 9.1). The
reads run on controller/logreader.py's threads, never a reconcile worker's.

A read, not a write: no leadership guard. Once per launcher pod (by uid, in the MPIJob's memory:
controller/job_memory.py), and again only after an answer that can change:
- Evidence anywhere after the loss: the log from `sinceTime` (the plan's LogRead.since, just before
  the first loss seen; the whole log without one) is scanned as it streams, line by line, never kept
  (controller/logscan.py), up to LOG_SCAN_LIMIT_BYTES (`limitBytes` one more, so that the kubelet
  stops there too) and READ_DEADLINE_S. A bound reached before the log's end or a lost daemon is a
  report, `unreadable` saying which bound and how far the scan got: the verdict weighs it as a log
  not read, never as a clean one.
- What cannot come back is a report at once, `unreadable`: 404 (the pod gone), 400 (the container
  unknown), 403 (RBAC: `get pods/log`), any other 4xx.
- What can (429, 5xx: an API server rolling, a kubelet timing out; a connection error, a node that
  does not answer within READ_TIMEOUT_S) is tried again through the work queue, never a sleep in a
  thread: after 1, 2, 4, 8, 16, 30 s, a Retry-After honoured, and `unreadable` once a failure comes
  RETRY_FOR_S (a minute) after the first. A restart forgets the count and reads afresh, which
  changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from client.errors import CONNECTION_ERRORS, ApiError
from client.rest import RestClient
from controller import logs, logscan
from reconcilers.failure import evidence
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import LogRead

log = logs.get("evidence")
# The API server relays the log from the node's kubelet: one that does not answer holds a reader
# thread this long per try (the connect, and each read of the stream).
READ_TIMEOUT_S = 15.0
# The whole of one read, however slowly its bytes come: reached, the read is over (a report).
READ_DEADLINE_S = 60.0
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


def read(client: RestClient, want: LogRead, clock: Callable[[], float] = time.monotonic) -> LauncherReport | Transient:
    path = f"/api/v1/namespaces/{want.namespace}/pods/{want.pod}/log"
    query: dict = {"limitBytes": evidence.LOG_SCAN_LIMIT_BYTES + 1}
    if want.container:
        query["container"] = want.container
    if want.since:
        query["sinceTime"] = want.since
    try:
        with client.get_stream(path, timeout=READ_TIMEOUT_S, query=query) as chunks:
            got = logscan.scan(chunks, evidence.first_cut_short, evidence.LOG_SCAN_LIMIT_BYTES,
                               deadline=clock() + READ_DEADLINE_S, clock=clock)
    except ApiError as e:
        why = f"{e.status} {e.reason}: {e.message}"[:300]
        if e.status in TRANSIENT or e.status >= 500:
            return Transient(why, e.retry_after)
        if e.status == 403:
            why = f"{why} (the operator's RBAC must grant get pods/log)"[:400]
        return LauncherReport(want.uid, unreadable=why)
    except CONNECTION_ERRORS as e:
        return Transient(f"{type(e).__name__}: {e}"[:300])
    log.info("the launcher's log was read", pod=want.pod, since=want.since, bytes=got.read,
             cut_short=got.found, bound=got.bound)
    if got.found is None and got.bound is not None:
        return LauncherReport(want.uid, unreadable=_bound_reached(want, got))
    return LauncherReport(want.uid, cut_short=got.found)


def _bound_reached(want: LogRead, got: logscan.Scanned) -> str:
    """Why a scan that stopped at a bound found nothing: which bound, and how far it got."""
    where = f"since {want.since}" if want.since else "from its start"
    bound = (f"its bound of {evidence.LOG_SCAN_LIMIT_BYTES // 2**20} MiB" if got.bound == "bytes"
             else f"its bound of {READ_DEADLINE_S:.0f}s")
    return (f"the scan reached {bound} before the log's end: no lost daemon or rank in the "
            f"{got.read / 2**20:.1f} MiB read {where}, the rest not read")


def due(reports: dict[str, LauncherReport], retries: dict[str, Retry], want: LogRead,
        now: float) -> float | None:
    """0 when `want` is to be read now; the seconds until its retry is due; None once it has a report."""
    if want.uid in reports:
        return None
    retry = retries.get(want.uid)
    return 0.0 if retry is None else max(retry.next_at - now, 0.0)


def settle(reports: dict[str, LauncherReport], retries: dict[str, Retry], want: LogRead,
           got: LauncherReport | Transient, now: float) -> float | None:
    """Records what one read of `want` gave: a report (None: plan again now), or a transient answer,
    tried again after the seconds returned, or given up (a report) RETRY_FOR_S after the first."""
    if isinstance(got, LauncherReport):
        if got.unreadable is not None:
            log.warning("the launcher's log could not be read", pod=want.pod, error=got.unreadable)
        reports[want.uid] = got
        retries.pop(want.uid, None)
        return None
    retry = _failed(retries.get(want.uid), got, now)
    if now - retry.first >= RETRY_FOR_S:
        why = f"{got.why} (tried {retry.failures} times over {now - retry.first:.0f}s)"
        log.warning("the launcher's log could not be read; giving up", pod=want.pod, error=why)
        reports[want.uid] = LauncherReport(want.uid, unreadable=why)
        retries.pop(want.uid, None)
        return None
    retries[want.uid] = retry
    log.info("the launcher's log could not be read yet; trying again", pod=want.pod, error=got.why,
             failures=retry.failures, after=round(retry.next_at - now, 1))
    return retry.next_at - now


def _failed(retry: Retry | None, got: Transient, now: float) -> Retry:
    """The retry after one more transient answer: the next delay of RETRY_DELAYS_S, or the server's
    Retry-After if longer, but never past the give-up time (the last try lands on it)."""
    first = retry.first if retry is not None else now
    failures = (retry.failures if retry is not None else 0) + 1
    delay = max(RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S)) - 1], got.retry_after or 0.0)
    delay = min(delay, max(first + RETRY_FOR_S - now, 0.0))
    return Retry(first, failures, now + delay, got.why)
