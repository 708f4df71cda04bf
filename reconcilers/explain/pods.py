"""What keeps one pod from running, in the words of the component that reported it: the scheduler
(`PodScheduled=False`), the kubelet (its containers' waiting reasons); and what keeps it that nobody
reported (`slow`: containers not started, a worker not Ready), worth saying once it has lasted
(waiting.py decides how long). docs/operations.md, "Why is my MPIJob not running?". Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconcilers import desired, names
from reconcilers.explain.ends import termination
from reconcilers.explain.facts import (
    condition,
    container_statuses,
    meta,
    node,
    pod_name,
    pod_status,
    quote,
    spec_container,
    who,
)
from reconcilers.types import Obj

# Condition reasons (the condition `Waiting`, waiting.py), one per cause.
R_UNSCHEDULABLE = "Unschedulable"
R_IMAGE = "ImagePullFailed"
R_CONFIG = "ContainerConfigError"
R_CRASH_LOOP = "CrashLoopBackOff"
R_NOT_STARTED = "ContainersNotStarted"
R_NOT_READY = "WorkerNotReady"

# The kubelet's container waiting reasons, by the cause they tell.
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable",
                 "SignatureValidationFailed")
CONFIG_REASONS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                  "PreCreateHookError", "PreStartHookError")
# A back-off's message says only that the kubelet waits ("Back-off pulling image ..."): the attempt
# before it said why, and a message quoted from one is kept through the other (waiting.py).
BACKOFF_REASONS = ("ImagePullBackOff",)

@dataclass(frozen=True)
class Hold:
    """What keeps one pod (or the MPIJob) from running: `reason` (the condition's), `subject` naming
    the pod (stable while the cause holds), `detail` the component's own words (may differ between
    two looks at one cause), and `backoff` when those words are only a back-off's."""

    reason: str
    subject: str
    detail: str = ""
    backoff: bool = False
    since: str = ""  # when a slow cause began (the pod's condition time), "" for a reported one


def hold(pod: Obj) -> Hold | None:
    """What a component reported keeps the pod from running, the first that holds: the scheduler's
    `PodScheduled=False` (not a scheduling gate: a gang's, reconcilers/gang/), then the kubelet's
    waiting reasons of its containers, init containers first."""
    sched = condition(pod, "PodScheduled")
    if sched is not None and sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
        return Hold(R_UNSCHEDULABLE, f"{who(pod)} cannot be scheduled", f"the scheduler: {quote(sched.get('message'))}")
    for cs in container_statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason, said = waiting.get("reason"), quote(waiting.get("message"))
        cname = cs.get("name") or "?"
        if reason in IMAGE_REASONS:
            return Hold(R_IMAGE, f"{who(pod)}: container {cname} cannot pull image {_image(pod, cname, cs)}",
                        f"the kubelet: {reason}" + (f": {said}" if said else ""), backoff=reason in BACKOFF_REASONS)
        if reason in CONFIG_REASONS:
            return Hold(R_CONFIG, f"{who(pod)}: container {cname} cannot be created",
                        f"the kubelet: {reason}" + (f": {said}" if said else ""))
        crash = _crash_loop(pod, cs)
        if crash:
            return Hold(R_CRASH_LOOP, f"{who(pod)}: container {cname} keeps failing: {crash}",
                        "the kubelet restarts it with a growing back-off (CrashLoopBackOff)")
    return None


def _crash_loop(pod: Obj, cs: Obj) -> str:
    """A worker's container restarted after failing and not Ready since: its last end ('' if none).
    Both states of the loop (the back-off and the short run between) say the same, so the message
    does not flip with them. A launcher's restarts are its retries (reconcilers/failure/)."""
    if desired.pod_role(pod) != names.ROLE_WORKER or cs.get("ready"):
        return ""
    last = (cs.get("lastState") or {}).get("terminated") or {}
    waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
    if not last or (waiting != "CrashLoopBackOff" and not (cs.get("restartCount") or 0)):
        return ""
    if last.get("exitCode") == 0 and waiting != "CrashLoopBackOff":
        return ""
    return "its last run " + termination(pod, str(cs.get("name") or "?"), last)


def slow(pod: Obj) -> Hold | None:
    """What keeps the pod from running that no component reported in its status, and since when:
    containers not started on its node (a Secret or ConfigMap volume that does not exist shows only
    in the kubelet's Events), or a worker that runs but is not Ready (its sshd does not answer)."""
    if meta(pod).get("deletionTimestamp") or pod_status(pod).get("phase") not in ("Pending", "Running"):
        return None
    sched = condition(pod, "PodScheduled")
    started = any((cs.get("state") or {}).keys() & {"running", "terminated"} for cs in container_statuses(pod))
    if (pod_status(pod).get("phase") == "Pending" and node(pod) and not started and sched is not None
            and sched.get("status") == "True"):  # (an init container that runs has started: it waits on purpose)
        since = str(sched.get("lastTransitionTime") or "")
        volumes = _config_volumes(pod)
        return Hold(R_NOT_STARTED, f"{who(pod)} has not started its containers since {since or 'it was scheduled'}",
                    "the kubelet has not said why in the pod's status: `kubectl describe pod "
                    f"{pod_name(pod)}` shows its Events (FailedMount: a volume it cannot mount)"
                    + (f"; it mounts {volumes}" if volumes else ""), since=since)
    ready = condition(pod, "Ready")
    if (desired.pod_role(pod) == names.ROLE_WORKER and pod_status(pod).get("phase") == "Running"
            and (ready is None or ready.get("status") != "True")):
        since = str((ready or {}).get("lastTransitionTime") or meta(pod).get("creationTimestamp") or "")
        return Hold(R_NOT_READY, f"{who(pod)} runs but is not Ready since {since}",
                    "its readiness probe fails (the launcher reaches a worker only once it is Ready)", since=since)
    return None


def _config_volumes(pod: Obj) -> str:
    """The pod's Secret and ConfigMap volumes that must exist ('secret s, configMap c')."""
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        for kind, key in (("secret", "secretName"), ("configMap", "name")):
            src = (v or {}).get(kind)
            if isinstance(src, dict) and not src.get("optional"):
                out.append(f"{kind} {src.get(key) or '?'}")
    return ", ".join(out)


def _image(pod: Obj, container: str, cs: Obj) -> str:
    """The image as the template names it (the status leaves it empty while it is not pulled)."""
    return str(spec_container(pod, container).get("image") or cs.get("image") or "?")
