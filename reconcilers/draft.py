"""The plan being written for one MPIJob: its new status, the writes and Events decided so far.

Every policy module (ownership, outcome, children, takeover, gang) adds to one Draft; `plan()`
turns it into the Plan at the end (`finish`), holding the writes that only follow pods while they
still move (reconcilers/pace.py, docs/architecture.md section 3.1). Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from reconcilers import diff, pace, status
from reconcilers.types import Delete, Event, Obj, Plan


@dataclass
class Draft:
    now: datetime
    key: str  # "<namespace>/<name>", for messages
    old_status: Obj
    status: Obj  # the new status, edited in place
    settle_s: float = 0.0
    plan: Plan = field(default_factory=Plan)
    # Writes that only follow pods (discover_hosts.sh), held or carried by finish().
    minor: list[diff.Patch] = field(default_factory=list)
    # The verdict waits on the launcher's log (reconcilers/outcome.py): the next pass, a read later,
    # writes it, so minor writes wait for it whatever the settle window says (no write more per MPIJob).
    awaiting_verdict: bool = False

    @classmethod
    def start(cls, mpijob: Obj, key: str, now: datetime, settle_s: float) -> Draft:
        return cls(now=now, key=key, old_status=status.copy_status(mpijob), status=status.copy_status(mpijob),
                   settle_s=settle_s)

    def event(self, etype: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(etype, reason, message))  # type: ignore[arg-type]

    def condition(self, ctype: str, cstatus: str, reason: str, message: str) -> bool:
        """Sets a condition; True when it changed (callers send an Event on transitions only)."""
        return status.set_condition(self.status, ctype, cstatus, reason, message, self.now)

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        if self.plan.requeue_after is None or seconds < self.plan.requeue_after:
            self.plan.requeue_after = seconds

    def fail(self, reason: str, message: str, completion: str | None = None) -> None:
        if self.condition(status.FAILED, "True", reason, message):
            self.event("Warning", status.R_FAILED, f"{reason}: {message}")
        self.status.setdefault("completionTime", completion or status.fmt_time(self.now))

    def finished(self) -> bool:
        return status.is_finished(self.status)

    def delete(self, obj: Obj, reason: str, propagation: str = "Background") -> None:
        meta = obj.get("metadata") or {}
        self.plan.deletes.append(Delete(diff.ref_of(obj), uid=meta.get("uid"), reason=reason,
                                        propagation=propagation))

    def recreate(self, obj: Obj, reason: str) -> None:
        """Delete `obj` to create it afresh on a later reconcile. Foreground: the object stays until its
        pods are gone, so a new pod never shares a hostname with an old one."""
        self.delete(obj, reason, propagation="Foreground")

    def finish(self) -> Plan:
        """The plan, with the minor writes (reconcilers/pace.py) held while the pods still move, unless
        another write of this plan carries them."""
        p = self.plan
        changed = self.status != self.old_status
        minor_status = changed and pace.status_minor_only(self.old_status, self.status)
        major = p.writes > 0 or p.events or (changed and not minor_status)
        if not major and (minor_status or self.minor) and (self.settle_s > 0 or self.awaiting_verdict):
            p.held = True
            if self.settle_s > 0:
                self.requeue(self.settle_s)
            return p
        p.patches.extend(self.minor)
        if changed:
            p.status = self.status
        return p
