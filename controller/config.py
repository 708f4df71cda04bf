"""The operator's command line (docs/architecture.md section 5) parsed into one immutable Options
value. The Kubeflow MPI Operator's flags are accepted too, with their upstream meaning
(controller/upstream_flags.py)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid
from dataclasses import dataclass, fields

from controller import upstream_flags


@dataclass(frozen=True)
class Options:
    kubeconfig: str | None = None
    worker_backend: str = "job"
    namespace: str = ""
    threadiness: int = 4
    log_readers: int = 4
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    resync_period: float = 300.0
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = False
    leader_election_namespace: str = "mpi-operator"
    leader_election_id: str = "mpi-operator"
    identity: str = ""
    cluster_domain: str = ""
    controller_name: str = "kubeflow.org/mpi-operator"
    log_format: str = "console"
    log_level: str = "info"
    queue_qps: float = 10.0
    queue_burst: int = 100
    gang_scheduling: str = ""
    network_isolation: bool = True
    launcher_restart: str = "auto"
    launcher_names_wait: int = 300
    master: str = ""
    ignored_flags: tuple[str, ...] = ()  # upstream (klog) flags accepted without effect; logged once


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _bind_address(text: str) -> str:
    if text in ("0", ""):
        return "0"  # disabled, as controller-runtime does
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"want [host]:port (port 0-65535) or 0, got {text!r}")
    return text


def _bool(text: str) -> bool:
    """Go's strconv.ParseBool, as upstream's and klog's boolean flags read their values."""
    value = text.strip().lower()
    if value in ("1", "t", "true"):
        return True
    if value in ("0", "f", "false"):
        return False
    raise argparse.ArgumentTypeError(f"want true or false, got {text!r}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mpijob-operator",
        description="Runs kubeflow.org/v2beta1 MPIJobs: workers as an Indexed Job or a StatefulSet, "
        "the launcher as a batch/v1 Job.",
    )
    p.add_argument("--kubeconfig", "--kubeConfig", default=os.environ.get("KUBECONFIG") or None,
                   help="path to a kubeconfig; default: $KUBECONFIG, else in-cluster, else ~/.kube/config")
    p.add_argument("--worker-backend", choices=("job", "statefulset"), default="job",
                   help="what runs the workers: an Indexed Job (default) or a StatefulSet")
    p.add_argument("--namespace", default=os.environ.get("KUBEFLOW_NAMESPACE", ""),
                   help="watch only this namespace (default: $KUBEFLOW_NAMESPACE, else all)")
    p.add_argument("--threadiness", type=_positive_int, default=4, help="MPIJobs reconciled at once")
    p.add_argument("--log-readers", type=_positive_int, default=4,
                   help="launcher logs read at once for verdicts, apart from the reconciles")
    p.add_argument("--kube-api-qps", type=float, default=50.0, help="client-side limit of API calls/s")
    p.add_argument("--kube-api-burst", type=_positive_int, default=100, help="burst of API calls")
    p.add_argument("--resync-period", type=float, default=300.0,
                   help="seconds between re-deliveries of every cached MPIJob (0: never)")
    p.add_argument("--metrics-bind-address", type=_bind_address, default=":8080",
                   help="where /metrics is served ([host]:port, 0 to disable)")
    p.add_argument("--health-probe-bind-address", type=_bind_address, default=":8081",
                   help="where /healthz and /readyz are served ([host]:port, 0 to disable)")
    p.add_argument("--leader-elect", action="store_true",
                   help="elect one active replica through a coordination.k8s.io Lease")
    p.add_argument("--leader-election-namespace", default=os.environ.get("POD_NAMESPACE") or "mpi-operator")
    p.add_argument("--leader-election-id", default="mpi-operator", help="name of the Lease")
    p.add_argument("--cluster-domain", default="",
                   help="appended to worker DNS names in the hostfile, e.g. cluster.local (default: none)")
    p.add_argument("--controller-name", default="kubeflow.org/mpi-operator",
                   help="runPolicy.managedBy value this operator acts on")
    p.add_argument("--log-format", choices=("json", "console"), default="console")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument("--queue-qps", "--controller-queue-rate-limit", type=float, default=10.0,
                   help="overall retry rate of the work queue")
    p.add_argument("--queue-burst", "--controller-queue-burst", type=_positive_int, default=100)
    upstream_flags.add_flags(p)
    p.add_argument("--gang-scheduling", default="",
                   help="gang-schedule each MPIJob through a PodGroup: 'workload' (Kubernetes' own Workload API, "
                   "the default kube-scheduler; Kubernetes >= 1.37 with the GenericWorkload gate), 'volcano', or the "
                   "schedulerName of a scheduler-plugins Coscheduling scheduler (default: off)")
    p.add_argument("--network-isolation", type=_bool, nargs="?", const=True, default=True,
                   help="give each MPIJob a NetworkPolicy that admits only its own pods (and the peers of its "
                   "annotation mpijob-operator.dev/network-ingress-from); needs a NetworkPolicy implementation "
                   "in the cluster to take effect (default: true; --network-isolation=false turns it off)")
    p.add_argument("--launcher-restart", choices=("auto", "in-place", "new-pod"), default="auto",
                   help="how a failed launcher runs again where the API server admits container restart rules "
                   "(Kubernetes >= 1.34): 'auto' (default) and 'in-place' restart its container in place with "
                   "both backends; 'new-pod' always makes a new pod (with the Job backend, after a lost worker, "
                   "in a launcher Job made afresh with the new workers)")
    p.add_argument("--launcher-names-wait", type=_non_negative_int, default=300,
                   help="seconds the launcher's init container mpijob-wait-for-workers waits for every host of "
                   "the hostfile to resolve before mpirun starts; past it the attempt fails naming the hosts "
                   "(default: 300; 0: no init container, for launcher images without /bin/sh)")
    return p


def parse(argv: list[str] | None = None) -> Options:
    p = parser()
    a = p.parse_args(upstream_flags.normalize_argv(sys.argv[1:] if argv is None else argv))
    if a.show_version:
        print(f"{p.prog} {_version()}")
        sys.exit(0)
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    # Every Options field but these is a flag of the same name (dashes for underscores).
    derived = {"identity": identity, **upstream_flags.overrides(a)}
    flags = {f.name: getattr(a, f.name) for f in fields(Options) if f.name not in derived}
    return Options(**flags, **derived)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("mpijob-operator")
    except Exception:
        return "dev"


def split_bind(address: str) -> tuple[str, int] | None:
    """":8080" -> ("0.0.0.0", 8080); "0" -> None (disabled)."""
    if address == "0":
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))
