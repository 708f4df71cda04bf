"""What ended a pod or its container, in the words of the component that recorded it: the kubelet
(a container's termination: OOMKilled with the memory limit, the exit code and signal, StartError;
`Evicted`; `DeadlineExceeded`), the control plane (`DisruptionTarget`: preemption, the taint manager,
the pod garbage collector, the Eviction API). One describer for every Restarting, Failed and
worker-loss message (reconcilers/failure/messages.py, reconcilers/outcome.py). Pure.
"""

from __future__ import annotations

from reconcilers.explain.facts import condition, container_statuses, memory_limit, meta, pod_status, quote, who
from reconcilers.types import Obj

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
           9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}

# The control plane's DisruptionTarget reasons, as a user reads them.
DISRUPTIONS = {
    "PreemptionByScheduler": "was preempted by the scheduler",
    "DeletionByTaintManager": "lost its node (deleted by the taint manager)",
    "DeletionByPodGC": "lost its node (deleted by the pod garbage collector: the node is gone)",
    "EvictionByEvictionAPI": "was evicted through the Eviction API (a drain, the descheduler)",
    "TerminationByKubelet": "was stopped by the kubelet (node pressure or shutdown)",
}



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
    st = pod_status(pod)
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
    if term is not None and meta(pod).get("deletionTimestamp") and stopped(term[1]):
        return "was lost (deleted)"  # the delete's SIGTERM ended it (a stopped sshd exits 0), not its command
    if term is not None:
        return termination(pod, *term)
    if st.get("reason") or st.get("phase") == "Failed":  # the kubelet's own (OutOfcpu, NodeAffinity, Shutdown, ...)
        said = quote(st.get("message"))
        return f"failed ({st.get('reason') or 'Failed'}{': ' + said if said else ''})"
    if meta(pod).get("deletionTimestamp"):
        return "was lost (deleted)"
    ready = condition(pod, "Ready")
    if ready is not None and ready.get("reason") == "NodeNotReady":
        return "lost its node (NodeNotReady)"
    return "was lost"


def stopped(term: Obj) -> bool:
    """The container ended as a stop ends it: exit 0 or SIGTERM's 143, not OOMKilled, no other signal."""
    return term.get("reason") != "OOMKilled" and term.get("exitCode") in (0, 143)


def last_termination(pod: Obj) -> tuple[str, Obj] | None:
    """(container, termination) of the container that ended the pod: a failed one before one that
    exited 0 (the others are stopped after it), the current state before the last one."""
    ends = []
    for cs in container_statuses(pod):
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
    for cs in container_statuses(pod):
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


def restarted_since(pod: Obj, since: str) -> bool:
    """A container of the pod failed and was restarted in place at or after `since` (an RFC 3339
    time; '' never): a worker lost and back, its pod never ended."""
    if not since:
        return False
    for cs in container_statuses(pod):
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if last and last.get("exitCode") != 0 and str(last.get("finishedAt") or "") >= since:
            return True
    return False
