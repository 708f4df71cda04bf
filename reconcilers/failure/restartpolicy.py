"""How the launcher pod is told to run again (docs/architecture.md section 11): its restartPolicy,
the launcher container's own restart fields, and the launcher Job's podFailurePolicy. Pure; used
by desired.py (what to create) and retries.py (what was created, counted).

Where the API server admits container restart rules (`Config.container_restart_rules`: Kubernetes
>= 1.34 with the ContainerRestartRules gate, beta and on by default from 1.35), a failed launcher
container can restart in place: the kubelet runs it again in the same pod at once, with no new pod,
schedule or DNS record, and the pod keeps `restartPolicy: Never`, so that its Job may have a
podFailurePolicy. Elsewhere the launcher Job makes a new pod per retry, after its backoff (10 s,
then doubling).

When (`--launcher-restart`, `Config.launcher_restart`): `auto`, the default, restarts in place with
both backends; `in-place` is the same; `new-pod` never. On the StatefulSet backend a lost worker
alone is replaced (Ready again in about 2 s). On the Job backend the operator makes the worker Job
afresh (every worker restarts), and meanwhile the Service selects the launcher alone, so a launcher
restarted at once finds no old worker's name and its entrypoint waits for the new ones (children.
workers_leaving). Where the cluster admits no container restart rules, the Job backend makes the
launcher Job afresh with the new workers instead (afresh.remade). Figures: docs/architecture.md
section 11, "When in place".

Never in place under `launcherCreationPolicy: WaitForWorkersReady`: the kubelet restarts a container
at once, before a lost worker's replacement is Ready, and nothing can hold it; the launcher pod ends
instead, and the operator makes its Job afresh, held until every worker is Ready, as on the first
start (retries.remade, children.launcher_waits; docs/architecture.md section 11, "WaitForWorkersReady
and restarts").
"""

from __future__ import annotations

from reconcilers.defaults import LAUNCHER
from reconcilers.types import Config, Obj

DISRUPTION_TARGET = "DisruptionTarget"
EXIT_CODE = "ExitCode"  # the upstream launcher restartPolicy: 1-127 permanent, 128-255 retried
PERMANENT_EXIT_CODES = list(range(1, 128))
RETRIED_EXIT_CODES = list(range(128, 256))
# The launcher Job fails by itself one counted failure after the operator would have: time for the
# operator to judge a failure (was a worker disrupted?) before the Job controller acts on it. The Job
# controller fails a Job whose pods restart Never at `failed > backoffLimit`, but one whose pods
# restart OnFailure at `restarts >= backoffLimit` (its pastBackoffLimitOnFailure), one sooner: that
# one's limit is a failure higher, so the net is as wide in both (docs/architecture.md section 11).
NET = 1
NET_ON_FAILURE = NET + 1


def backoff_limit(job: Obj) -> int:
    v = job["spec"]["runPolicy"].get("backoffLimit")
    return v if isinstance(v, int) and v > 0 else 0


def launcher_policy(job: Obj) -> str:
    return job["spec"]["mpiReplicaSpecs"][LAUNCHER].get("restartPolicy") or "Never"


def launcher_container_name(job: Obj) -> str | None:
    template = job["spec"]["mpiReplicaSpecs"][LAUNCHER].get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or [{}]
    name = containers[0].get("name") if isinstance(containers[0], dict) else None
    return name if isinstance(name, str) and name else None


def launcher_pod(job: Obj, config: Config) -> tuple[str, Obj, Obj | None]:
    """(the pod's restartPolicy, fields for the launcher container, the Job's podFailurePolicy).

    | Launcher restartPolicy | restart in place (rules admitted, backoffLimit > 0) | elsewhere |
    |---|---|---|
    | Never (default) | container `restartPolicy: OnFailure` | a new pod per retry |
    | OnFailure | container `restartPolicy: OnFailure` | pod `restartPolicy: OnFailure`, no podFailurePolicy |
    | ExitCode | container rule: restart on 128-255 | a new pod per retry on 128-255 |

    The pod's own policy is Never wherever it can be: the Job API allows a podFailurePolicy only then,
    and that policy ignores disruptions (a pod with `DisruptionTarget`) and, for ExitCode, fails the
    Job on 1-127 of the launcher container. With backoffLimit 0 nothing restarts: no retry to make
    fast (and OnFailure is then Never: the same single run, with disruptions ignored)."""
    policy, retries = launcher_policy(job), backoff_limit(job) > 0
    waits = waits_for_workers(job)
    in_place = config.container_restart_rules and retries and in_place_for(config) and not waits
    container: Obj = {}
    if in_place and policy == EXIT_CODE:
        container = {"restartPolicy": "Never", "restartPolicyRules": [
            {"action": "Restart", "exitCodes": {"operator": "In", "values": RETRIED_EXIT_CODES}}]}
    elif in_place:
        container = {"restartPolicy": "OnFailure"}
    elif policy == "OnFailure" and retries and not waits:
        return "OnFailure", {}, None  # the kubelet restarts it; the Job API allows no podFailurePolicy then
    rules: list[Obj] = [{"action": "Ignore", "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}]}]
    if policy == EXIT_CODE:
        name = launcher_container_name(job)
        rules.append({"action": "FailJob", "onExitCodes": {
            **({"containerName": name} if name else {}), "operator": "In", "values": PERMANENT_EXIT_CODES}})
    return "Never", container, {"rules": rules}


def waits_for_workers(job: Obj) -> bool:
    """`launcherCreationPolicy: WaitForWorkersReady`: the launcher runs only once every worker is Ready,
    on its first start and on every retry (no restart in place, module docstring)."""
    return job["spec"].get("launcherCreationPolicy") == "WaitForWorkersReady"


def in_place_for(config: Config) -> bool:
    """Whether `--launcher-restart` asks for the launcher restarted in place (`auto` does, with
    either backend: the Service narrowed while the worker Job is made afresh took away the race that
    kept the Job backend out; `launcher_pod` also needs the cluster's container restart rules)."""
    mode = config.launcher_restart
    return mode in ("in-place", "auto")


def job_backoff_limit(backoff: int, not_counted: int, pod_restart_policy: str = "Never") -> int:
    """The launcher Job's own backoffLimit: the user's, the failures the operator does not count, and
    the net under the operator's count (retries.py), as wide for pods restarted OnFailure by the
    kubelet (the Job counts their restarts) as for pods made anew."""
    return backoff + not_counted + (NET_ON_FAILURE if pod_restart_policy == "OnFailure" else NET)
