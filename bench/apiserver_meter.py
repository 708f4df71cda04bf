"""The operator's API requests counted from the API server's side: its audit log.

The local API server records every request of the operator's ServiceAccount, one JSON line each, once
the response is complete (hack/audit/policy.yaml, flags in hack/cluster-up.sh). A benchmark marks the
log's end before a run and counts what was appended after, so its figures are the API server's, not
the operator's own metrics: a request the client library retried, a write the executor did not count,
an Event sent by the event recorder all show up here.

    meter = AuditMeter.of_cluster(cluster_dir)
    mark = meter.mark()
    ... the run ...
    counts = meter.count(mark, namespace="bench-x")   # {("patch", "MPIJob/status"): 300, ...}
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

OPERATOR_USER = "system:serviceaccount:mpi-operator:mpi-operator"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
KINDS = {
    "mpijobs": "MPIJob", "jobs": "Job", "statefulsets": "StatefulSet", "pods": "Pod", "services": "Service",
    "configmaps": "ConfigMap", "secrets": "Secret", "events": "Event", "leases": "Lease",
    "podgroups": "PodGroup", "workloads": "Workload", "namespaces": "Namespace",
}


@dataclass(frozen=True)
class Mark:
    """A position in the audit log: the file (its inode, which rotation changes) and the offset."""
    inode: int
    offset: int


def kind_of(ref: dict) -> str:
    """'MPIJob/status' for objectRef {resource: mpijobs, subresource: status}; the plural if unknown."""
    resource = ref.get("resource") or "?"
    kind = KINDS.get(resource, resource)
    return f"{kind}/{ref['subresource']}" if ref.get("subresource") else kind


class AuditMeter:
    def __init__(self, path: Path, user: str = OPERATOR_USER) -> None:
        self.path, self.user = Path(path), user

    @classmethod
    def of_cluster(cls, cluster_dir: Path) -> AuditMeter:
        path = Path(cluster_dir) / "audit" / "audit.log"
        if not path.exists():
            raise RuntimeError(f"no audit log at {path}: the local cluster was started without hack/audit/policy.yaml "
                               "(restart it: make cluster-down cluster-up)")
        return cls(path)

    def mark(self) -> Mark:
        st = self.path.stat()
        return Mark(st.st_ino, st.st_size)

    def _lines(self, mark: Mark) -> list[str]:
        """The lines appended since `mark`. After a rotation (--audit-log-maxsize), the rotated file's tail
        is read too: it is the one backup with the mark's inode."""
        out: list[str] = []
        if self.path.stat().st_ino != mark.inode:
            for backup in self.path.parent.glob(self.path.stem + "-*" + self.path.suffix):
                if backup.stat().st_ino == mark.inode:
                    with backup.open("rb") as f:
                        f.seek(mark.offset)
                        out += f.read().decode().splitlines()
            offset = 0
        else:
            offset = mark.offset
        with self.path.open("rb") as f:
            f.seek(offset)
            data = f.read()
        # a line being written has no newline yet: it belongs to the next count
        out += data[: data.rfind(b"\n") + 1].decode().splitlines()
        return out

    def events(self, mark: Mark, namespace: str | None = None) -> list[dict]:
        """The operator's audit events since `mark`, in `namespace` if given (cluster-scoped ones excluded)."""
        out = []
        for line in self._lines(mark):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if (ev.get("user") or {}).get("username") != self.user or ev.get("stage") != "ResponseComplete":
                continue
            if namespace is not None and (ev.get("objectRef") or {}).get("namespace") != namespace:
                continue
            out.append(ev)
        return out

    def count(self, mark: Mark, namespace: str | None = None) -> Counter:
        """(verb, kind) -> requests since `mark`."""
        return Counter((ev["verb"], kind_of(ev.get("objectRef") or {})) for ev in self.events(mark, namespace))

    def settle(self, quiet_s: float = 1.0, timeout: float = 30.0) -> None:
        """Waits until the log stops growing for `quiet_s`: the API server writes each line as its
        response completes (blocking mode), so a quiet log holds every request made so far."""
        last, since, t0 = -1, time.monotonic(), time.monotonic()
        while time.monotonic() - t0 < timeout:
            size = self.path.stat().st_size
            if size != last:
                last, since = size, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            time.sleep(0.2)


def writes(counts: Counter) -> Counter:
    return Counter({k: v for k, v in counts.items() if k[0] in WRITE_VERBS})


def per(counts: Counter, n: int) -> dict[str, float]:
    """{'patch MPIJob/status': 1.0, ...} per MPIJob, sorted by verb then kind."""
    return {f"{verb} {kind}": round(c / n, 2) for (verb, kind), c in sorted(counts.items())}
