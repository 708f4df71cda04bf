"""`mpijob-operator` / `python -m controller`: wires informers, queue, reconcilers and executor.

Informers start at once, also on a standby replica, so that a takeover finds warm caches; the
workers (and so every write) start only once this replica leads.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import replace

from client import permissions
from client.errors import ApiError
from client.permissions import Fence
from client.resources import KUEUE_WORKLOADS, MPIJOBS, WORKLOAD_PODGROUPS, WORKLOADS
from client.rest import RestClient
from controller import access, config, health, logs, metrics
from controller.executor import Executor
from controller.leader import LeaderElector
from controller.mpijob_controller import MPIJobController
from informers.factory import InformerFactory
from reconcilers.gang import workload_gang

log = logs.get("main")
COMPONENT = "mpi-operator"
# Leader election's own token bucket: a renewal is a GET and a PUT every retry period (2 s).
LEASE_QPS, LEASE_BURST = 5.0, 10


def _wait_for_crd(client: RestClient, stop: threading.Event) -> None:
    """Say plainly what is missing instead of a reflector retrying a 404 forever in silence."""
    path = f"/apis/{MPIJOBS.group}/{MPIJOBS.version}"
    warned = False
    while not stop.is_set():
        try:
            client.request("GET", path, timeout=10)
            return
        except ApiError as e:
            if e.status != 404:
                raise
            if not warned:
                log.error("the MPIJob CRD is not installed; install it with "
                          "`kubectl apply --server-side -f manifests/crd/`; waiting for it")
                warned = True
        except Exception as e:
            log.warning("API server unreachable; retrying", error=str(e))
        stop.wait(5)


def fence_of(opts: config.Options) -> Fence:
    """What this process may send: the grants of manifests/rbac for its flags (client/permissions.py);
    anything else raises before it is sent, whatever code path asks for it."""
    lease_ns = opts.leader_election_namespace if opts.leader_elect else None
    return permissions.operator_fence(opts.namespace, opts.gang_scheduling, lease_ns)


def lease_client(client: RestClient) -> RestClient:
    """The client leader election renews through: the controller's connection settings, a token
    bucket of its own (controller/leader.py)."""
    return client.with_own_limiter(LEASE_QPS, LEASE_BURST)


def _workload_api_missing(client: RestClient, stop: threading.Event) -> str:
    """With --gang-scheduling=workload: "" when the API server serves the Workload API, else why not
    (an error line now, and a condition on every MPIJob). Asked once, at start-up: the API server serves
    it only with a feature gate and a --runtime-config of its own, which change only with a restart."""
    path = f"/apis/{WORKLOADS.group}/{WORKLOADS.version}"
    while not stop.is_set():
        try:
            served = {r.get("name") for r in client.request("GET", path, timeout=10).get("resources") or []}
        except ApiError as e:
            if e.status != 404:
                log.warning("cannot read the API server's discovery; retrying", path=path, error=str(e))
                stop.wait(5)
                continue
            served = set()  # the group version is not served at all
        except Exception as e:
            log.warning("API server unreachable; retrying", error=str(e))
            stop.wait(5)
            continue
        missing = [r.plural for r in (WORKLOADS, WORKLOAD_PODGROUPS) if r.plural not in served]
        if not missing:
            return ""
        why = workload_gang.unavailable_message(missing)
        log.error("gang scheduling is unavailable: no MPIJob starts; each one says so in its WaitingForGang "
                  "condition", reason=why)
        return why
    return ""


def _kueue_served(client: RestClient, stop: threading.Event) -> bool:
    """Whether the API server serves Kueue's Workloads (KUEUE_WORKLOADS' group version): only then is
    there an informer on them (one on an API not served would retry a 404 forever and the caches would
    never sync). Asked once, at start-up: Kueue installed later is seen after a restart."""
    path = f"/apis/{KUEUE_WORKLOADS.group}/{KUEUE_WORKLOADS.version}"
    while not stop.is_set():
        try:
            resources = client.request("GET", path, timeout=10).get("resources") or []
        except ApiError as e:
            if e.status == 404:
                return False
            log.warning("cannot read the API server's discovery; retrying", path=path, error=str(e))
        except Exception as e:
            log.warning("API server unreachable; retrying", error=str(e))
        else:
            return any(r.get("name") == KUEUE_WORKLOADS.plural for r in resources)
        stop.wait(5)
    return False


# The first release whose API server knows a container's own restartPolicy and restartPolicyRules
# (ContainerRestartRules, alpha in 1.34: dropped when its gate is off, which leaves a launcher that
# runs again in a new pod; beta and on from 1.35). An older API server refuses the fields (422).
RESTART_RULES_SINCE = (1, 34)


def _server_version(client: RestClient, stop: threading.Event) -> tuple[int, int] | None:
    """(major, minor) of the API server (/version, readable by any client), None if it says no number."""
    while not stop.is_set():
        try:
            v = client.request("GET", "/version", timeout=10)
        except Exception as e:
            log.warning("cannot read the API server's version; retrying", error=str(e))
            stop.wait(5)
            continue
        major, minor = (str(v.get(k) or "") for k in ("major", "minor"))
        digits = "".join(ch for ch in minor if ch.isdigit())  # "37+" on some distributions
        if major.isdigit() and digits:
            return int(major), int(digits)
        log.warning("the API server's version has no number: launchers run again in new pods",
                    version=v.get("gitVersion"))
        return None
    return None


def _assess(client: RestClient, opts: config.Options, stop: threading.Event) -> permissions.Assessment:
    """Asks the API server for every grant these flags send, logs what is missing and what the operator
    does about it, and counts it in mpi_operator_rbac_missing (docs/operations.md, "Missing RBAC")."""
    lease = permissions.expand(permissions.LEADER_ELECTION) if opts.leader_elect else set()
    grants = permissions.needed(opts.worker_backend, opts.gang_scheduling, opts.network_isolation)
    lacking = access.missing(client, grants, opts.namespace, lease, opts.leader_election_namespace, stop)
    assessment = permissions.assess(lacking, opts.worker_backend)
    access.report(assessment, opts.namespace)
    effects = {t: "refuse" for t in assessment.refuse} | {t: "held" for t in assessment.blocked}
    effects |= {t: f.name for f, lacks in assessment.off for t in lacks}
    for (group, resource, verb), effect in effects.items():
        metrics.rbac_missing.labels(verb, resource, group, effect).set(1)
    return assessment


def main(argv: list[str] | None = None) -> int:
    opts = config.parse(argv)
    logs.setup(opts.log_format, opts.log_level)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    client = RestClient.from_kubeconfig(opts.kubeconfig, qps=opts.kube_api_qps, burst=opts.kube_api_burst)
    client.fence = fence_of(opts)
    if opts.master:  # upstream's --master: the API server's address, over the kubeconfig's
        client.api_client.configuration.host = opts.master
    if opts.ignored_flags:
        log.info("upstream logging flags accepted and ignored: logs always go to stderr",
                 flags=" ".join(opts.ignored_flags))
    elector = (
        LeaderElector(lease_client(client), opts.leader_election_namespace, opts.leader_election_id,
                      opts.identity)
        if opts.leader_elect else None
    )
    executor = Executor(client, elector.is_leader if elector else (lambda: True), COMPONENT, opts.identity)
    # What the operator may do, known before any informer starts (controller/access.py).
    assessment = _assess(client, opts, stop)
    if stop.is_set():
        return 0
    if assessment.refuse:
        return 2
    if assessment.feature_off(permissions.NETWORK_ISOLATION.name):
        opts = replace(opts, network_isolation=False)
    factory = InformerFactory(client, namespace=opts.namespace)
    unavailable = _workload_api_missing(client, stop) if opts.gang_scheduling == workload_gang.MODE else ""
    # Kueue's Workloads, when served and granted (a missing grant turns this alone off: controller/access.py)
    kueue = not assessment.feature_off(permissions.KUEUE_REASONS.name) and _kueue_served(client, stop)
    version = _server_version(client, stop) if opts.launcher_restart != "new-pod" else None
    rules = version is not None and version >= RESTART_RULES_SINCE
    ctrl = MPIJobController(opts, factory, executor, gang_unavailable=unavailable, container_restart_rules=rules,
                            permissions_missing=access.message(assessment, opts.namespace),
                            features_off=access.features_off(assessment, opts.namespace),
                            health_note=access.health_detail(assessment), kueue_served=kueue)

    synced = threading.Event()
    ports = health.Servers().start(
        config.split_bind(opts.metrics_bind_address),
        config.split_bind(opts.health_probe_bind_address),
        healthz=ctrl.healthy,
        readyz=lambda: (synced.is_set(), "ok" if synced.is_set() else "informer caches not synced"),
    )
    log.info("starting", version=config._version(), backend=opts.worker_backend, namespace=opts.namespace or "(all)",
             leader_elect=opts.leader_elect, identity=opts.identity, launcher_restart=(
                 opts.launcher_restart if ctrl.config.container_restart_rules else "new-pod"),
             **{f"{k}_port": v for k, v in ports.items()})

    _wait_for_crd(client, stop)
    if stop.is_set():
        return 0
    factory.start()
    t0 = time.monotonic()
    while not stop.is_set() and not factory.wait_for_cache_sync(timeout=10):
        log.warning("informer caches not synced yet", waited_s=round(time.monotonic() - t0))
    if stop.is_set():
        factory.stop()
        return 0
    synced.set()
    log.info("caches synced", seconds=round(time.monotonic() - t0, 2))

    if elector is None:
        ctrl.run_workers()
        stop.wait()
    else:
        def lost() -> None:
            if not stop.is_set():
                # A replica that lost its Lease may hold stale intentions: restart clean, as client-go does.
                log.error("leader election lost; exiting")
                os._exit(1)

        # Workers stopped (every write of ours landed) before the Lease is released.
        elector.run(on_started=ctrl.run_workers, on_stopped=lost, stop=stop, before_release=ctrl.shutdown)
    log.info("shutting down")
    ctrl.shutdown()
    factory.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
