"""Plain facts of one pod, as the MPIJob's messages name them (reconcilers/explain/): who it is
('worker pi-worker-1 (pod pi-worker-1, node n1)'), its conditions and container statuses, and what
its cached copy leaves out, taken from the MPIJob's template (`with_template`). Pure.
"""

from __future__ import annotations

from reconcilers import desired, names
from reconcilers.types import Obj

# The words of a component are quoted up to this length: a message stays readable in `kubectl
# describe`, and an Event's message is cut by the API server at 1 KiB anyway.
DETAIL_MAX = 300


def meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def pod_status(pod: Obj) -> Obj:
    return pod.get("status") or {}


def pod_name(pod: Obj) -> str:
    return str(meta(pod).get("name") or "?")


def node(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def quote(text: object) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= DETAIL_MAX else s[:DETAIL_MAX - 3] + "..."


def who(pod: Obj) -> str:
    """'worker pi-worker-1 (pod pi-worker-1, node n1)': the pod's role and hostname, name and node."""
    return f"{desired.pod_role(pod) or 'pod'} {desired.pod_hostname(pod)} ({where(pod)})"


def condition(pod: Obj, ctype: str) -> Obj | None:
    return next((c for c in pod_status(pod).get("conditions") or [] if isinstance(c, dict) and c.get("type") == ctype),
                None)


def container_statuses(pod: Obj) -> list[Obj]:
    st = pod_status(pod)
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


def spec_container(pod: Obj, name: str) -> Obj:
    spec = pod.get("spec") or {}
    return next((c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                 if isinstance(c, dict) and c.get("name") == name), {})


def memory_limit(pod: Obj, container: str) -> str | None:
    return ((spec_container(pod, container).get("resources") or {}).get("limits") or {}).get("memory")


def where(pod: Obj) -> str:
    """'pod P, node N' (the node when known)."""
    return f"pod {pod_name(pod)}" + (f", node {node(pod)}" if node(pod) else "")
