"""The cause of a failure as one word of a bounded set, for the metric `mpi_operator_failures`
(controller/metrics.py; docs/operations.md, "Metrics"): read from the Restarting or Failed message
that reconcilers/explain/ends.py and reconcilers/failure/messages.py wrote. Pure.

The first cause in CAUSES that the message tells wins: a launcher that failed after a worker was
OOMKilled counts as OOMKilled, the root of it, not as the launcher's exit code.
"""

from __future__ import annotations

# (cause, the words of the messages that tell it), the most specific first.
CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("OOMKilled", ("OOMKilled",)),
    ("Evicted", ("evicted", "Evicted")),
    ("Preempted", ("preempted", "PreemptionByScheduler")),
    ("NodeLost", ("lost its node", "NodeNotReady", "DeletionByTaintManager", "DeletionByPodGC")),
    ("DeadlineExceeded", ("DeadlineExceeded", "activeDeadlineSeconds")),
    ("StartError", ("StartError", "ContainerCannotRun", "could not start")),
    ("Disrupted", ("disrupted", "DisruptionTarget")),
    ("Signal", ("signal ",)),
    ("WorkerLost", ("was lost", "WorkerLost")),
    ("ExitCode", ("exit code", "PermanentExitCode")),
)
OTHER = "Other"
REASONS = (*(c for c, _ in CAUSES), OTHER)


def classify(message: str) -> str:
    """One of REASONS."""
    return next((cause for cause, words in CAUSES if any(w in message for w in words)), OTHER)
