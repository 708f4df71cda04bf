"""What one pod's own status says of it, in the words of the component that wrote them: the
scheduler (`PodScheduled`), the kubelet (container states, `Evicted`), the control plane
(`DisruptionTarget`: preemption, the taint manager, the pod garbage collector, the Eviction API).
docs/operations.md, "Why is my MPIJob not running?", lists every case. Pure.

- `who`: "worker pi-worker-1 (pod pi-worker-1, node n1)", the role, hostname, pod and node.
- `hold`: what keeps the pod from running that a component reported (unschedulable, an image that
  cannot be pulled, a container that cannot be created, a worker in CrashLoopBackOff), or None.
- `slow`: what keeps it from running that nobody reported (containers not started, a worker not
  Ready) and since when: only worth saying once it has lasted (waiting.py decides how long).
- `end`: what ended the pod or its container: "was OOMKilled (limit 512Mi; container sshd, exit code
  137)", "was evicted by the kubelet: The node was low on resource: memory. ...", "was preempted ...".
"""

from __future__ import annotations

from dataclasses import dataclass

from reconcilers import desired, names
from reconcilers.types import Obj

# The words of a component are quoted up to this length: a message stays readable in `kubectl
# describe`, and an Event's message is cut by the API server at 1 KiB anyway.
DETAIL_MAX = 300

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
           9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}

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

# The control plane's DisruptionTarget reasons, as a user reads them.
DISRUPTIONS = {
    "PreemptionByScheduler": "was preempted by the scheduler",
    "DeletionByTaintManager": "lost its node (deleted by the taint manager)",
    "DeletionByPodGC": "lost its node (deleted by the pod garbage collector: the node is gone)",
    "EvictionByEvictionAPI": "was evicted through the Eviction API (a drain, the descheduler)",
    "TerminationByKubelet": "was stopped by the kubelet (node pressure or shutdown)",
}


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


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def _status(pod: Obj) -> Obj:
    return pod.get("status") or {}


def pod_name(pod: Obj) -> str:
    return str(_meta(pod).get("name") or "?")


def node(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def quote(text: object) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= DETAIL_MAX else s[:DETAIL_MAX - 3] + "..."


def who(pod: Obj) -> str:
    """'worker pi-worker-1 (pod pi-worker-1, node n1)': the pod's role and hostname, name and node."""
    return f"{desired.pod_role(pod) or 'pod'} {desired.pod_hostname(pod)} ({where(pod)})"


def condition(pod: Obj, ctype: str) -> Obj | None:
    return next((c for c in _status(pod).get("conditions") or [] if isinstance(c, dict) and c.get("type") == ctype),
                None)


def _container_statuses(pod: Obj) -> list[Obj]:
    st = _status(pod)
    return [cs for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]
            if isinstance(cs, dict)]


def with_template(pod: Obj, mpijob: Obj) -> Obj:
    """The pod with what its cached copy leaves out (informers/transforms.py slim_pod keeps no
    containers or volumes) taken from its replica's template in the MPIJob: images, memory limits,
    volumes. What the pod's own spec has wins."""
    role = "Launcher" if desired.pod_role(pod) == names.ROLE_LAUNCHER else "Worker"
    replica = (((mpijob.get("spec") or {}).get("mpiReplicaSpecs") or {}).get(role) or {})
    template = (replica.get("template") or {}).get("spec") or {}
    return {**pod, "spec": {**template, **(pod.get("spec") or {})}} if template else pod


def _spec_container(pod: Obj, name: str) -> Obj:
    spec = pod.get("spec") or {}
    return next((c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                 if isinstance(c, dict) and c.get("name") == name), {})


def _image(pod: Obj, container: str, cs: Obj) -> str:
    """The image as the template names it (the status leaves it empty while it is not pulled)."""
    return str(_spec_container(pod, container).get("image") or cs.get("image") or "?")


def memory_limit(pod: Obj, container: str) -> str | None:
    return ((_spec_container(pod, container).get("resources") or {}).get("limits") or {}).get("memory")


# -- what holds a pod -------------------------------------------------------------------------------


def hold(pod: Obj) -> Hold | None:
    """What a component reported keeps the pod from running, the first that holds: the scheduler's
    `PodScheduled=False` (not a scheduling gate: a gang's, reconcilers/gang/), then the kubelet's
    waiting reasons of its containers, init containers first."""
    sched = condition(pod, "PodScheduled")
    if sched is not None and sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
        return Hold(R_UNSCHEDULABLE, f"{who(pod)} cannot be scheduled", f"the scheduler: {quote(sched.get('message'))}")
    for cs in _container_statuses(pod):
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
    if _meta(pod).get("deletionTimestamp") or _status(pod).get("phase") not in ("Pending", "Running"):
        return None
    sched = condition(pod, "PodScheduled")
    if _status(pod).get("phase") == "Pending" and node(pod) and sched is not None and sched.get("status") == "True":
        since = str(sched.get("lastTransitionTime") or "")
        volumes = _config_volumes(pod)
        return Hold(R_NOT_STARTED, f"{who(pod)} has not started its containers since {since or 'it was scheduled'}",
                    "the kubelet has not said why in the pod's status: `kubectl describe pod "
                    f"{pod_name(pod)}` shows its Events (FailedMount: a volume it cannot mount)"
                    + (f"; it mounts {volumes}" if volumes else ""), since=since)
    ready = condition(pod, "Ready")
    if (desired.pod_role(pod) == names.ROLE_WORKER and _status(pod).get("phase") == "Running"
            and (ready is None or ready.get("status") != "True")):
        since = str((ready or {}).get("lastTransitionTime") or _meta(pod).get("creationTimestamp") or "")
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


# -- what ended a pod -------------------------------------------------------------------------------


def termination(pod: Obj, container: str, term: Obj) -> str:
    """One container's end as the kubelet recorded it: 'was OOMKilled (limit 512Mi; container sshd,
    exit code 137)', 'ended with exit code 137 (signal 9, SIGKILL; container c)', 'ended with
    exit code 1 (container c)', 'could not start container c (StartError: ...)'."""
    reason, code = term.get("reason") or "", term.get("exitCode")
    said = quote(term.get("message"))
    code_text = f", exit code {code}" if isinstance(code, int) else ""
    if reason == "OOMKilled":
        limit = memory_limit(pod, container)
        return f"was OOMKilled ({f'limit {limit}' if limit else 'no memory limit'}; container {container}{code_text})"
    if reason in ("StartError", "ContainerCannotRun"):
        return f"could not start container {container} ({reason}" + (f": {said})" if said else ")")
    signal = term.get("signal") if isinstance(term.get("signal"), int) else (
        code - 128 if isinstance(code, int) and code - 128 in SIGNALS else None)
    if signal:
        name = SIGNALS.get(signal, "")
        return f"ended with exit code {code} (signal {signal}{', ' + name if name else ''}; container {container})"
    extra = f", {reason}" if reason and reason not in ("Error", "Completed") else ""
    out = f"ended with exit code {code if isinstance(code, int) else '?'} (container {container}{extra})"
    return out + (f": {said}" if said else "")


def end(pod: Obj) -> str:
    """What ended the pod, the most telling first: the kubelet's eviction or the pod's deadline, a
    disruption the control plane recorded, a container's end; else that it was deleted or lost."""
    st = _status(pod)
    if st.get("reason") == "Evicted":
        return f"was evicted by the kubelet: {quote(st.get('message')) or 'node pressure'}"
    if st.get("reason") == "DeadlineExceeded":
        return "ran past its activeDeadlineSeconds (DeadlineExceeded)"
    dt = condition(pod, "DisruptionTarget")
    if dt is not None and dt.get("status") == "True":
        reason = str(dt.get("reason") or "Disrupted")
        said = quote(dt.get("message"))
        return f"{DISRUPTIONS.get(reason, 'was disrupted')} ({reason}{': ' + said if said else ''})"
    term = last_termination(pod)
    if term is not None:
        return termination(pod, *term)
    if st.get("reason") or st.get("phase") == "Failed":  # the kubelet's own (OutOfcpu, NodeAffinity, Shutdown, ...)
        said = quote(st.get("message"))
        return f"failed ({st.get('reason') or 'Failed'}{': ' + said if said else ''})"
    if _meta(pod).get("deletionTimestamp"):
        return "was lost (deleted)"
    ready = condition(pod, "Ready")
    if ready is not None and ready.get("reason") == "NodeNotReady":
        return "lost its node (NodeNotReady)"
    return "was lost"


def last_termination(pod: Obj) -> tuple[str, Obj] | None:
    """(container, termination) of the container that ended the pod: a failed one before one that
    exited 0 (the others are stopped after it), the current state before the last one."""
    ends = []
    for cs in _container_statuses(pod):
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term:
            ends.append((str(cs.get("name") or "?"), term))
    failed = [e for e in ends if e[1].get("exitCode") != 0]
    return (failed or ends or [None])[0]


def ended_text(pod: Obj) -> str:
    """'worker pi-worker-1 (pod ..., node ...) was OOMKilled (limit 512Mi; ...)'."""
    return f"{who(pod)} {end(pod)}"


def run_detail(pod: Obj, exit_code: int | None) -> str:
    """What the kubelet recorded of the run of `pod` that exited with `exit_code`, beyond the code:
    'OOMKilled: limit 64Mi, container launcher', 'signal 9, SIGKILL', 'StartError: ...'; '' for a
    plain exit (or when the pod no longer says)."""
    for cs in _container_statuses(pod):
        for state in ("state", "lastState"):
            term = (cs.get(state) or {}).get("terminated") or {}
            if term and term.get("exitCode") == exit_code:
                return _detail(pod, str(cs.get("name") or "?"), term)
    return ""


def _detail(pod: Obj, container: str, term: Obj) -> str:
    reason, code, said = term.get("reason") or "", term.get("exitCode"), quote(term.get("message"))
    if reason == "OOMKilled":
        limit = memory_limit(pod, container)
        return f"OOMKilled: {f'limit {limit}' if limit else 'no memory limit'}, container {container}"
    if reason in ("StartError", "ContainerCannotRun"):
        return f"{reason}: {said}" if said else reason
    signal = isinstance(code, int) and code - 128 in SIGNALS
    return f"signal {code - 128}, {SIGNALS[code - 128]}" if signal else ""


def where(pod: Obj) -> str:
    """'pod P, node N' (the node when known)."""
    return f"pod {pod_name(pod)}" + (f", node {node(pod)}" if node(pod) else "")


def restarted_since(pod: Obj, since: str) -> bool:
    """A container of the pod failed and was restarted in place at or after `since` (an RFC 3339
    time; '' never): a worker lost and back, its pod never ended."""
    if not since:
        return False
    for cs in _container_statuses(pod):
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if last and last.get("exitCode") != 0 and str(last.get("finishedAt") or "") >= since:
            return True
    return False
