"""discover_hosts.sh reaching an elastic launcher (reconcilers/elastic.py, docs/architecture.md 9.2):
its ConfigMap is never held, and each running launcher pod gets the cached hosts' digest once per
change; a launcher that does not run the discovery script gets neither."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import discovery, elastic, names
from reconcilers.plan import plan as make_plan
from reconcilers.types import Config, Inputs, Observed
from tests.unit.sim import BACKENDS, KeyGen, apply_plan, at, mpijob, pod, run, running_state, workers_ready

ELASTIC_ARGS = ["-np", "2", "--min-np", "1", "--host-discovery-script", "/etc/mpi/discover_hosts.sh", "python", "t.py"]


def job_with(args: list[str]) -> dict:
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"] = args
    return job


def pod_patches(p) -> list[tuple[str, dict]]:
    return [(x.ref.name, x.patch) for x in p.patches if x.ref.kind == "Pod"]


@pytest.mark.parametrize("args,want", [
    (ELASTIC_ARGS, True),
    (["sh", "-c", "horovodrun --host-discovery-script /etc/mpi/discover_hosts.sh python t.py"], True),
    (["-n", "2", "/opt/pi"], False),
    ([], False),
])
def test_is_elastic(args, want):
    assert discovery.is_elastic(job_with(args)) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_elastic_a_new_worker_reaches_the_launcher_in_two_writes_never_held(backend):
    """Worker replicas 2 -> 3 while Running, the third worker Ready: the ConfigMap is written at once
    although the pods still move (settle_s > 0), then, once the cache shows it, the launcher pod gets
    the new digest; planned again, nothing."""
    job, obs = running_state(job_with(ELASTIC_ARGS), backend)
    launcher = pod(job, "launcher")
    obs = replace(obs, pods=[launcher, *obs.pods[1:]])
    first = run(job, obs, backend, now=at(30))
    job, obs = apply_plan(job, obs, first)
    # the running launcher pod already carries the digest of the hosts it started with
    digest = elastic.hosts_digest(obs.config_map)
    assert pod_patches(first) in ([], [(launcher["metadata"]["name"],
                                        {"metadata": {"annotations": {elastic.REFRESH_ANNOTATION: digest}}})])
    launcher["metadata"]["annotations"] = {elastic.REFRESH_ANNOTATION: digest}
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    obs = workers_ready(replace(obs, pods=[launcher, *obs.pods[1:], pod(job, "worker", 2, backend=backend)]), 3)
    p = make_plan(Inputs(job, obs, Config(worker_backend=backend), at(40), KeyGen(), settle_s=1.5))
    cm = [x for x in p.patches if x.ref.kind == "ConfigMap"]
    assert not p.held and cm and "pi-worker-2" in cm[0].patch["data"]["discover_hosts.sh"], p
    assert pod_patches(p) == []  # the cache does not show the new hosts yet: a pass soon will stamp them
    assert p.requeue_after is not None and p.requeue_after <= elastic.STAMP_AFTER_S
    job, obs = apply_plan(job, obs, p)
    new = elastic.hosts_digest(obs.config_map)
    assert new != digest
    p = run(job, obs, backend, now=at(41))
    assert pod_patches(p) == [(launcher["metadata"]["name"], {"metadata": {"annotations": {
        elastic.REFRESH_ANNOTATION: new}}})]
    stamped = [{**x, "metadata": {**x["metadata"], "annotations": {elastic.REFRESH_ANNOTATION: new}}}
               if x["metadata"]["name"] == launcher["metadata"]["name"] else x for x in obs.pods]
    assert pod_patches(run(job, replace(obs, pods=stamped), backend, now=at(42))) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_launcher_without_the_discovery_script_is_never_patched(backend):
    job, obs = running_state(mpijob(), backend)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    obs = workers_ready(replace(obs, pods=[*obs.pods, pod(job, "worker", 2, backend=backend)]), 3)
    job, obs = apply_plan(job, obs, run(job, obs, backend, now=at(40)))
    assert pod_patches(run(job, obs, backend, now=at(41))) == []


def test_only_running_launcher_pods_are_patched():
    job, obs = running_state(job_with(ELASTIC_ARGS), "statefulset")
    pods = [pod(job, "launcher", 0, phase="Failed"), pod(job, "launcher", 1, phase="Pending"),
            pod(job, "launcher", 2)]
    pods[2]["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    p = run(job, replace(obs, pods=[*pods, *obs.pods[1:]]), "statefulset", now=at(30))
    assert pod_patches(p) == []


def pinned(job: dict, backend: str) -> dict:
    job["metadata"].setdefault("annotations", {})[names.BACKEND_ANNOTATION] = backend
    return job


def test_elastic_job_backend_an_elastic_mpijob_gets_the_statefulset_whatever_the_flag():
    """Issue 42 item 5: on the Job backend one lost worker recreates the whole worker Job, so an
    elastic launcher loses every host at once. An elastic MPIJob's workers are a StatefulSet, which
    replaces the lost worker alone (its other workers' pods untouched), under --worker-backend=job too;
    a launcher that is not elastic keeps the flag's backend; nothing is said."""
    p = run(job_with(ELASTIC_ARGS), backend="job")
    assert [c.obj["kind"] for c in p.creates if c.obj["metadata"]["name"] == "pi-worker"] == ["StatefulSet"]
    assert not [e for e in p.events if e.type == "Warning"]
    plain = run(job_with(["-n", "2", "/opt/pi"]), backend="job")
    assert [c.obj["kind"] for c in plain.creates if c.obj["metadata"]["name"] == "pi-worker"] == ["Job"]
    # a worker lost: the StatefulSet's pod comes back alone (no recreate of the worker object)
    job, obs = running_state(job_with(ELASTIC_ARGS), "job")
    assert obs.workers["kind"] == "StatefulSet"
    lost = replace(obs, pods=[p for p in obs.pods if p["metadata"]["name"] != "pi-worker-1"])
    assert not [d for d in run(job, lost, "job").deletes if d.ref.name == "pi-worker"]


def test_elastic_job_backend_pinned_by_annotation_is_kept_with_a_warning_once():
    """The annotation's choice stands (the user asked for it), with one Warning Event at creation
    that names the annotation, the StatefulSet backend and Horovod's --blacklist-cooldown-range."""
    job = pinned(job_with(ELASTIC_ARGS), "job")
    p = run(job, backend="statefulset")
    assert [c.obj["kind"] for c in p.creates if c.obj["metadata"]["name"] == "pi-worker"] == ["Job"]
    (warning,) = [e for e in p.events if e.type == "Warning"]
    assert warning.reason == elastic.R_JOB_BACKEND and names.BACKEND_ANNOTATION in warning.message
    assert "statefulset" in warning.message and "--blacklist-cooldown-range" in warning.message
    job, obs = apply_plan(job, Observed(), p)
    assert not [e for e in run(job, obs, "statefulset").events if e.type == "Warning"], "said once"
    assert not [e for e in run(pinned(job_with(ELASTIC_ARGS), "statefulset")).events if e.type == "Warning"]
