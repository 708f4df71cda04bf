"""The verdict: how the launcher's attempts end the MPIJob, or do not (docs/architecture.md sections 3
and 11). Pure functions over a JobContext and a Draft.

`judge` runs only while the MPIJob is not suspended: a suspend (Kueue's preemption) ends the
launcher's attempt, and that end is neither a finish nor a failure (afresh.stop_for_suspend makes
the launcher Job afresh on the resume). An attempt a disruption ended is no verdict either, whatever
its exit code (afresh.interruption): both are one rule, what ended the attempt decides whether its
end is judged at all.

A name clash (Failed/ResourceExists, no completionTime) is no end: its children run on (plan._held),
so the launcher's end or the deadline still ends the job, and that end replaces the clash's
condition, which is set aside meanwhile, then put back as it was.
"""

from __future__ import annotations

from reconcilers import outcome, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure import messages, retries


def clash_condition(draft: Draft) -> dict | None:
    """Failed/ResourceExists: not an end (no completionTime), the job waits for the name to be free."""
    failed = status.get_condition(draft.status, status.FAILED)
    if failed is not None and failed.get("status") == "True" and failed.get("reason") == status.R_RESOURCE_EXISTS \
            and not draft.status.get("completionTime"):
        return failed
    return None


def judge(ctx: JobContext, draft: Draft, accounts: retries.Accounts) -> None:
    """The launcher's outcome, the failures its attempts add up to, and the deadline."""
    clash = clash_condition(draft)
    at = status.conditions_of(draft.status).index(clash) if clash is not None else 0
    if clash is not None:
        status.remove_condition(draft.status, status.FAILED)
    if not draft.finished():
        outcome.launcher_outcome(ctx, draft, accounts.entries)
    if not draft.finished():
        ended = messages.verdict(ctx, accounts)  # before the launcher Job shows it (retries.py)
        if ended:
            draft.fail(*ended)  # the launcher Job, if it runs on, is stopped by plan._finished
            outcome.not_running_if_never_ran(draft, None)
    if not draft.finished():
        outcome.deadline(ctx, draft)
    if clash is not None and not draft.finished():
        draft.status["conditions"] = status.conditions_of(draft.status)
        draft.status["conditions"].insert(at, clash)
