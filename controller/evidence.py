"""Reads what a launcher pod reported as it ended: the end of its log, for the verdict on an exit 0
after a worker's loss (reconcilers/failure/evidence.py says what is looked for; docs/architecture.md 9.1).

A read, not a write: no leadership guard, no retry loop. A log that cannot be read (the node gone,
its kubelet unreachable, the container's log rotated away) is a report too, `unreadable`, which the
verdict counts as cut short; so the read is tried once per launcher pod and remembered
(controller/job_memory.py), and a restart reads it again, which changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from client.errors import CONNECTION_ERRORS, ApiError
from client.rest import RestClient
from controller import logs
from reconcilers.failure import evidence
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import LogRead

log = logs.get("evidence")
# The API server relays the log from the node's kubelet: a node that does not answer must not hold
# a reconcile worker for long.
READ_TIMEOUT_S = 15.0


def read(client: RestClient, want: LogRead) -> LauncherReport:
    path = f"/api/v1/namespaces/{want.namespace}/pods/{want.pod}/log"
    query = {"tailLines": evidence.LOG_TAIL_LINES, "limitBytes": evidence.LOG_LIMIT_BYTES}
    if want.container:
        query["container"] = want.container
    try:
        text = client.get_text(path, timeout=READ_TIMEOUT_S, query=query)
    except ApiError as e:
        why = f"{e.status} {e.reason}: {e.message}"[:300]
        log.warning("the launcher's log could not be read", pod=want.pod, error=why)
        return LauncherReport(want.uid, unreadable=why)
    except CONNECTION_ERRORS as e:
        why = f"{type(e).__name__}: {e}"[:300]
        log.warning("the launcher's log could not be read", pod=want.pod, error=why)
        return LauncherReport(want.uid, unreadable=why)
    report = evidence.scan(want.uid, text)
    log.info("the launcher's log was read", pod=want.pod, cut_short=report.cut_short)
    return report


def read_wanted(client: RestClient, reports: dict[str, LauncherReport], wanted: Sequence[LogRead]) -> bool:
    """Reads each launcher log a plan waits on (reconcilers/failure/workerloss.py judge) that `reports`
    (the MPIJob's memory, by pod uid) has no report of yet, once each; True when any was read, so that
    the MPIJob is planned again with what they said."""
    todo = [r for r in wanted if r.uid not in reports]
    for want in todo:
        reports[want.uid] = read(client, want)
    return bool(todo)
