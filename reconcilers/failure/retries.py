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
launcher Job's own `backoffLimit` is `runPolicy.backoffLimit` + the attempts not counted + 1 (a net
one failure wide under the operator's count, restartpolicy.NET), and the MPIJob fails
`BackoffLimitExceeded` when the operator's count exceeds `runPolicy.backoffLimit` (the finished
MPIJob then stops its launcher Job, plan.py).

The ledger (annotation LEDGER on the launcher Job, JSON) keeps what must outlive the pods, the
cache and the operator: `failed`, the failed attempts announced so far (replicaStatuses.Launcher.
failed shows it), `seen`, which ones (the latest SEEN_MAX: a failure of another attempt is new, and
Restarting and an Event say so, once; a failed pod that leaves the cache is no news either), and
`notCounted`, attempt -> the disruption it is bound to. A launcher Job made afresh starts a fresh
ledger, as the Job's own count starts afresh.

How the launcher runs again, in place or in a new pod: reconcilers/failure/restartpolicy.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from reconcilers import desired, diff, names
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure.restartpolicy import (
    DISRUPTION_TARGET,
    EXIT_CODE,
    PERMANENT_EXIT_CODES,
    backoff_limit,
    job_backoff_limit,
    launcher_container_name,
    launcher_policy,
)
from reconcilers.types import Obj, Patch

LEDGER = "mpijob-operator.dev/launcher-retries"
# The Failed reason of restartPolicy ExitCode names the code, PermanentExitCode<N> (issue 35: "its
# reason naming the code"); clients match the prefix (README, "Troubleshooting").
R_PERMANENT_EXIT_CODE = "PermanentExitCode"
R_BACKOFF_LIMIT = "BackoffLimitExceeded"
_WHY_MAX = 200  # characters of a reason kept in the ledger
SEEN_MAX = 50  # announced attempts kept in the ledger (older ones left the cache long ago)
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


def _name(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("name", "?")


def _uid(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("uid", "")


def disruption(pod: Obj) -> Obj | None:
    """The pod's DisruptionTarget condition when True: it is being (or was) ended by eviction,
    preemption, a lost node or the kubelet's resource pressure."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET and c.get("status") == "True":
            return c
    return None


def _disruption_text(c: Obj) -> str:
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


def _launchers(ctx: JobContext) -> list[Obj]:
    """The launcher Job's pods, oldest first, with those a disruption ended that left the cache
    before a plan saw them fail (remembered by the controller: Inputs.disrupted)."""
    owner = _uid(ctx.launcher or {})
    unique = {_uid(p) or _name(p): p for p in ctx.pods.launchers}
    for p in ctx.inputs.disrupted:
        if desired.pod_role(p) == names.ROLE_LAUNCHER and owner and _controller_uid(p) == owner:
            unique.setdefault(_uid(p), p)
    return sorted(unique.values(), key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "", _name(p)))


def _controller_uid(pod: Obj) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("uid") for r in refs if isinstance(r, dict) and r.get("controller")), None)


def restarts(ctx: JobContext, pod: Obj) -> int:
    n = _container_status(ctx, pod).get("restartCount")
    return n if isinstance(n, int) and n > 0 else 0


def _ended(pod: Obj) -> bool:
    """Failed, or a disrupted pod being deleted (it will not run again, whatever phase was seen last)."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return phase == "Failed" or (phase != "Succeeded" and deleting and disruption(pod) is not None)


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
    if now and (_ended(pod) or (pod.get("status") or {}).get("phase") == "Succeeded"
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


def failures(ctx: JobContext, not_counted: Obj) -> list[Failure]:
    """Every failed attempt of the launcher Job's pods, oldest first."""
    out: list[Failure] = []
    for pod in _launchers(ctx):
        name, cs = _name(pod), _container_status(ctx, pod)
        ends = _terminations(ctx, pod, cs)
        for k, end in enumerate(ends):
            attempt = f"{name}#{k}"
            code, text = _exit(end) if end else (None, "failed")
            why = _why(not_counted.get(attempt))
            out.append(Failure(attempt, name, text + (f"; {why}" if why else ""), not why, code, in_place=True))
        if not _ended(pod):
            continue
        attempt = f"{name}#{restarts(ctx, pod)}"
        own = disruption(pod)
        term = ((cs.get("state") or {}).get("terminated") or {})
        code, text = _exit(term) if term else (None, (pod.get("status") or {}).get("reason") or "failed")
        if own is not None:
            out.append(Failure(attempt, name, f"launcher pod {name} was disrupted ({_disruption_text(own)})", False,
                               code))
            continue
        why = _why(not_counted.get(attempt))
        permanent = code in PERMANENT_EXIT_CODES and launcher_policy(ctx.job) == EXIT_CODE
        out.append(Failure(attempt, name, text + (f"; {why}" if why else ""), not why, code, permanent=permanent))
    return out


def _why(entry: object) -> str:
    return str(entry.get("why") or "") if isinstance(entry, dict) else ""


def counted(fails: list[Failure]) -> int:
    return sum(1 for f in fails if f.counted)


# -- the ledger -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ledger:
    failed: int = 0  # failed attempts announced
    seen: tuple[str, ...] = ()  # the latest of them, oldest first
    not_counted: tuple[tuple[str, Obj], ...] = ()  # attempt -> {worker|launcher, uid, why[, back]}

    @property
    def entries(self) -> dict[str, Obj]:
        return dict(self.not_counted)

    def to_json(self) -> str:
        body = {"failed": self.failed, "seen": list(self.seen), "notCounted": self.entries}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


def ledger(launcher: Obj | None) -> Ledger:
    """The ledger kept on the launcher Job; an unreadable one reads as empty."""
    raw = (((launcher or {}).get("metadata") or {}).get("annotations") or {}).get(LEDGER)
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return Ledger()
    if not isinstance(value, dict):
        return Ledger()
    failed, seen, nc = value.get("failed"), value.get("seen"), value.get("notCounted")
    entries = tuple(sorted((k, v) for k, v in nc.items() if isinstance(v, dict))) if isinstance(nc, dict) else ()
    seen = tuple(a for a in seen if isinstance(a, str)) if isinstance(seen, list) else ()
    return Ledger(failed if isinstance(failed, int) and failed >= 0 else 0, seen, entries)


def _current_attempt(ctx: JobContext) -> str | None:
    """The newest launcher pod's current (or, once it failed, last) attempt."""
    live = [p for p in _launchers(ctx) if (p.get("status") or {}).get("phase") != "Succeeded"]
    if not live:
        return None
    pod = live[-1]
    if _ended(pod):
        return f"{_name(pod)}#{restarts(ctx, pod)}"
    return f"{_name(pod)}#{len(_terminations(ctx, pod, _container_status(ctx, pod)))}"


def _worker_index(ctx: JobContext, pod: Obj) -> int | None:
    prefix = names.worker_name(ctx.job) + "-"
    host = desired.pod_hostname(pod)
    tail = host[len(prefix):] if host.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def _disrupted_workers(ctx: JobContext) -> list[tuple[Obj, Obj]]:
    """(worker pod, its DisruptionTarget) for the workers of this run that a disruption ends, those
    already gone from the cache included (Inputs.disrupted)."""
    count = desired.worker_replicas(ctx.job)
    seen: dict[str, Obj] = {}
    for pod in [*ctx.pods.workers, *(p for p in ctx.inputs.disrupted if desired.pod_role(p) == names.ROLE_WORKER)]:
        index = _worker_index(ctx, pod)
        if disruption(pod) is not None and (index is None or index < count):
            seen.setdefault(_uid(pod), pod)
    return [(p, disruption(p) or {}) for p in seen.values()]


def _back(ctx: JobContext, host: str, uid: str) -> bool:
    """A pod other than the disrupted one runs Ready under the disrupted worker's hostname."""
    return any(desired.pod_hostname(p) == host and _uid(p) != uid and desired.is_pod_ready(p)
               for p in ctx.pods.workers)


def _unannounced(fails: list[Failure], seen: tuple[str, ...]) -> list[str]:
    """The failed attempts not announced yet."""
    return [f.attempt for f in fails if f.attempt not in seen]


def bind(ctx: JobContext, book: Ledger) -> dict[str, Obj]:
    """The not-counted entries with the attempts that a worker's disruption makes not count:
    - a disruption seen for the first time binds the current attempt (running: its mpirun is about
      to lose the host; failed: it lost it) and every failed attempt not announced yet (they ended
      since the operator last looked);
    - until a pod runs Ready again under the disrupted worker's name, each failure not announced yet
      is bound too: an attempt that starts before the worker is back fails for want of it. Once the
      worker is back, its entries are marked so (`back`) and bind nothing more.
    Binding follows what the operator saw, not times from two clocks (the API server's and the
    node's): a launcher attempt that failed for its own reason while a worker was being evicted, seen
    together with it, is not counted either."""
    entries = book.entries
    out = dict(entries)
    seen = {v.get("uid") for v in entries.values()}
    current = _current_attempt(ctx)
    fresh = _unannounced(failures(ctx, entries), book.seen)
    for pod, c in _disrupted_workers(ctx):
        host, uid = desired.pod_hostname(pod), _uid(pod)
        if uid in seen:
            continue
        seen.add(uid)
        entry = {"worker": host, "uid": uid, "why": f"worker {host} was disrupted ({_disruption_text(c)})"[:_WHY_MAX]}
        for attempt in ([current] if current else []) + fresh:
            out.setdefault(attempt, entry)
    for entry in entries.values():
        if "worker" not in entry or entry.get("back"):
            continue
        if _back(ctx, str(entry["worker"]), str(entry.get("uid"))):
            for key, other in out.items():  # every attempt bound to this disruption
                if other.get("uid") == entry.get("uid"):
                    out[key] = {**other, "back": True}
        else:
            for attempt in fresh:
                out.setdefault(attempt, entry)
    return out


def launcher_disruptions(ctx: JobContext, entries: dict[str, Obj]) -> dict[str, Obj]:
    """A launcher pod without a podFailurePolicy (restartPolicy OnFailure where containers cannot
    restart themselves) that a disruption ended: the Job counted it, so the ledger keeps it to
    raise the Job's own limit by one; the operator's count leaves it out by its condition anyway."""
    if ((ctx.launcher or {}).get("spec") or {}).get("podFailurePolicy"):
        return entries
    out = dict(entries)
    for pod in _launchers(ctx):
        c = disruption(pod)
        if c is not None and _ended(pod):
            out.setdefault(f"{_name(pod)}#{restarts(ctx, pod)}", {
                "launcher": _name(pod), "uid": _uid(pod),
                "why": f"launcher pod {_name(pod)} was disrupted ({_disruption_text(c)})"[:_WHY_MAX]})
    return out


# -- one plan's accounts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Accounts:
    """The launcher's retries as one plan sees them: the ledger observed, the not-counted entries it
    should have, the failed attempts judged with them, and what a plan that announces the newest
    failure writes (`announced`)."""

    book: Ledger
    entries: dict[str, Obj]
    fails: list[Failure]
    job_failed: int

    @property
    def newest(self) -> Failure | None:
        """The newest failed attempt not announced yet, else the newest one."""
        news = set(_unannounced(self.fails, self.book.seen))
        return next((f for f in reversed(self.fails) if f.attempt in news), self.fails[-1] if self.fails else None)

    @property
    def new_failure(self) -> bool:
        """A failed attempt not announced yet."""
        return bool(_unannounced(self.fails, self.book.seen))

    def announced(self) -> Ledger:
        """The ledger once every failed attempt is announced."""
        news = _unannounced(self.fails, self.book.seen)
        return Ledger(self.book.failed + len(news), (*self.book.seen, *news)[-SEEN_MAX:],
                      tuple(sorted(self.entries.items())))

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
    job_failed = int(((ctx.launcher or {}).get("status") or {}).get("failed") or 0) if owned else 0
    return Accounts(book, entries, failures(ctx, entries), job_failed)


def sync(ctx: JobContext, draft: Draft, accounts: Accounts, announcing: bool, ledger_only: bool = False) -> None:
    """The launcher Job's ledger and backoffLimit brought to what the operator counts (one merge
    patch; nothing when they match). `ledger_only`: the upstream operator's launcher Job
    (reconcilers/takeover.py), whose backoffLimit stays as upstream set it; its ledger is still
    kept, so that each failed attempt is announced once."""
    launcher = ctx.launcher
    if launcher is None or not ctx.owned(launcher) or (launcher.get("metadata") or {}).get("deletionTimestamp"):
        return
    book = accounts.announced() if announcing else Ledger(accounts.book.failed, accounts.book.seen,
                                                          tuple(sorted(accounts.entries.items())))
    limit = job_backoff_limit(backoff_limit(ctx.job), len(book.not_counted))
    patch: Obj = {}
    if book != accounts.book:
        patch["metadata"] = {"annotations": {LEDGER: book.to_json()}}
    if not ledger_only and (launcher.get("spec") or {}).get("backoffLimit") != limit:
        patch["spec"] = {"backoffLimit": limit}
    if patch:
        added = sorted(set(book.entries) - set(accounts.book.entries))
        failed = [a for a in book.seen if a not in accounts.book.seen]
        why = (f"launcher attempt(s) {', '.join(added)} not counted" if added
               else f"launcher attempt(s) {', '.join(failed)} failed" if failed else "the launcher's retries")
        draft.plan.patches.append(Patch(diff.ref_of(launcher), patch, f"{why}: backoffLimit {limit}"))


# -- what the status says ---------------------------------------------------------------------------


def budget(ctx: JobContext, fails: list[Failure]) -> str:
    limit = backoff_limit(ctx.job)
    free = len(fails) - counted(fails)
    return (f"{counted(fails)} of {limit} retries (runPolicy.backoffLimit) used"
            + (f", {free} not counted" if free else ""))


def restarting(ctx: JobContext, fails: list[Failure], f: Failure, attempt_no: int, lost: list[str]) -> str:
    """Restarting's message for failure `f`: the attempt (its number among the failed ones,
    `attempt_no`), its cause, counted or not, the retries used, and how the launcher runs again."""
    how = "the launcher restarts in place" if _in_place_next(ctx, f) else "the launcher Job starts a new pod"
    workers = f" after {', '.join(lost)}" if lost and "disrupted" not in f.cause else ""
    return (f"MPIJob {ctx.key} is restarting: launcher attempt {attempt_no} (pod {f.pod}) failed: "
            f"{f.cause}{workers}; {'counted' if f.counted else 'not counted'}, {budget(ctx, fails)}; {how}.")


def _in_place_next(ctx: JobContext, f: Failure) -> bool:
    pod = next((p for p in ctx.pods.launchers if _name(p) == f.pod), None)
    return pod is not None and f.in_place and not _ended(pod) and (pod.get("status") or {}).get("phase") != "Succeeded"


def lost_workers(ctx: JobContext) -> list[str]:
    """What ended each worker pod that is gone or going (for messages): disrupted, or deleted/ended."""
    out = []
    for pod in ctx.pods.workers:
        c = disruption(pod)
        if c is not None:
            out.append(f"worker {desired.pod_hostname(pod)} was disrupted ({_disruption_text(c)})")
        elif (pod.get("metadata") or {}).get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
                "Succeeded", "Failed"):
            out.append(f"worker {desired.pod_hostname(pod)} was lost")
    return out


def verdict(ctx: JobContext, fails: list[Failure]) -> tuple[str, str] | None:
    """(reason, message) of the MPIJob's failure that the launcher's attempts decide, before the
    launcher Job shows it: an exit code that restartPolicy ExitCode makes permanent (the Job's
    podFailurePolicy fails it too, a second later), or more counted failures than
    runPolicy.backoffLimit allows (the Job, a failure wider, is stopped)."""
    permanent = next((f for f in fails if f.permanent), None)
    if permanent is not None:
        return permanent_reason(permanent.exit_code), _permanent_message(ctx, permanent.exit_code, permanent.pod)
    limit = backoff_limit(ctx.job)
    if counted(fails) <= limit:
        return None
    last = next(f for f in reversed(fails) if f.counted)
    free = len(fails) - counted(fails)
    return R_BACKOFF_LIMIT, (
        f"MPIJob {ctx.key} has failed: the launcher failed {counted(fails)} time(s), more than "
        f"runPolicy.backoffLimit ({limit}) allows; last: attempt {fails.index(last) + 1} (pod {last.pod}) "
        f"{last.cause}" + (f" ({free} failure(s) not counted)" if free else ""))


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
