"""The ledger of the launcher's retries (docs/architecture.md section 11): what must outlive the pods,
the cache and the operator, kept on the launcher Job as annotation LEDGER (JSON). Pure: nothing here
does I/O. reconcilers/failure/retries.py judges the attempts; this module keeps their count.

Its size does not grow with the attempts:
- `failed` and `counted`: the failed attempts announced so far and how many of them count. The
  MPIJob's count is the ledger's, the cache only adding the attempts not announced yet: a failed pod
  removed by a user or the pod GC lowers nothing.
- `last`: the newest attempt announced. Attempts are ordered (a launcher pod is made only after the
  one before it ended; runs in place follow each other), so an attempt at or before it is old news;
  it keeps the second the newest pod was made and, for the pods made in that second (their names are
  random), each one's last run.
- `notCounted`: the bindings of disruptions, attempt -> the disruption, kept while the attempt is not
  announced or the disrupted pod is still seen (so that one disruption never binds twice).
A launcher Job made afresh takes the ledger of the one it replaces (carried on the hostfile
ConfigMap in between: `hand_over`, `carry`), so the budget is the MPIJob's, not one Job's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from reconcilers import diff
from reconcilers.context import JobContext
from reconcilers.draft import Draft
from reconcilers.failure.restartpolicy import backoff_limit, job_backoff_limit
from reconcilers.types import Obj, Patch

LEDGER = "mpijob-operator.dev/launcher-retries"
Order = tuple[str, str, int]  # an attempt's place: its pod's creationTimestamp, its pod, its run in the pod


@dataclass(frozen=True)
class Ledger:
    failed: int = 0  # failed attempts announced
    counted: int = 0  # of them, counted against runPolicy.backoffLimit
    excused: int = 0  # of them, not counted by a ledger entry (the launcher Job counted them: its limit makes up)
    # The newest announced: the second its pod was made (creationTimestamp) and, for the pods made in
    # that second (names are random within it), each one's last run announced.
    last_at: str = ""
    last_runs: tuple[tuple[str, int], ...] = ()
    not_counted: tuple[tuple[str, Obj], ...] = ()  # attempt -> {worker|launcher, uid, why[, announced]}
    seen: tuple[str, ...] = ()  # announced attempts, as a ledger of an earlier version named them (read only)

    @property
    def entries(self) -> dict[str, Obj]:
        return dict(self.not_counted)

    @property
    def pending(self) -> int:
        """Entries bound to an attempt not announced yet (the one running): not counted when it fails."""
        return sum(1 for v in self.entries.values() if not v.get("announced"))

    @property
    def free(self) -> int:
        """The failures the launcher Job counts and the operator does not: its limit is raised by them."""
        return self.excused + self.pending

    def announced(self, attempt: str, order: Order) -> bool:
        """Whether the attempt (`<pod>#<run>`, in the order of retries.Failure.order) was announced."""
        at, pod, run = order
        if attempt in self.seen or (self.last_runs and at < self.last_at):
            return True
        runs = dict(self.last_runs)
        return at == self.last_at and pod in runs and run <= runs[pod]

    def after(self, news: list[Order]) -> tuple[str, tuple[tuple[str, int], ...]]:
        """(last_at, last_runs) once the attempts of `news` are announced too."""
        at = max([self.last_at, *(o[0] for o in news)])
        runs = dict(self.last_runs) if at == self.last_at else {}
        for o_at, pod, run in news:
            if o_at == at:
                runs[pod] = max(runs.get(pod, -1), run)
        return at, tuple(sorted(runs.items()))

    def to_json(self) -> str:
        body: Obj = {"failed": self.failed, "counted": self.counted, "excused": self.excused,
                     "notCounted": self.entries}
        if self.last_runs:
            body["last"] = {"at": self.last_at, "runs": dict(self.last_runs)}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _last(value: object) -> tuple[str, tuple[tuple[str, int], ...]]:
    if not isinstance(value, dict) or not isinstance(value.get("at"), str) or not isinstance(value.get("runs"), dict):
        return "", ()
    runs = tuple(sorted((k, v) for k, v in value["runs"].items() if isinstance(v, int) and not isinstance(v, bool)))
    return value["at"], runs


def parse(raw: object) -> Ledger:
    """A ledger from its JSON; garbage reads as empty. A ledger of an earlier version (a list `seen`,
    no `counted`) reads with its not-counted entries taken off its count."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return Ledger()
    if not isinstance(value, dict):
        return Ledger()
    failed, seen, nc, cnt = value.get("failed"), value.get("seen"), value.get("notCounted"), value.get("counted")
    entries = tuple(sorted((k, v) for k, v in nc.items() if isinstance(v, dict))) if isinstance(nc, dict) else ()
    seen = tuple(a for a in seen if isinstance(a, str)) if isinstance(seen, list) else ()
    failed = failed if isinstance(failed, int) and failed >= 0 else 0
    bound = sum(1 for k, _ in entries if k in seen)
    if not (isinstance(cnt, int) and 0 <= cnt <= failed):
        cnt = max(0, failed - bound)
    exc = value.get("excused")
    exc = exc if isinstance(exc, int) and 0 <= exc <= failed - cnt else min(bound, failed - cnt)
    at, runs = _last(value.get("last"))
    return Ledger(failed, cnt, exc, at, runs, entries, seen)


def read(launcher: Obj | None) -> Ledger:
    """The ledger kept on the launcher Job (or carried on the ConfigMap); an unreadable one reads as empty."""
    return parse((((launcher or {}).get("metadata") or {}).get("annotations") or {}).get(LEDGER))



def hand_over(ctx: JobContext, draft: Draft, book: Ledger) -> None:
    """The ledger of a launcher Job about to be deleted and made afresh, kept on the hostfile ConfigMap
    (the child that lives as long as the MPIJob runs) until the new Job carries it (`carry`).
    Nothing is written for an empty ledger, or when the ConfigMap holds this one already."""
    config_map = ctx.observed.config_map
    if config_map is None or not ctx.owned(config_map) or book == Ledger():
        return
    # Every binding goes along, the announced ones too: a disrupted pod still seen (the controller
    # remembers a gone one for minutes) must not bind an attempt of the new Job again (retries.bind
    # drops an announced binding once its pod is seen no more).
    kept = Ledger(book.failed, book.counted, book.excused, not_counted=book.not_counted)
    held = ((config_map.get("metadata") or {}).get("annotations") or {}).get(LEDGER)
    if held != kept.to_json():
        draft.plan.patches.append(Patch(diff.ref_of(config_map), {"metadata": {"annotations": {
            LEDGER: kept.to_json()}}}, "the launcher's retries, handed to the launcher Job made afresh"))


def carry(ctx: JobContext, launcher: Obj) -> Obj:
    """The launcher Job to create, with the ledger carried from the one it replaces (afresh.relaunch)."""
    raw = (((ctx.observed.config_map or {}).get("metadata") or {}).get("annotations") or {}).get(LEDGER)
    if not isinstance(raw, str) or not ctx.owned(ctx.observed.config_map):
        return launcher
    book = parse(raw)
    meta = launcher.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), LEDGER: book.to_json()}
    launcher.setdefault("spec", {})["backoffLimit"] = job_limit(ctx.job, launcher, book)
    return launcher


def job_limit(job: Obj, launcher: Obj, book: Ledger) -> int:
    """The launcher Job's own backoffLimit for this ledger: the user's, raised by the failures the Job
    counts and the operator does not, and the net for its pods' restart policy."""
    pod_spec = (((launcher.get("spec") or {}).get("template") or {}).get("spec") or {})
    return job_backoff_limit(backoff_limit(job), book.free, pod_spec.get("restartPolicy") or "Never")
