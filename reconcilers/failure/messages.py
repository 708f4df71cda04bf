"""What the status says of the launcher's retries (docs/architecture.md section 11): `Restarting`'s
message for a failed attempt (its cause, counted or not, the retries used, how the launcher runs
again), the workers lost, and the MPIJob's failure that the attempts decide (`verdict`,
`permanent_exit`). Pure; the attempts are judged and counted in reconcilers/failure/retries.py.
"""

from __future__ import annotations

import re

from reconcilers.context import JobContext
from reconcilers.explain import ends, facts
from reconcilers.failure import workerexits
from reconcilers.failure.afresh import ends_its_job, remade
from reconcilers.failure.restartpolicy import EXIT_CODE, backoff_limit, launcher_policy
from reconcilers.failure.retries import (
    Accounts,
    Failure,
    disruption,
    ended,
    failures,
    name_of,
    uid_of,
)

# The Failed reason of restartPolicy ExitCode names the code, PermanentExitCode<N> (issue 35: "its
# reason naming the code"); clients match the prefix (README, "Troubleshooting").
R_PERMANENT_EXIT_CODE = "PermanentExitCode"
R_BACKOFF_LIMIT = "BackoffLimitExceeded"



def budget(ctx: JobContext, accounts: Accounts) -> str:
    limit = backoff_limit(ctx.job)
    free = accounts.total - accounts.total_counted
    return (f"{accounts.total_counted} of {limit} retries (runPolicy.backoffLimit) used"
            + (f", {free} not counted" if free else ""))


def restarting(ctx: JobContext, accounts: Accounts, f: Failure, attempt_no: int, lost: list[str],
               workers_renewed: bool = False) -> str:
    """Restarting's message for failure `f`: the attempt (its number among the failed ones,
    `attempt_no`), its cause, counted or not, the retries used, and how the launcher runs again
    (`workers_renewed`: the workers are being made afresh, children.workers_renewed)."""
    drained = ends_its_job(ctx, accounts.entries)  # (made afresh once its Job shows the end)
    afresh = f.pod in (remade(ctx, workers_renewed, accounts), name_of(drained) if drained is not None else None)
    how = ("the launcher Job is made afresh" if afresh
           else "the launcher restarts in place" if _in_place_next(ctx, f) else "the launcher Job starts a new pod")
    workers = f" after {', '.join(lost)}" if lost and "disrupted" not in f.cause else ""
    where, cause = described(ctx, f)
    return (f"MPIJob {ctx.key} is restarting: launcher attempt {attempt_no} ({where}) failed: "
            f"{cause}{workers}; {'counted' if f.counted else 'not counted'}, {budget(ctx, accounts)}; {how}.")


def described(ctx: JobContext, f: Failure) -> tuple[str, str]:
    """('pod P, node N', its cause) of a failed attempt: its exit code with what the kubelet recorded
    of it, the memory limit of an OOMKilled container, the signal (reconcilers/explain/ends.py)."""
    pod = next((p for p in ctx.pods.launchers if name_of(p) == f.pod), None)
    if pod is None or not f.cause.startswith("exit code"):
        return f"pod {f.pod}", f.cause
    base, sep, rest = f.cause.partition("; ")
    detail = ends.run_detail(facts.with_template(pod, ctx.job), f.exit_code)
    return facts.where(pod), (f"exit code {f.exit_code} ({detail})" if detail else base) + sep + rest


def _in_place_next(ctx: JobContext, f: Failure) -> bool:
    pod = next((p for p in ctx.pods.launchers if name_of(p) == f.pod), None)
    return pod is not None and f.in_place and not ended(pod) and (pod.get("status") or {}).get("phase") != "Succeeded"


def lost_workers(ctx: JobContext) -> list[str]:
    """What ended each worker pod that is gone or going (for messages): disrupted, or deleted/ended;
    those whose delete the controller saw though the cache no longer holds them included
    (Inputs.gone_workers, as workerloss.py counts them: a replaced pod goes in a fraction of a second)."""
    out = []
    cached = {uid_of(p) for p in ctx.pods.workers}
    gone = [p for p in ctx.inputs.gone_workers if uid_of(p) not in cached]
    for pod in [*ctx.pods.workers, *gone]:
        if disruption(pod) is not None or pod in gone or (pod.get("metadata") or {}).get("deletionTimestamp") or (
                pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            out.append(ends.ended_text(facts.with_template(pod, ctx.job)))  # reconcilers/explain/ends.py
        elif ends.restarted_since(pod, _newest_launcher_start(ctx)):
            out.append(ends.ended_text(facts.with_template(pod, ctx.job)))  # its container restarted in place
    return out


def _newest_launcher_start(ctx: JobContext) -> str:
    """When the newest launcher pod was created ('' when there is none): a worker's container that
    ended since then was lost during the current attempt."""
    return max(((p.get("metadata") or {}).get("creationTimestamp") or "" for p in ctx.pods.launchers), default="")


def verdict(ctx: JobContext, accounts: Accounts) -> tuple[str, str] | None:
    """(reason, message) of the MPIJob's failure that the launcher's attempts decide, before the
    launcher Job shows it: an exit code that restartPolicy ExitCode makes permanent (the Job's
    podFailurePolicy fails it too, a second later), or more counted failures than
    runPolicy.backoffLimit allows (the ledger's count and the new ones; the Job, a failure wider, is
    stopped)."""
    fails = accounts.fails
    permanent = next((f for f in fails if f.permanent), None)
    if permanent is not None:
        return permanent_reason(permanent.exit_code), _permanent_message(ctx, permanent.exit_code, permanent.pod)
    limit = backoff_limit(ctx.job)
    if accounts.total_counted <= limit:
        return workerexits.verdict(ctx)  # a worker that keeps exiting by itself (workerexits.py)
    news = accounts.news
    last = next((f for f in reversed(news) if f.counted), None)
    free = accounts.total - accounts.total_counted
    at, cause = described(ctx, last) if last is not None else ("", "")
    where = f"; last: attempt {accounts.book.failed + news.index(last) + 1} ({at}) {cause}" if last is not None else ""
    return R_BACKOFF_LIMIT, (
        f"MPIJob {ctx.key} has failed: the launcher failed {accounts.total_counted} time(s), more than "
        f"runPolicy.backoffLimit ({limit}) allows{where}" + (f" ({free} failure(s) not counted)" if free else ""))


def permanent_reason(code: int | None) -> str:
    """`PermanentExitCode3` for exit code 3; the bare prefix when the code is unknown."""
    return f"{R_PERMANENT_EXIT_CODE}{code}" if code is not None else R_PERMANENT_EXIT_CODE


def _permanent_message(ctx: JobContext, code: int | None, pod: str) -> str:
    where = f" (pod {pod})" if pod else ""
    return (f"MPIJob {ctx.key} has failed: the launcher{where} exited with code {code if code is not None else '?'}, "
            "which restartPolicy ExitCode treats as permanent (1-127: not retried; 128-255 are retried, counted "
            "against runPolicy.backoffLimit)")


_JOB_EXIT = re.compile(r"exit code (\d+)")


def permanent_exit(ctx: JobContext, reason: str, message: str) -> tuple[str, str] | None:
    """For the launcher Job's failure by its podFailurePolicy under restartPolicy ExitCode: the
    MPIJob's reason and a message naming the exit code (None for any other failure)."""
    if reason != "PodFailurePolicy" or launcher_policy(ctx.job) != EXIT_CODE:
        return None
    found = next((f for f in reversed(failures(ctx, {})) if f.permanent), None)
    if found is not None:
        return permanent_reason(found.exit_code), _permanent_message(ctx, found.exit_code, found.pod)
    m = _JOB_EXIT.search(message or "")  # the pod left the cache: the Job controller's message names it
    code = int(m.group(1)) if m else None
    return permanent_reason(code), _permanent_message(ctx, code, "")
