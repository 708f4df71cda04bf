"""What ends a launcher attempt without a verdict, and the launcher Job made afresh (docs/architecture.md
section 11, "An attempt a suspend or a disruption ended"). Pure: nothing here reads a clock or does I/O.

- `interruption`: a disruption ended the attempt (the launcher pod's own DisruptionTarget, or a
  worker's bound to it, retries.bind): neither a finish nor a counted failure, whatever its exit code.
- `remade`, `relaunch`: the launcher Job that cannot run the attempt again (it completed, or failed
  by its podFailurePolicy), or that failed while the workers are made afresh, is made afresh with its
  ledger (ledger.hand_over, ledger.carry).
- `stop_for_suspend`: a suspend ends the attempt too: the launcher Job that has run is deleted, to be
  made afresh on the resume.
The attempts themselves are listed and counted in reconcilers/failure/retries.py.
"""

from __future__ import annotations

from dataclasses import replace

from reconcilers import ownership, status
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure.ledger import hand_over
from reconcilers.failure.retries import (
    Accounts,
    attempt_order,
    disruption_text,
    ended_by_disruption,
    launcher_pods,
    name_of,
    phase_of,
    restarts,
    why_of,
)
from reconcilers.types import Obj


def interruption(ctx: JobContext, pod: Obj, entries: Obj) -> str | None:
    """Why the launcher pod's current (or last) attempt is no verdict, or None when its end is its own:
    its own DisruptionTarget (a drain, an eviction, a preemption), or a worker's disruption bound to
    it (`bind`, kept in the ledger). Such an attempt is neither a finish nor a counted failure, whatever
    its exit code: Open MPI 5's mpirun exits 0 on SIGTERM and after losing a daemon as readily as after
    its ranks finished, and an exit 1-127 is the host's loss, not the program's (docs/architecture.md
    section 11, "An attempt a disruption or a suspend ended")."""
    own = ended_by_disruption(pod)  # (not one evicted after its end: retries.ended_by_disruption)
    if own is not None:
        return f"launcher pod {name_of(pod)} was disrupted ({disruption_text(own)})"
    return why_of(entries.get(f"{name_of(pod)}#{restarts(ctx, pod)}")) or None


def interrupted_end(ctx: JobContext, entries: Obj) -> Obj | None:
    """The newest launcher pod when it has ended (exit 0 or not) and a disruption ended it
    (`interruption`): its Job, Complete or failed by its podFailurePolicy, cannot run it again, so the
    run goes on in a launcher Job made afresh (`relaunch`), with the budget it had."""
    # (_launchers: held until its end is recorded, reconcilers/failure/hold.py)
    done = [p for p in launcher_pods(ctx) if phase_of(p) in ("Succeeded", "Failed")]
    newest = max(done, key=lambda p: attempt_order(p, 0)) if done else None
    return newest if newest is not None and interruption(ctx, newest, entries) is not None else None


def ends_its_job(ctx: JobContext, entries: Obj) -> Obj | None:
    """`interrupted_end` once its Job cannot run it again: it shows its end, or the pod exited 0 (the
    Job is about to complete). A failed one is retried by its Job (the podFailurePolicy ignores it)."""
    pod = interrupted_end(ctx, entries)
    if pod is None or not (status.job_outcome(ctx.launcher or {}) is not None or phase_of(pod) == "Succeeded"):
        return None
    return pod


# -- a launcher Job made afresh ---------------------------------------------------------------------


def remade(ctx: JobContext, workers_renewed: bool, accounts: Accounts) -> str | None:
    """The launcher pod whose end makes the launcher Job afresh rather than retried by the Job
    controller (docs/architecture.md section 11), or None:
    - a disruption ended it (`interrupted_end`) and its Job has finished: Complete (an exit 0), which
      cannot retry a success, or failed by its podFailurePolicy (an exit 1-127 under ExitCode);
    - it failed while the workers are made afresh (`workers_renewed`, children.py: the Job backend
      after a lost worker), or after, having run with the old ones (news still: a busy mpirun can take
      seconds to see a host gone; not a failure announced before a resume): the Job's next pod would
      come after its backoff (10 s, doubling); a Job made afresh starts with the new workers.
    Never after a failure that ends the MPIJob (restartPolicy ExitCode, 1-127: `Failure.permanent`)."""
    launcher = ctx.launcher
    if launcher is None or not ctx.owned(launcher):
        return None
    if status.job_outcome(launcher) is not None:
        pod = interrupted_end(ctx, accounts.entries)
        return name_of(pod) if pod is not None else None
    ends = [p for p in ctx.pods.launchers if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    newest = max(ends, key=lambda p: attempt_order(p, 0)) if ends else None
    if newest is None or len(ends) < len(ctx.pods.launchers) or (newest.get("status") or {}).get("phase") != "Failed":
        return None  # (a pod still runs, or is being made: the Job retries by itself)
    mine = [f for f in accounts.fails if f.pod == name_of(newest)]
    late = _older_than_workers(ctx, newest) and any(f in accounts.news for f in mine)
    return name_of(newest) if (workers_renewed or late) and not any(f.permanent for f in mine) else None


def _older_than_workers(ctx: JobContext, pod: Obj) -> bool:
    """The pod was created before the worker object that runs now: it ran with workers since made
    afresh. Both times are the API server's (one clock), in whole seconds: the same second is not older
    (a first start creates both in one pass)."""
    made = str(((ctx.workers or {}).get("metadata") or {}).get("creationTimestamp") or "")
    return bool(made) and ctx.owned(ctx.workers) and attempt_order(pod, 0)[0] < made


def relaunch(ctx: JobContext, draft: Draft, accounts: Accounts, workers_renewed: bool) -> bool:
    """The launcher Job made afresh where its own retry cannot or should not run it (`remade`): its
    ledger, the attempt announced, handed over (`hand_over`, `carry`). True while that happens."""
    launcher = ctx.launcher
    if launcher is not None and ctx.owned(launcher) and ownership.deleting(launcher):
        return True
    pod = remade(ctx, workers_renewed, accounts)
    if launcher is None or pod is None:
        return False
    hand_over(ctx, draft, accounts.announced())
    draft.recreate(launcher, f"launcher pod {pod} " + (
        "ended as a disruption ended it: neither a finish nor a failure" if status.job_outcome(launcher) is not None
        else "failed with workers made afresh: it starts with the new ones, not after its backoff"))
    return True


def ran(ctx: JobContext, launcher: Obj) -> bool:
    """The launcher Job has run a pod (or shows one): not one made suspended that never started."""
    st = launcher.get("status") or {}
    counts = ("active", "ready", "terminating", "succeeded", "failed")
    return bool(ctx.pods.launchers or st.get("startTime") or status.job_outcome(launcher) is not None
                or any(isinstance(st.get(k), int) and st.get(k) > 0 for k in counts))


def stop_for_suspend(ctx: JobContext, draft: Draft, accounts: Accounts) -> bool:
    """A suspend (Kueue's preemption) ends the launcher's attempt, and that end is neither a finish nor
    a failure: Open MPI 5's mpirun exits 0 on the SIGTERM (the Job would be Complete), another exits
    non-zero (the Job would count it). So the launcher Job that has run is deleted rather than
    suspended (Foreground: its pod goes first, with the same SIGTERM), nothing of its last attempt is
    judged or counted, and the resume makes it afresh with the ledger as announced before the suspend
    (`hand_over`, `carry`). True when that is done (or under way): nothing else is asked of that Job."""
    launcher = ctx.launcher
    if launcher is None or not ctx.owned(launcher):
        return False
    if ownership.deleting(launcher):
        return True
    if not ran(ctx, launcher):
        return False  # made suspended and never started (a job created suspended, Kueue's admission)
    # (its bindings go along as announced: the attempt they excused is over, neither counted nor
    # pending, and their disrupted pods must not bind the resumed run's attempt)
    done = tuple((k, {**v, "announced": True}) for k, v in accounts.book.not_counted)
    hand_over(ctx, draft, replace(accounts.book, not_counted=done))
    draft.recreate(launcher, "suspended: the attempt it ran is neither a finish nor a failure; "
                             "the resume makes it afresh")
    return True
