"""What the launcher itself reported when it ended: the evidence that a worker's loss cut ranks short
(docs/architecture.md section 9.1). Pure: the controller reads the log (controller/evidence.py) and
hands the text here; nothing in this module does I/O.

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

from reconcilers import discovery

WORKER_LOSS_ANNOTATION = "mpijob-operator.dev/worker-loss"
EVIDENCE = "Evidence"
EXIT_CODE = "ExitCode"
POLICIES = (EVIDENCE, EXIT_CODE)

# What is read of the launcher's log: its end, where mpirun's last words are. PRRTE prints the lost
# daemon's help message (about 15 lines) right before it exits; a program that prints a great deal
# after that is not an MPI launcher whose exit the operator needs to question.
LOG_TAIL_LINES = 500
LOG_LIMIT_BYTES = 256 * 1024

# Open MPI's runtime (ORTE in Open MPI 4, PRRTE in Open MPI 5) on a lost daemon or a rank cut short.
_CUT_SHORT = (
    re.compile(r"\b(?:PRTE|ORTE|PRRTE) has lost communication with (?:a remote daemon|its daemon)"),
    re.compile(r"\bThe system has lost communication with the following daemon"),
    re.compile(r"\bnoticed that process rank \d+ with PID \d+ on node \S+ exited on signal \d+"),
)


@dataclass(frozen=True)
class LauncherReport:
    """What the launcher pod `uid`'s log says: `cut_short` the line that shows a loss cut ranks short
    (None: its log shows none), or `unreadable` why the log could not be read."""

    uid: str
    cut_short: str | None = None
    unreadable: str | None = None


def scan(uid: str, text: str) -> LauncherReport:
    """The report of a launcher log's tail: the first line that shows a lost daemon or rank."""
    for line in text.splitlines():
        if any(p.search(line) for p in _CUT_SHORT):
            return LauncherReport(uid, cut_short=line.strip()[:300])
    return LauncherReport(uid)


def policy(mpijob: dict) -> str:
    """The MPIJob's worker-loss policy: its annotation (validated: validation.py), else ExitCode for an
    elastic launcher (reconcilers/discovery.py is_elastic), else Evidence."""
    meta = mpijob.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(WORKER_LOSS_ANNOTATION)
    if value in POLICIES:
        return value
    return EXIT_CODE if discovery.is_elastic(mpijob) else EVIDENCE
