"""The API resources the operator reads and writes, and their REST paths. The group and version of
each kind the planner builds are the planner's own constants (reconcilers/), one fact in one place."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from reconcilers import names, netpol
from reconcilers.gang import podgroup, workload_gang


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @classmethod
    def of(cls, api_version: str, plural: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        return cls(group, version, plural, kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """`/api/v1/namespaces/ns/pods/x[/status]`; without a namespace, the all-namespaces path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [base]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError("a subresource needs a name")
        return "/".join(parts)


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
JOBS = Resource("batch", "v1", "jobs", "Job")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
MPIJOBS = Resource.of(names.API_VERSION, "mpijobs", names.KIND)
# Gang scheduling (--gang-scheduling): scheduler-plugins' and Volcano's PodGroups.
PODGROUPS = Resource.of(podgroup.SCHEDULER_PLUGINS_API, "podgroups", podgroup.KIND)
VOLCANO_PODGROUPS = Resource.of(podgroup.VOLCANO_API, "podgroups", podgroup.KIND)
# --gang-scheduling=workload: Kubernetes' own Workload API (reconcilers/gang/workload_gang.py).
WORKLOADS = Resource.of(workload_gang.API, "workloads", workload_gang.WORKLOAD_KIND)
WORKLOAD_PODGROUPS = Resource.of(workload_gang.API, "podgroups", podgroup.KIND)
# Kueue's Workloads (kueue.x-k8s.io/v1beta2, Kueue 0.19): read only, to say why Kueue keeps an MPIJob
# suspended (reconcilers/explain/kueue.py); watched only when the cluster serves it.
KUEUE_WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
# --network-isolation: each MPIJob's NetworkPolicy (reconcilers/netpol.py).
NETWORKPOLICIES = Resource.of(netpol.API, "networkpolicies", netpol.KIND)

ALL = (PODS, SERVICES, CONFIGMAPS, SECRETS, EVENTS, NAMESPACES, SERVICEACCOUNTS, JOBS, STATEFULSETS, LEASES,
       MPIJOBS, PODGROUPS, VOLCANO_PODGROUPS, WORKLOADS, WORKLOAD_PODGROUPS, NETWORKPOLICIES)
_BY_GVK = {(r.api_version, r.kind): r for r in ALL}


def resource_for(api_version: str, kind: str) -> Resource:
    """The Resource of a known (apiVersion, kind); KeyError for others."""
    try:
        return _BY_GVK[(api_version, kind)]
    except KeyError:
        raise KeyError(f"unknown resource {api_version} {kind}") from None
