"""The launcher's retries, told apart by cause and counted by the operator (docs/architecture.md
section 10). Pure: nothing here reads a clock or does I/O.

A launcher *attempt* is one run of the launcher's container: `<pod>#<k>` is the k-th run in pod
`<pod>` (k > 0 only when the kubelet restarted the container in place). An attempt that fails is
either counted against `runPolicy.backoffLimit` or not:
- not counted: the launcher pod itself was disrupted (its `DisruptionTarget` condition: eviction,
  preemption, node lost), and an attempt the operator bound to a worker's disruption (the worker
  pod's `DisruptionTarget`, seen while that attempt ran: its mpirun lost a host it could not keep);
- not retried at all: with `restartPolicy: ExitCode`, an exit code of 1-127 (the launcher Job's
  podFailurePolicy fails it at once; outcome.py names the code);
- counted: every other failure, in a new pod or restarted in place.

Who counts: the operator. The Job controller counts failed pods only (not restarts in place) and
decides at once, before the operator could tell a worker's disruption from a plain failure; so the
launcher Job's own `backoffLimit` is `runPolicy.backoffLimit` + the attempts not counted + 1 (a
net, one failure wide, under the operator's count), and the MPIJob fails
`BackoffLimitExceeded` when the operator's count exceeds `runPolicy.backoffLimit` (the finished
MPIJob then stops its launcher Job, plan.py). The attempts bound to a worker's disruption are kept
on the launcher Job (annotation LEDGER, JSON: attempt -> the worker and why), where they outlive
the worker pod, the cache and the operator; a launcher Job made afresh starts a fresh count, as the
Job's own does.

How the launcher runs again, in place or in a new pod: reconcilers/restartpolicy.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from reconcilers import desired, diff, names
from reconcilers.context import JobContext
from reconcilers.defaults import LAUNCHER
from reconcilers.draft import Draft
from reconcilers.restartpolicy import (
    DISRUPTION_TARGET,
    EXIT_CODE,
    PERMANENT_EXIT_CODES,
    backoff_limit,
    job_backoff_limit,
    launcher_container_name,
    launcher_policy,
)
from reconcilers.types import Obj, Patch

LEDGER = "mpijob-operator.dev/retries-not-counted"
R_PERMANENT_EXIT_CODE = "PermanentExitCode"
R_BACKOFF_LIMIT = "BackoffLimitExceeded"
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


def _attempts_by_age(ctx: JobContext) -> list[Obj]:
    unique = {_uid(p) or _name(p): p for p in ctx.pods.launchers}
    return sorted(unique.values(), key=lambda p: ((p.get("metadata") or {}).get("creationTimestamp") or "", _name(p)))


def restarts(ctx: JobContext, pod: Obj) -> int:
    n = _container_status(ctx, pod).get("restartCount")
    return n if isinstance(n, int) and n > 0 else 0


def failures(ctx: JobContext, ledger: Obj) -> list[Failure]:
    """Every failed attempt of the launcher Job's pods, oldest first."""
    out: list[Failure] = []
    for pod in _attempts_by_age(ctx):
        name, cs = _name(pod), _container_status(ctx, pod)
        runs = restarts(ctx, pod)
        last = ((cs.get("lastState") or {}).get("terminated") or {})
        for k in range(runs):
            attempt = f"{name}#{k}"
            code, text = _exit(last) if k == runs - 1 and last else (None, "failed")
            why = _not_counted(ledger.get(attempt))
            out.append(Failure(attempt, name, text + (f"; {why}" if why else ""), not why, code, in_place=True))
        if (pod.get("status") or {}).get("phase") != "Failed":
            continue
        attempt = f"{name}#{runs}"
        own = disruption(pod)
        term = ((cs.get("state") or {}).get("terminated") or {})
        code, text = _exit(term) if term else (None, (pod.get("status") or {}).get("reason") or "failed")
        if own is not None:
            out.append(Failure(attempt, name, f"launcher pod {name} was disrupted ({_disruption_text(own)})", False,
                               code))
            continue
        why = _not_counted(ledger.get(attempt))
        out.append(Failure(attempt, name, text + (f"; {why}" if why else ""), not why, code))
    return out


def _not_counted(entry: object) -> str:
    return str(entry.get("why") or "") if isinstance(entry, dict) else ""


def counted(fails: list[Failure]) -> int:
    return sum(1 for f in fails if f.counted)


# -- the ledger: attempts bound to a worker's disruption --------------------------------------------


def ledger(launcher: Obj | None) -> Obj:
    raw = (((launcher or {}).get("metadata") or {}).get("annotations") or {}).get(LEDGER)
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _current_attempt(ctx: JobContext) -> str | None:
    """The newest launcher pod's current (or, once it failed, last) attempt."""
    live = [p for p in _attempts_by_age(ctx) if (p.get("status") or {}).get("phase") != "Succeeded"]
    if not live:
        return None
    pod = live[-1]
    return f"{_name(pod)}#{restarts(ctx, pod)}"


def _worker_index(ctx: JobContext, pod: Obj) -> int | None:
    prefix = names.worker_name(ctx.job) + "-"
    host = desired.pod_hostname(pod)
    tail = host[len(prefix):] if host.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def _disrupted_workers(ctx: JobContext) -> list[tuple[Obj, Obj]]:
    """(worker pod, its DisruptionTarget) for the workers of this run that a disruption ends."""
    count = desired.worker_replicas(ctx.job)
    out = []
    for pod in ctx.pods.workers:
        c = disruption(pod)
        index = _worker_index(ctx, pod)
        if c is not None and (index is None or index < count):
            out.append((pod, c))
    return out


def _back(ctx: JobContext, host: str, uid: str) -> bool:
    """A pod other than the disrupted one runs Ready under the disrupted worker's hostname."""
    return any(desired.pod_hostname(p) == host and _uid(p) != uid and desired.is_pod_ready(p)
               for p in ctx.pods.workers)


def bind(ctx: JobContext, book: Obj, announced: int) -> Obj:
    """The ledger with the attempts that a worker's disruption makes not count, added now:
    - a disruption seen for the first time binds the current attempt (running: its mpirun is about
      to lose the host; failed: it lost it) and every failed attempt not announced yet (`announced`:
      the failures the status showed; the others ended since the operator last looked);
    - until a pod runs Ready again under the disrupted worker's name, each failure not announced yet
      is bound too: an attempt that starts before the worker is back fails for want of it. Once the
      worker is back, its entry is marked so (`back`), and binds nothing more.
    Binding follows what the operator saw, not times from two clocks (the API server's and the
    node's): a launcher attempt that failed for its own reason while a worker was being evicted, seen
    together with it, is not counted either."""
    out = dict(book)
    seen = {v.get("uid") for v in book.values() if isinstance(v, dict)}
    current = _current_attempt(ctx)
    fails = [f.attempt for f in failures(ctx, book)]
    fresh = fails[announced:] if announced <= len(fails) else fails
    for pod, c in _disrupted_workers(ctx):
        host, uid = desired.pod_hostname(pod), _uid(pod)
        if uid in seen:
            continue
        seen.add(uid)
        entry = {"worker": host, "uid": uid, "why": f"worker {host} was disrupted ({_disruption_text(c)})"[:_WHY_MAX]}
        for attempt in ([current] if current else []) + fresh:
            out.setdefault(attempt, entry)
    for entry in book.values():
        if not isinstance(entry, dict) or "worker" not in entry or entry.get("back"):
            continue
        if _back(ctx, str(entry["worker"]), str(entry.get("uid"))):
            for key, other in out.items():  # every attempt bound to this disruption
                if isinstance(other, dict) and other.get("uid") == entry.get("uid"):
                    out[key] = {**other, "back": True}
        else:
            for a in fresh:
                out.setdefault(a, entry)
    return out


def launcher_disruptions(ctx: JobContext, book: Obj) -> Obj:
    """A launcher pod without a podFailurePolicy (restartPolicy OnFailure where containers cannot
    restart themselves) that a disruption ended: the Job counted it, so the ledger keeps it to
    raise the Job's own limit by one; the operator's count leaves it out by its condition anyway."""
    if ((ctx.launcher or {}).get("spec") or {}).get("podFailurePolicy"):
        return book
    out = dict(book)
    for pod in ctx.pods.launchers:
        c = disruption(pod)
        if c is not None and (pod.get("status") or {}).get("phase") == "Failed":
            out.setdefault(f"{_name(pod)}#{restarts(ctx, pod)}", {
                "launcher": _name(pod), "uid": _uid(pod),
                "why": f"launcher pod {_name(pod)} was disrupted ({_disruption_text(c)})"[:_WHY_MAX]})
    return out


def sync(ctx: JobContext, draft: Draft, book: Obj, new_book: Obj) -> None:
    """The launcher Job's ledger and backoffLimit brought to what the operator counts (one merge
    patch; nothing when they match)."""
    launcher = ctx.launcher
    if launcher is None or not ctx.owned(launcher) or (launcher.get("metadata") or {}).get("deletionTimestamp"):
        return
    limit = job_backoff_limit(backoff_limit(ctx.job), len(new_book))
    patch: Obj = {}
    if new_book != book:
        patch["metadata"] = {"annotations": {LEDGER: json.dumps(new_book, sort_keys=True, separators=(",", ":"))}}
    if (launcher.get("spec") or {}).get("backoffLimit") != limit:
        patch["spec"] = {"backoffLimit": limit}
    if patch:
        added = sorted(set(new_book) - set(book))
        why = f"launcher attempt(s) {', '.join(added)} not counted" if added else "runPolicy.backoffLimit"
        draft.plan.patches.append(Patch(diff.ref_of(launcher), patch, f"{why}: backoffLimit {limit}"))


# -- what the status says ---------------------------------------------------------------------------


def announced(old_status: Obj) -> int:
    """How many failed attempts the status showed (replicaStatuses.Launcher.failed)."""
    rs = old_status.get("replicaStatuses")
    la = rs.get(LAUNCHER) if isinstance(rs, dict) else None
    n = la.get("failed") if isinstance(la, dict) else None
    return n if isinstance(n, int) and n >= 0 else 0


def budget(ctx: JobContext, fails: list[Failure]) -> str:
    limit = backoff_limit(ctx.job)
    free = len(fails) - counted(fails)
    return (f"{counted(fails)} of {limit} retries (runPolicy.backoffLimit) used"
            + (f", {free} not counted" if free else ""))


def restarting(ctx: JobContext, fails: list[Failure], lost: list[str]) -> str:
    """Restarting's message for the newest failure: the attempt, its cause, the retries used, and
    how the launcher runs again."""
    f = fails[-1]
    how = "restarts in place" if _in_place_next(ctx, f) else "the launcher Job starts a new pod"
    workers = f" after {', '.join(lost)}" if lost and "disrupted" not in f.cause else ""
    return (f"MPIJob {ctx.key} is restarting: launcher attempt {len(fails)} (pod {f.pod}) failed: "
            f"{f.cause}{workers}; {'counted' if f.counted else 'not counted'}, {budget(ctx, fails)}; "
            f"the launcher {how}.")


def _in_place_next(ctx: JobContext, f: Failure) -> bool:
    pod = next((p for p in ctx.pods.launchers if _name(p) == f.pod), None)
    return pod is not None and (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded") and f.in_place


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


def exhausted(ctx: JobContext, fails: list[Failure]) -> str | None:
    """Failed/BackoffLimitExceeded's message once the counted failures exceed runPolicy.backoffLimit."""
    limit = backoff_limit(ctx.job)
    if counted(fails) <= limit:
        return None
    last = next(f for f in reversed(fails) if f.counted)
    return (f"MPIJob {ctx.key} has failed: the launcher failed {counted(fails)} time(s), more than "
            f"runPolicy.backoffLimit ({limit}) allows; last: attempt {fails.index(last) + 1} (pod {last.pod}) "
            f"{last.cause}" + (f" ({len(fails) - counted(fails)} failure(s) not counted)" if len(fails) > counted(fails)
                               else ""))


_JOB_EXIT = re.compile(r"exit code (\d+)")


def permanent_exit(ctx: JobContext, reason: str, message: str) -> tuple[str, str] | None:
    """For the launcher Job's failure by its podFailurePolicy under restartPolicy ExitCode: the
    MPIJob's reason and a message naming the exit code (None for any other failure)."""
    if reason != "PodFailurePolicy" or launcher_policy(ctx.job) != EXIT_CODE:
        return None
    code, pod = None, ""
    for f in reversed(failures(ctx, {})):
        if f.exit_code in PERMANENT_EXIT_CODES:
            code, pod = f.exit_code, f.pod
            break
    if code is None:
        m = _JOB_EXIT.search(message or "")
        code = int(m.group(1)) if m else None
    where = f" (pod {pod})" if pod else ""
    return R_PERMANENT_EXIT_CODE, (
        f"MPIJob {ctx.key} has failed: the launcher{where} exited with code {code if code is not None else '?'}, "
        "which restartPolicy ExitCode treats as permanent (1-127: not retried; 128-255 are retried, counted "
        "against runPolicy.backoffLimit)")


@dataclass(frozen=True)
class Accounts:
    """What one plan knows of the launcher's retries: the ledger as observed and as it should be,
    the failed attempts (judged with the new ledger) and the number the status shows of them."""

    book: Obj
    new_book: Obj
    fails: list[Failure]
    shown: int

    def new_failure(self, old_status: Obj) -> bool:
        """A failure the status has not announced yet (it shows another number of them)."""
        return bool(self.fails) and self.shown != announced(old_status)


def account(ctx: JobContext, old_status: Obj, active: bool) -> Accounts:
    """The launcher's retries as this plan sees them; the ledger grows only while the MPIJob runs."""
    book = ledger(ctx.launcher) if ctx.owned(ctx.launcher) else {}
    new_book = launcher_disruptions(ctx, bind(ctx, book, announced(old_status))) if active else book
    fails = failures(ctx, new_book)
    job_failed = int(((ctx.launcher or {}).get("status") or {}).get("failed") or 0) if ctx.owned(ctx.launcher) else 0
    return Accounts(book, new_book, fails, failed_count(fails, job_failed))


def failed_count(fails: list[Failure], job_failed: int) -> int:
    """replicaStatuses.Launcher.failed: the launcher's failed attempts, in new pods or in place."""
    return max(len(fails), job_failed)

