"""Properties (hypothesis): any MPIJob gives a plan or validation errors, never an exception; applying a
plan and planning again writes nothing (a plan that deletes converges in one more round)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconcilers import status as rst
from reconcilers.names import NETWORK_INGRESS_FROM_ANNOTATION, NETWORK_ISOLATION_ANNOTATION
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed
from reconcilers.validation import validate
from tests.unit.sim import (
    BACKENDS,
    NOW,
    KeyGen,
    apply_plan,
    converge,
    job_finished,
    mpijob,
    pod,
    run,
    with_status,
    workers_ready,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def _garbage(floats: st.SearchStrategy) -> st.SearchStrategy:
    scalars = st.none() | st.booleans() | st.integers(-3, 10**6) | floats | st.text(max_size=8)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8) | st.sampled_from(
                            ["spec", "metadata", "name", "replicas", "template", "Launcher", "Worker",
                             "runPolicy", "containers", "status", "conditions"]), inner, max_size=5),
                        max_leaves=20)


garbage = _garbage(st.floats(allow_nan=True))
# What an API server can send: JSON has no NaN or infinity (a NaN in a status is unequal to itself,
# so "planning again writes nothing" could never hold for it).
json_garbage = _garbage(st.floats(allow_nan=False, allow_infinity=False))

PATHS = [
    "metadata", "metadata.name", "metadata.namespace", "metadata.uid", "metadata.ownerReferences", "spec",
    "spec.slotsPerWorker", "spec.runLauncherAsWorker", "spec.sshAuthMountPath", "spec.launcherCreationPolicy",
    "spec.mpiImplementation", "spec.mpiReplicaSpecs", "spec.mpiReplicaSpecs.Launcher",
    "spec.mpiReplicaSpecs.Launcher.replicas", "spec.mpiReplicaSpecs.Launcher.template",
    "spec.mpiReplicaSpecs.Launcher.template.spec", "spec.mpiReplicaSpecs.Launcher.template.metadata",
    "spec.mpiReplicaSpecs.Launcher.template.spec.containers", "spec.mpiReplicaSpecs.Worker",
    "spec.mpiReplicaSpecs.Worker.replicas", "spec.mpiReplicaSpecs.Worker.restartPolicy",
    "spec.mpiReplicaSpecs.Worker.template.spec.volumes", "spec.mpiReplicaSpecs.Worker.template.spec.dnsConfig",
    "spec.mpiReplicaSpecs.Worker.template.spec.containers", "spec.runPolicy", "spec.runPolicy.cleanPodPolicy",
    "spec.runPolicy.suspend", "spec.runPolicy.managedBy", "spec.runPolicy.activeDeadlineSeconds",
    "spec.runPolicy.ttlSecondsAfterFinished", "spec.runPolicy.backoffLimit", "status", "status.conditions",
    "status.startTime", "status.completionTime", "status.replicaStatuses",
]


def set_path(obj, path, value):
    keys = path.split(".")
    for k in keys[:-1]:
        if not isinstance(obj, dict):
            return
        obj = obj.setdefault(k, {})
    if isinstance(obj, dict):
        obj[keys[-1]] = value


@st.composite
def mutated(draw):
    job = mpijob(workers=draw(st.integers(0, 4)))
    for _ in range(draw(st.integers(1, 4))):
        set_path(job, draw(st.sampled_from(PATHS)), draw(json_garbage))
    return job


def plan_any(job, backend, observed=None):
    return plan(Inputs(job, observed or Observed(), Config(worker_backend=backend), NOW, KeyGen()))


@SETTINGS
@given(job=garbage, backend=st.sampled_from(BACKENDS))
def test_garbage_never_raises(job, backend):
    validate(job)
    plan_any(job, backend)


@SETTINGS
@given(job=mutated(), backend=st.sampled_from(BACKENDS))
def test_mutated_mpijobs_give_a_plan_or_validation_errors(job, backend):
    errors = validate(job)
    p = plan_any(job, backend)
    if errors and p.writes:
        assert not p.creates and not p.patches and not p.deletes
        assert rst.get_condition(p.status, "Failed")["reason"] == "InvalidSpec"
    # and planning again on the applied result is quiet
    if p.writes and not errors:
        job2, obs = apply_plan(job, Observed(), p)
        assert plan_any(job2, backend, obs).writes == 0


@st.composite
def scenario(draw):
    """A valid MPIJob with random options, converged, then a random turn of events in the cluster."""
    backend = draw(st.sampled_from(BACKENDS))
    workers = draw(st.integers(0, 4))
    run_policy = {"cleanPodPolicy": draw(st.sampled_from(["Running", "All", "None"])),
                  "suspend": draw(st.booleans())}
    if draw(st.booleans()):
        run_policy["activeDeadlineSeconds"] = draw(st.integers(1, 1000))
    if draw(st.booleans()):
        run_policy["ttlSecondsAfterFinished"] = draw(st.integers(0, 1000))
    spec = {"launcherCreationPolicy": draw(st.sampled_from(["AtStartup", "WaitForWorkersReady"])),
            "runLauncherAsWorker": draw(st.booleans()),
            "mpiImplementation": draw(st.sampled_from(["OpenMPI", "Intel", "MPICH"]))}
    job = mpijob(workers=workers, spec=spec, run_policy=run_policy)
    return backend, job, draw(st.lists(st.sampled_from(EVENTS), max_size=5)), draw(st.integers(0, 2000))


def ev_ready(job, obs, backend):
    return workers_ready(obs, len([1 for _ in range(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"])])) \
        if obs.workers else obs


def ev_launcher_runs(job, obs, backend):
    if obs.launcher is None or obs.launcher["spec"].get("suspend"):
        return obs  # a suspended Job runs no pod
    return replace(obs, launcher=with_status(obs.launcher, active=1, ready=1), pods=[*obs.pods, pod(job, "launcher")])


def ev_worker_pods(job, obs, backend):
    n = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    return replace(obs, pods=[*obs.pods, *[pod(job, "worker", i, backend=backend) for i in range(n)]])


def ev_launcher_completes(job, obs, backend):
    return replace(obs, launcher=job_finished(obs.launcher, "Complete")) if obs.launcher else obs


def ev_launcher_fails(job, obs, backend):
    return replace(obs, launcher=job_finished(obs.launcher, "Failed", "BackoffLimitExceeded", failed=3)) \
        if obs.launcher else obs


def ev_launcher_retries(job, obs, backend):
    return replace(obs, launcher=with_status(obs.launcher, failed=1, ready=0)) if obs.launcher else obs


def ev_toggle_suspend(job, obs, backend):
    job["spec"]["runPolicy"]["suspend"] = not job["spec"]["runPolicy"]["suspend"]
    if not job["spec"]["runPolicy"]["suspend"]:
        return obs
    # What the Job/StatefulSet controllers do once the operator has stopped the workers and the
    # launcher: no pod keeps running, so none shows Running again the instant the job resumes.
    launcher = with_status(obs.launcher, active=0, ready=0) if obs.launcher else None
    return replace(obs, launcher=launcher, pods=[])


def ev_lose_config_map(job, obs, backend):
    return replace(obs, config_map=None)


def ev_scale(job, obs, backend):
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] += 1
    return obs


def ev_kueue_injects(job, obs, backend):
    for rtype in ("Launcher", "Worker"):
        job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["nodeSelector"] = {"flavor": "x"}
    return obs


def ev_drift(job, obs, backend):
    if obs.workers is None:
        return obs
    w = copy.deepcopy(obs.workers)
    w["spec"]["replicas" if w["kind"] == "StatefulSet" else "parallelism"] = 9
    w["metadata"]["labels"] = {"x": "y"}
    return replace(obs, workers=w)


def ev_toggle_isolation(job, obs, backend):
    """The user turns the MPIJob's network isolation off, or on again (reconcilers/netpol.py)."""
    ann = job["metadata"].setdefault("annotations", {})
    ann[NETWORK_ISOLATION_ANNOTATION] = "true" if ann.get(NETWORK_ISOLATION_ANNOTATION) == "false" else "false"
    return obs


def ev_drift_network_policy(job, obs, backend):
    if obs.network_policy is None:
        return obs
    pol = copy.deepcopy(obs.network_policy)
    pol["spec"]["podSelector"] = {"matchLabels": {"x": "y"}}
    pol["spec"]["ingress"] = [{"from": [{"namespaceSelector": {}}]}]
    return replace(obs, network_policy=pol)


def ev_lose_network_policy(job, obs, backend):
    return replace(obs, network_policy=None)


EVENTS = [ev_ready, ev_launcher_runs, ev_worker_pods, ev_launcher_completes, ev_launcher_fails,
          ev_launcher_retries, ev_toggle_suspend, ev_lose_config_map, ev_scale, ev_kueue_injects, ev_drift,
          ev_toggle_isolation, ev_drift_network_policy, ev_lose_network_policy]


@SETTINGS
@given(case=scenario())
def test_apply_then_plan_again_writes_nothing(case):
    backend, job, events, dt = case
    now = NOW
    job, obs, _ = converge(job, backend=backend, now=now)
    for ev in events:
        now = now + timedelta(seconds=dt)
        obs = ev(job, obs, backend)
        p = run(job, obs, backend, now)
        job2, obs2 = apply_plan(job, obs, p)
        if p.delete_mpijob:
            return
        again = run(job2, obs2, backend, now)
        if not p.deletes:  # a delete (recreate a Job, replace a Secret) needs one more round
            assert again.writes == 0, (ev.__name__, p, again)
        assert not (set(e.reason for e in again.events) & {"MPIJobCreated", "MPIJobRunning", "MPIJobSucceeded",
                                                          "MPIJobSuspended", "MPIJobResumed"}), again.events
        job, obs, _ = converge(job2, obs2, backend, now)


@SETTINGS
@given(case=scenario())
def test_workload_gang_mode_apply_then_plan_again_writes_nothing(case):
    """The same turns of events with --gang-scheduling=workload: its Workload and PodGroup too are
    brought to what they should be in one round, and stay."""
    backend, job, events, dt = case
    now = NOW
    job, obs, _ = converge(job, backend=backend, now=now, gang_scheduler="workload")
    for ev in events:
        now = now + timedelta(seconds=dt)
        obs = ev(job, obs, backend)
        p = run(job, obs, backend, now, gang_scheduler="workload")
        job2, obs2 = apply_plan(job, obs, p)
        if p.delete_mpijob:
            return
        again = run(job2, obs2, backend, now, gang_scheduler="workload")
        if not p.deletes:
            assert again.writes == 0, (ev.__name__, p, again)
        job, obs, _ = converge(job2, obs2, backend, now, gang_scheduler="workload")


_selector = st.fixed_dictionaries({}, optional={
    "matchLabels": st.dictionaries(st.sampled_from(["a", "team", "app"]), st.sampled_from(["x", "y"]), max_size=2),
    "matchExpressions": st.lists(st.fixed_dictionaries(
        {"key": st.sampled_from(["a", "team"]), "operator": st.sampled_from(["In", "Exists"])},
        optional={"values": st.lists(st.sampled_from(["x", "y"]), max_size=2)}), max_size=2)})
_peer = (st.fixed_dictionaries({}, optional={"podSelector": _selector, "namespaceSelector": _selector}).filter(bool)
         | st.fixed_dictionaries({"ipBlock": st.fixed_dictionaries(
             {"cidr": st.just("10.9.0.0/16")}, optional={"except": st.lists(st.just("10.9.1.0/24"), max_size=1)})}))


@SETTINGS
@given(case=scenario(), flag=st.booleans(), peers=st.none() | st.lists(_peer, max_size=3),
       host_network=st.booleans())
def test_isolation_apply_then_plan_again_writes_nothing(case, flag, peers, host_network):
    """The same turns of events with --network-isolation on or off, an MPIJob that names extra sources
    (any peers, empty maps and lists included) or runs on the host's network: its NetworkPolicy is
    brought to what it should be in one round, and stays (reconcilers/netpol.py)."""
    backend, job, events, dt = case
    if peers is not None:
        job["metadata"]["annotations"] = {NETWORK_INGRESS_FROM_ANNOTATION: json.dumps(peers)}
    if host_network:
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    now = NOW
    job, obs, _ = converge(job, backend=backend, now=now, network_isolation=flag)
    assert (obs.network_policy is not None) == (flag and not host_network)
    for ev in events:
        now = now + timedelta(seconds=dt)
        obs = ev(job, obs, backend)
        p = run(job, obs, backend, now, network_isolation=flag)
        job2, obs2 = apply_plan(job, obs, p)
        if p.delete_mpijob:
            return
        again = run(job2, obs2, backend, now, network_isolation=flag)
        if not p.deletes:
            assert again.writes == 0, (ev.__name__, p, again)
        job, obs, _ = converge(job2, obs2, backend, now, network_isolation=flag)
