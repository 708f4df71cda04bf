"""The launcher's retries, told apart by cause and counted by the operator (docs/architecture.md
section 11). Pure: nothing here reads a clock or does I/O.

A launcher *attempt* is one run of the launcher's container: `<pod>#<k>` is the k-th run in pod
`<pod>` (k > 0 only when the container was restarted in place). An attempt that fails is counted
against `runPolicy.backoffLimit`, or not:
- not counted: the launcher pod itself was disrupted (its `DisruptionTarget` condition: eviction,
  preemption, a lost node, the kubelet's resource pressure), and an attempt bound to a worker's
  disruption (the worker pod's `DisruptionTarget`, seen while that attempt ran: its mpirun lost a
  host it could not keep);
- not retried at all: with `restartPolicy: ExitCode`, an exit code of 1-127 (the launcher Job's
  podFailurePolicy fails it at once; `permanent_exit` names the code);
- counted: every other failure, in a new pod or restarted in place.

Who counts: the operator. The Job controller counts failed pods only (not restarts in place) and
decides at once, before the operator can tell a worker's disruption from a plain failure; so the
launcher Job's own `backoffLimit` is `runPolicy.backoffLimit` + the attempts not counted + a net one
failure wide under the operator's count (restartpolicy.job_backoff_limit), and the MPIJob fails
`BackoffLimitExceeded` when the operator's count exceeds `runPolicy.backoffLimit` (the finished
MPIJob then stops its launcher Job, plan.py).

A worker's disruption excuses the one failure it causes (a Job's podFailurePolicy ignores the one
disrupted pod, not the pods after it): the oldest counted failure not announced yet when the
disruption is first seen, else the attempt running then. A retry that starts before the
replacement worker runs, and fails for want of it, is counted: an eviction whose replacement cannot
be scheduled ends the run once the budget is spent (docs/architecture.md section 11).

What must outlive the pods, the cache and the operator is kept in the ledger on the launcher Job
(reconcilers/failure/ledger.py).

How the launcher runs again, in place or in a new pod: reconcilers/failure/restartpolicy.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconcilers import desired, diff, names, namewait, ownership
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure import withheld
from reconcilers.failure.ledger import LEDGER, Ledger, job_limit
from reconcilers.failure.ledger import read as ledger
from reconcilers.failure.restartpolicy import (
    DISRUPTION_TARGET,
    EXIT_CODE,
    PERMANENT_EXIT_CODES,
    launcher_container_name,
    launcher_policy,
)
from reconcilers.types import Obj, Patch

_WHY_MAX = 200  # characters of a reason kept in the ledger
# A failure announced while the launcher already runs again (restarted in place) is followed by
# Running this long after: the status echo of the announcement reconciles nothing (news.py).
RUNNING_AGAIN_S = 1.0


# -- attempts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One launcher attempt that failed: `attempt` `<pod>#<k>`, what ended it, counted or not."""

    attempt: str
    pod: str
    cause: str
    counted: bool
    exit_code: int | None = None
    in_place: bool = False  # the container was restarted in the same pod
    permanent: bool = False  # restartPolicy ExitCode, exit code 1-127: the launcher Job fails, no retry
    order: tuple[str, str, int] = ("", "", 0)  # (its pod's creationTimestamp, its pod, the run): attempts' order
    excused: bool = False  # not counted by a ledger entry: the launcher Job counted it, its limit makes up


def name_of(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("name", "?")


def uid_of(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("uid", "")


def disruption(pod: Obj) -> Obj | None:
    """The pod's DisruptionTarget condition when True: it is being (or was) ended by eviction,
    preemption, a lost node or the kubelet's resource pressure."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET and c.get("status") == "True":
            return c
    return None


def ended_by_disruption(pod: Obj) -> Obj | None:
    """The pod's DisruptionTarget when the disruption ended it; None when there is none, or when the pod
    had ended before it: the Eviction API sets the condition on a pod that already Succeeded too (a
    drain after the run). A graceful delete raises the pod's `metadata.generation`, and the kubelet
    records the generation it saw with each status (`status.observedGeneration`): an end written below
    the generation was written before the delete, so the pod ended by itself (measured on the local
    cluster's v1.37 kubelet; one object's counter, no clock). Without the field (an older kubelet,
    kwok), the condition decides, as before."""
    c = disruption(pod)
    st, meta = pod.get("status") or {}, pod.get("metadata") or {}
    gen, seen = meta.get("generation"), st.get("observedGeneration")
    if c is not None and st.get("phase") in ("Succeeded", "Failed") and isinstance(gen, int) \
            and isinstance(seen, int) and seen < gen:
        return None
    return c


def disruption_text(c: Obj) -> str:
    reason, message = c.get("reason") or "Disrupted", (c.get("message") or "").rstrip(".")
    return f"{reason}: {message}" if message else reason


def _container_status(ctx: JobContext, pod: Obj) -> Obj:
    want = launcher_container_name(ctx.job)
    statuses = [cs for cs in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(cs, dict)]
    return next((cs for cs in statuses if cs.get("name") == want), statuses[0] if statuses else {})


def _exit(term: Obj) -> tuple[int | None, str]:
    code = term.get("exitCode")
    code = code if isinstance(code, int) else None
    reason = term.get("reason") or ""
    text = f"exit code {code}" if code is not None else "ended"
    return code, f"{text} ({reason})" if reason and reason not in ("Error", "Completed") else text


def launcher_pods(ctx: JobContext) -> list[Obj]:
    """The launcher Job's pods, oldest first. None leaves the cache before its end is recorded: each
    is held by a finalizer until then (reconcilers/failure/hold.py; it replaces a memory of the
    disrupted ones that an operator restart lost)."""
    unique = {uid_of(p) or name_of(p): p for p in ctx.pods.launchers}
    return sorted(unique.values(), key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "", name_of(p)))


def restarts(ctx: JobContext, pod: Obj) -> int:
    n = _container_status(ctx, pod).get("restartCount")
    return n if isinstance(n, int) and n > 0 else 0


def ended(pod: Obj) -> bool:
    """Failed; a disrupted pod being deleted (it will not run again, whatever phase was seen last); or a
    disrupted pod that exited 0 (a drain's SIGTERM: Open MPI 5's mpirun can exit 0 on it), which is no
    finish (`interruption`)."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return phase == "Failed" or (ended_by_disruption(pod) is not None and (phase == "Succeeded" or deleting))


def _terminations(ctx: JobContext, pod: Obj, cs: Obj) -> list[Obj]:
    """How each run of the launcher container that ended in place ended ({} where the kubelet no
    longer says): the `restartCount` runs it restarted after, and the current run when it ended and
    waits to restart (terminated, or in the kubelet's back-off: the restart count goes up only when
    it starts again). The kubelet keeps the last termination only (`lastState`)."""
    runs = restarts(ctx, pod)
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    now = state.get("terminated") or {}
    if not now and ((state.get("waiting") or {}).get("reason") == "CrashLoopBackOff") and last:
        now, last = last, {}  # ended, waits out the back-off: lastState is this run's end
    if now and (ended(pod) or (pod.get("status") or {}).get("phase") == "Succeeded"
                or not _will_restart(ctx, now.get("exitCode"))):
        now = {}  # the pod's own end (below), not a restart in place
    ends: list[Obj] = [{} for _ in range(runs)]
    if runs and last:
        ends[-1] = last
    return ends + ([now] if now else [])


def _will_restart(ctx: JobContext, code: object) -> bool:
    """The launcher Job's template restarts its container in place after exit `code`: the pod's
    restartPolicy OnFailure, the container's own restartPolicy, or its restartPolicyRules."""
    pod_spec = ((((ctx.launcher or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
    container = (pod_spec.get("containers") or [{}])[0]
    for rule in container.get("restartPolicyRules") or []:
        values = ((rule or {}).get("exitCodes") or {}).get("values") or []
        op = ((rule or {}).get("exitCodes") or {}).get("operator")
        if (op == "In" and code in values) or (op == "NotIn" and code not in values):
            return (rule or {}).get("action") == "Restart"
    policy = container.get("restartPolicy") or pod_spec.get("restartPolicy")
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def attempt_order(pod: Obj, run: int) -> tuple[str, str, int]:
    return ((pod.get("metadata") or {}).get("creationTimestamp") or "", name_of(pod), run)


def failures(ctx: JobContext, not_counted: Obj) -> list[Failure]:
    """Every failed attempt of the launcher Job's pods, oldest first."""
    out: list[Failure] = []
    for pod in launcher_pods(ctx):
        name, cs = name_of(pod), _container_status(ctx, pod)
        ends = _terminations(ctx, pod, cs)
        for k, end in enumerate(ends):
            attempt = f"{name}#{k}"
            code, text = _exit(end) if end else (None, "failed")
            why = why_of(not_counted.get(attempt))
            out.append(Failure(attempt, name, text + (f"; {why}" if why else ""), not why, code, in_place=True,
                               order=attempt_order(pod, k), excused=bool(why)))
        run = restarts(ctx, pod)
        attempt, order = f"{name}#{run}", attempt_order(pod, run)
        term = ((cs.get("state") or {}).get("terminated") or {})
        # a launcher whose hosts' names never resolved failed in its init container (namewait.py)
        code, text = _exit(term) if term else (None, namewait.init_failure(pod)
                                              or (pod.get("status") or {}).get("reason") or "failed")
        if not ended(pod):
            why = why_of(not_counted.get(attempt)) if phase_of(pod) == "Succeeded" else ""
            if why:  # an exit 0 a worker's disruption ended: no finish (`interruption`), not counted
                out.append(Failure(attempt, name, f"{text}; {why}", False, code, order=order))
            continue
        own = ended_by_disruption(pod)
        if own is not None:
            # (excused only where the Job counted it: a failed pod, no podFailurePolicy to ignore it)
            counted_by_job = phase_of(pod) == "Failed" and not ((ctx.launcher or {}).get("spec") or {}).get(
                "podFailurePolicy")
            out.append(Failure(attempt, name, f"launcher pod {name} was disrupted ({disruption_text(own)})", False,
                               code, order=order, excused=counted_by_job and attempt in not_counted))
            continue
        why = why_of(not_counted.get(attempt))
        # (an exit a disruption caused is not the program's: never permanent, whatever its code)
        permanent = not why and code in PERMANENT_EXIT_CODES and launcher_policy(ctx.job) == EXIT_CODE
        out.append(Failure(attempt, name, text + (f"; {why}" if why else ""), not why, code, permanent=permanent,
                           order=order, excused=bool(why)))
    return out


def why_of(entry: object) -> str:
    return str(entry.get("why") or "") if isinstance(entry, dict) else ""


def counted(fails: list[Failure]) -> int:
    return sum(1 for f in fails if f.counted)


def phase_of(pod: Obj) -> str | None:
    return (pod.get("status") or {}).get("phase")


# -- disruptions bound to attempts -----------------------------------------------------------------


def _current_attempt(ctx: JobContext) -> str | None:
    """The newest launcher pod's current (or, once it ended, last) attempt. One that exited 0 is still
    the current one until the MPIJob is judged (`account` binds only while it runs): a worker's
    disruption seen with the exit 0 it caused (PRRTE exits 0 within a second of losing a daemon)
    makes that exit no finish (`interruption`)."""
    pods = launcher_pods(ctx)
    if not pods:
        return None
    pod = pods[-1]
    if ended(pod) or phase_of(pod) == "Succeeded":
        return f"{name_of(pod)}#{restarts(ctx, pod)}"
    return f"{name_of(pod)}#{len(_terminations(ctx, pod, _container_status(ctx, pod)))}"


def _disrupted_workers(ctx: JobContext) -> list[tuple[Obj, Obj]]:
    """(worker pod, its DisruptionTarget) for the workers of this run that a disruption ends, those
    already gone from the cache included (Inputs.disrupted)."""
    count = desired.worker_replicas(ctx.job)
    seen: dict[str, Obj] = {}
    for pod in [*ctx.pods.workers, *(p for p in ctx.inputs.disrupted if desired.pod_role(p) == names.ROLE_WORKER)]:
        index = desired.worker_index(ctx.job, pod)
        if disruption(pod) is not None and (index is None or index < count):
            seen.setdefault(uid_of(pod), pod)
    return [(p, disruption(p) or {}) for p in seen.values()]


def _observed_uids(ctx: JobContext) -> set[str]:
    return {uid_of(p) for p in [*ctx.pods.workers, *ctx.pods.launchers, *ctx.inputs.disrupted]}


def bind(ctx: JobContext, book: Ledger) -> dict[str, Obj]:
    """The not-counted entries with the attempt each newly seen worker disruption excuses: the oldest
    failure not announced yet that would count (it ended since the operator last looked: the loss
    ended it), else the attempt that runs now (its mpirun is about to lose the host). One attempt per
    disruption, never more: a retry that fails because the replacement worker is not back yet is the
    launcher's own failure, counted, so an eviction whose replacement cannot be scheduled ends the
    run when the budget is spent. Binding follows what the operator saw, not times from two clocks
    (the API server's and the node's).
    Entries of announced attempts are dropped once their disrupted pod is seen no more (it can bind
    nothing again), so the ledger keeps its size whatever the number of attempts."""
    entries = book.entries
    observed = _observed_uids(ctx)
    out = {k: v for k, v in entries.items() if not v.get("announced") or v.get("uid") in observed}
    used = {v.get("uid") for v in entries.values()}
    fails = failures(ctx, entries)
    for pod, c in _disrupted_workers(ctx):
        host, uid = desired.pod_hostname(pod), uid_of(pod)
        if uid in used:
            continue
        used.add(uid)
        fresh = [f.attempt for f in fails
                 if f.counted and not book.announced(f.attempt, f.order) and f.attempt not in out]
        current = _current_attempt(ctx)
        target = fresh[0] if fresh else current if current not in out else None
        if target is not None:
            out[target] = {"worker": host, "uid": uid,
                           "why": f"worker {host} was disrupted ({disruption_text(c)})"[:_WHY_MAX]}
    return out


def launcher_disruptions(ctx: JobContext, entries: dict[str, Obj]) -> dict[str, Obj]:
    """A launcher pod without a podFailurePolicy (restartPolicy OnFailure where containers cannot
    restart themselves) that a disruption ended: the Job counted it, so the ledger keeps it to
    raise the Job's own limit by one; the operator's count leaves it out by its condition anyway."""
    if ((ctx.launcher or {}).get("spec") or {}).get("podFailurePolicy"):
        return entries
    out = dict(entries)
    for pod in launcher_pods(ctx):
        c = disruption(pod)
        if c is not None and ended(pod):
            out.setdefault(f"{name_of(pod)}#{restarts(ctx, pod)}", {
                "launcher": name_of(pod), "uid": uid_of(pod),
                "why": f"launcher pod {name_of(pod)} was disrupted ({disruption_text(c)})"[:_WHY_MAX]})
    return out


# -- one plan's accounts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Accounts:
    """The launcher's retries as one plan sees them: the ledger observed, the not-counted entries it
    should have, the failed attempts judged with them, and what a plan that announces the new
    failures writes (`announced`). The counts are the ledger's plus the attempts not announced yet."""

    book: Ledger
    entries: dict[str, Obj]
    fails: list[Failure]
    job_failed: int
    # The launcher Job is being deleted (made afresh, or stopped by a suspend): its pods' ends are no
    # news, what was announced before the delete is all it counts.
    frozen: bool = False

    @property
    def news(self) -> list[Failure]:
        """The failed attempts not announced yet, oldest first."""
        if self.frozen:
            return []
        return [f for f in self.fails if not self.book.announced(f.attempt, f.order)]

    @property
    def newest(self) -> Failure | None:
        """The newest failed attempt not announced yet, else the newest one."""
        news = self.news
        return news[-1] if news else self.fails[-1] if self.fails else None

    @property
    def new_failure(self) -> bool:
        """A failed attempt not announced yet."""
        return bool(self.news)

    @property
    def total(self) -> int:
        """Every failed attempt: the ledger's and those not announced yet."""
        return self.book.failed + len(self.news)

    @property
    def total_counted(self) -> int:
        return self.book.counted + counted(self.news)

    def announced(self) -> Ledger:
        """The ledger once every failed attempt is announced."""
        news = self.news
        b = self.book
        if not news:
            return replace(b, not_counted=tuple(sorted(self.entries.items())))
        done = {f.attempt for f in news}
        entries = {k: ({**v, "announced": True} if k in done else v) for k, v in self.entries.items()}
        excused = b.excused + sum(1 for f in news if f.excused)
        return Ledger(self.total, self.total_counted, excused, *b.after([f.order for f in news]),
                      tuple(sorted(entries.items())))

    def shown(self, announcing: bool) -> int:
        """replicaStatuses.Launcher.failed: the launcher's failed attempts, in new pods or in place."""
        return max((self.announced() if announcing else self.book).failed, self.job_failed)


def shown_before(old_status: Obj) -> int:
    """replicaStatuses.Launcher.failed as the status showed it."""
    rs = old_status.get("replicaStatuses")
    la = rs.get("Launcher") if isinstance(rs, dict) else None
    n = la.get("failed") if isinstance(la, dict) else None
    return n if isinstance(n, int) and n > 0 else 0


def account(ctx: JobContext, active: bool) -> Accounts:
    """The launcher's retries as this plan sees them; the ledger grows only while the MPIJob runs."""
    owned = ctx.owned(ctx.launcher)
    book = ledger(ctx.launcher) if owned else Ledger()
    entries = launcher_disruptions(ctx, bind(ctx, book)) if active and owned else book.entries
    if active and owned:  # in-place runs that could not find their workers (failure/withheld.py)
        entries = withheld.excuse(ctx, entries, _in_place_news(ctx, book, entries))
    frozen = owned and ownership.deleting(ctx.launcher)
    job_failed = int(((ctx.launcher or {}).get("status") or {}).get("failed") or 0) if owned and not frozen else 0
    return Accounts(book, entries, failures(ctx, entries), job_failed, frozen)


def _in_place_news(ctx: JobContext, book: Ledger, entries: dict[str, Obj]) -> list[tuple[str, Obj]]:
    """(attempt, its container's status) of each failed run restarted in place not announced yet."""
    pods = {name_of(p): p for p in launcher_pods(ctx)}
    return [(f.attempt, _container_status(ctx, pods[f.pod])) for f in failures(ctx, entries)
            if f.in_place and f.counted and f.pod in pods and not book.announced(f.attempt, f.order)]


def sync(ctx: JobContext, draft: Draft, accounts: Accounts, announcing: bool, limit_ours: bool = True) -> None:
    """The launcher Job's ledger and backoffLimit brought to what the operator counts (one merge
    patch; nothing when they match). `limit_ours` False: the Job's backoffLimit is not the
    operator's to set (the upstream operator's launcher Job keeps the one upstream gave it,
    reconcilers/takeover.py; a Job being made afresh retries nothing more, its successor gets the
    limit); its ledger is kept all the same, so that each failed attempt is announced once."""
    launcher = ctx.launcher
    if launcher is None or not ctx.owned(launcher) or (launcher.get("metadata") or {}).get("deletionTimestamp"):
        return
    old = accounts.book
    book = accounts.announced() if announcing else replace(old, not_counted=tuple(sorted(accounts.entries.items())))
    limit = job_limit(ctx.job, launcher, book)
    patch: Obj = {}
    if book != old:
        patch["metadata"] = {"annotations": {LEDGER: book.to_json()}}
    if limit_ours and (launcher.get("spec") or {}).get("backoffLimit") != limit:
        patch["spec"] = {"backoffLimit": limit}
    if patch:
        added = sorted(set(book.entries) - set(old.entries))
        failed = [f.attempt for f in accounts.news] if announcing else []
        why = (f"launcher attempt(s) {', '.join(added)} not counted" if added
               else f"launcher attempt(s) {', '.join(failed)} failed" if failed else "the launcher's retries")
        draft.plan.patches.append(Patch(diff.ref_of(launcher), patch, f"{why}: backoffLimit {limit}"))
