"""When a write that only follows pods may go: the settle window (docs/architecture.md section 3.1).

Some writes change with every worker pod that starts or stops: the worker and launcher counts in
`status.replicaStatuses` and the ConfigMap's `discover_hosts.sh`. Written as each pod moves, they
grow with the worker count (64 workers: dozens of writes per MPIJob). They are *minor*: no user
acts within a second on a count, and elastic Horovod polls `discover_hosts.sh` on its own clock.

So a plan whose only writes are minor holds them while the MPIJob's pods are still moving: until
no pod event has come for QUIET_SECONDS, and never longer than CAP_SECONDS since the hold began.
During a bring-up (the MPIJob active, not suspended, not finished, and not yet Running) they wait
for the write that makes it Running, BRINGUP_CAP_SECONDS at most, whatever gaps the pod events
leave: on a busy cluster one MPIJob's pods start over tens of seconds, and each gap or cap would
be one more write. Any other write of the same MPIJob (a condition that changes, a child to
create) carries the held ones with it at once. So a bring-up writes its counts once, with the
Running condition, whatever the worker count and however slow the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconcilers import status

# Pod events of one bring-up come in bursts (the Job and StatefulSet controllers create pods in
# batches, the scheduler binds them in turn); 2 s outlasts the gaps between bursts seen on the local
# cluster under load and is shorter than anyone reads a count.
QUIET_SECONDS = 2.0
# A hold ends after this long even while pods keep moving.
CAP_SECONDS = 10.0
# The cap during a bring-up. Nobody waits on the counts before Running; elastic Horovod reads
# discover_hosts.sh through a ConfigMap volume, which the kubelet refreshes on its own sync period
# (a minute by default), so 30 s more is within the delay it already has. A bring-up that takes
# longer (pods pending for capacity) still shows its progress every 30 s.
BRINGUP_CAP_SECONDS = 30.0


@dataclass
class Pace:
    """What the controller remembers of one MPIJob's pace (monotonic seconds; None: never)."""

    last_pod_event: float | None = None
    held_since: float | None = None


def settle_remaining(pace: Pace | None, now: float, quiet: float = QUIET_SECONDS,
                     cap: float = CAP_SECONDS, bringing_up: bool = False) -> float:
    """Seconds to hold minor writes from `now` on (0: write them now). Bringing up: until the
    bring-up cap from the start of the hold, quiet or not."""
    if pace is None or pace.last_pod_event is None:
        return 0.0
    if bringing_up:
        return max(0.0, BRINGUP_CAP_SECONDS - (now - (pace.held_since if pace.held_since is not None else now)))
    left = quiet - (now - pace.last_pod_event)
    if pace.held_since is not None:
        left = min(left, cap - (now - pace.held_since))
    return max(0.0, left)


def bringing_up(mpijob: dict) -> bool:
    """Active, not suspended, not finished, not Running: its pods are still coming up."""
    spec = mpijob.get("spec") if isinstance(mpijob.get("spec"), dict) else {}
    run_policy = spec.get("runPolicy") if isinstance(spec.get("runPolicy"), dict) else {}
    if run_policy.get("suspend") is True:
        return False
    job_status = mpijob.get("status")
    return not status.is_true(job_status, status.RUNNING) and not status.is_finished(job_status)


def status_minor_only(old: dict, new: dict) -> bool:
    """True when two statuses differ in replicaStatuses alone (the counts that follow pods)."""
    return old != new and {k: v for k, v in old.items() if k != "replicaStatuses"} == {
        k: v for k, v in new.items() if k != "replicaStatuses"}
