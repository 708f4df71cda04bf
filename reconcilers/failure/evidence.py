"""What the launcher itself reported when it ended: the evidence that a worker's loss cut ranks short
(docs/architecture.md section 9.1). Pure: the controller streams the log (controller/evidence.py,
controller/logscan.py) and asks here what each line means; nothing in this module does I/O.

Kubernetes' objects cannot tell a run whose ranks finished from one cut short when `mpirun` exits 0
either way: Open MPI 5's (PRRTE 3.0) does so after "lost communication with a remote daemon". The
pods only say that a worker went away while the launcher pod ran, not whether `mpirun` was running
then (a launcher that prepares for 40 s before `mpirun` loses nothing when a worker is replaced
meanwhile). The launcher's own output says it: Open MPI's runtime prints one of the lines below
whenever it loses a daemon or a rank, and prints none when every rank finished.

A worker-loss policy per MPIJob (annotation WORKER_LOSS_ANNOTATION) says how a loss is judged:
- `Evidence` (the default): an exit 0 is Succeeded unless the launcher's log shows a lost daemon or
  rank, whether or not a loss was seen; a log that cannot be read counts as cut short after a loss
  seen (never a silent success), and is a success said so without one.
- `ExitCode`: the launcher's exit code alone, for launchers that handle losses themselves (elastic
  Horovod re-reads discover_hosts.sh and carries on). The default for an elastic launcher
  (reconcilers/discovery.py is_elastic: horovodrun given `--host-discovery-script` discover_hosts.sh).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconcilers import discovery, status

WORKER_LOSS_ANNOTATION = "mpijob-operator.dev/worker-loss"
EVIDENCE = "Evidence"
EXIT_CODE = "ExitCode"
POLICIES = (EVIDENCE, EXIT_CODE)

# What is read of the launcher's log: everything it printed from LOSS_MARGIN_S before the first loss
# seen (`sinceTime`; the whole log when no loss was seen), scanned line by line as it streams, never
# kept (controller/logscan.py). PRRTE prints the lost daemon's message when it loses it, which can
# be far from the end: a launcher that evaluates, converts or uploads after mpirun prints as much
# as it likes. The bound is on the bytes scanned: reached, the report says so (`unreadable`), which
# the verdict weighs as a log it could not read, never as a clean one (workerloss.py judge).
LOG_SCAN_LIMIT_BYTES = 64 * 1024 * 1024
# The loss's time is the API server's (a delete's) or a node's (a container's end), the log's
# timestamps the launcher's node's; and a record is written by the first reconcile after the loss.
LOSS_MARGIN_S = 60

# Open MPI's runtime (ORTE in Open MPI 4, PRRTE in Open MPI 5) on a lost daemon or a rank cut short.
_CUT_SHORT = (
    re.compile(r"\b(?:PRTE|ORTE|PRRTE) has lost communication with (?:a remote daemon|its daemon)"),
    re.compile(r"\bThe system has lost communication with the following daemon"),
    re.compile(r"\bnoticed that process rank \d+ with PID \d+ on node \S+ exited on signal \d+"),
)
# Words every line of _CUT_SHORT holds: a text without any of them holds none of those lines.
_HINTS = ("lost communication", "exited on signal")


@dataclass(frozen=True)
class LauncherReport:
    """What the launcher pod `uid`'s log says: `cut_short` the line that shows a loss cut ranks short
    (None: its log shows none), or `unreadable` why the log could not be read."""

    uid: str
    cut_short: str | None = None
    unreadable: str | None = None


def first_cut_short(text: str) -> str | None:
    """The first line of `text` (whole lines) that shows a lost daemon or rank, trimmed; None if none.
    Searched as one block: no pattern spans a line's end, so this is a line-by-line scan's answer."""
    if not any(hint in text for hint in _HINTS):  # a literal search first: the regexes are 10x slower
        return None
    hits = [m.start() for p in _CUT_SHORT if (m := p.search(text)) is not None]
    if not hits:
        return None
    at = min(hits)
    end = text.find("\n", at)
    return text[text.rfind("\n", 0, at) + 1:end if end >= 0 else len(text)].strip()[:300]


def scan(uid: str, text: str) -> LauncherReport:
    """The report of a launcher log's text: the first line that shows a lost daemon or rank."""
    return LauncherReport(uid, cut_short=first_cut_short(text))


def read_since(losses: list[datetime | None]) -> str | None:
    """Where a launcher log's read starts (`sinceTime`): LOSS_MARGIN_S before the earliest of the
    times a loss is known by; None (the whole log) when none is known."""
    known = [t for t in losses if t is not None]
    return status.fmt_time(min(known) - timedelta(seconds=LOSS_MARGIN_S)) if known else None


def policy(mpijob: dict) -> str:
    """The MPIJob's worker-loss policy: its annotation (validated: validation.py), else ExitCode for an
    elastic launcher (reconcilers/discovery.py is_elastic), else Evidence."""
    meta = mpijob.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(WORKER_LOSS_ANNOTATION)
    if value in POLICIES:
        return value
    return EXIT_CODE if discovery.is_elastic(mpijob) else EVIDENCE
