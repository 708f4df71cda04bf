"""When a write that only follows pods may go: the settle window (docs/architecture.md section 3.1).

Some writes change with every worker pod that starts or stops: the worker and launcher counts in
`status.replicaStatuses` and the ConfigMap's `discover_hosts.sh`. Written as each pod moves, they
grow with the worker count (64 workers: dozens of writes per MPIJob). They are *minor*: no user
acts within a second on a count, and elastic Horovod polls `discover_hosts.sh` on its own clock.

So a plan whose only writes are minor holds them while the MPIJob's pods are still moving: until
no pod event has come for QUIET_SECONDS, and never longer than CAP_SECONDS since the hold began
(a bring-up that trickles on still shows its progress). Any other write of the same MPIJob (a
condition that changes, a child to create) carries the held ones with it at once. A bring-up
whose pods start within bursts less than QUIET_SECONDS apart thus writes its counts once, with the
Running condition, whatever the worker count.
"""

from __future__ import annotations

from dataclasses import dataclass

# Pod events of one bring-up come in bursts (the Job and StatefulSet controllers create pods in
# batches, the scheduler binds them in turn); 2 s outlasts the gaps between bursts seen on the local
# cluster under load and is shorter than anyone reads a count.
QUIET_SECONDS = 2.0
# A hold ends after this long even while pods keep moving.
CAP_SECONDS = 10.0


@dataclass
class Pace:
    """What the controller remembers of one MPIJob's pace (monotonic seconds; None: never)."""

    last_pod_event: float | None = None
    held_since: float | None = None


def settle_remaining(pace: Pace | None, now: float, quiet: float = QUIET_SECONDS,
                     cap: float = CAP_SECONDS) -> float:
    """Seconds to hold minor writes from `now` on (0: write them now)."""
    if pace is None or pace.last_pod_event is None:
        return 0.0
    left = quiet - (now - pace.last_pod_event)
    if pace.held_since is not None:
        left = min(left, cap - (now - pace.held_since))
    return max(0.0, left)


def status_minor_only(old: dict, new: dict) -> bool:
    """True when two statuses differ in replicaStatuses alone (the counts that follow pods)."""
    return old != new and {k: v for k, v in old.items() if k != "replicaStatuses"} == {
        k: v for k, v in new.items() if k != "replicaStatuses"}
