"""Issue 50 item 7, `in_place_waits`: under `launcherCreationPolicy: WaitForWorkersReady` a retry of
the launcher waits for every worker Ready, as its first start does (reconcilers/failure/restartpolicy.py
`launcher_pod`, reconcilers/children.py `launcher_waits`, docs/architecture.md section 11). No
restart in place (the kubelet restarts at once and nothing can hold it): the launcher pod ends, and
while a worker is not Ready (or on its way out) its Job is made afresh and created only once every
worker is Ready, so no attempt runs without its workers and none fails (counted) for want of one."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from reconcilers.failure import restartpolicy
from reconcilers.types import Config
from tests.unit.sim import BACKENDS, apply_plan, converge, mpijob, pod, run, with_status, workers_ready
from tests.unit.test_retries import failed_launcher

RULES = Config(container_restart_rules=True)


def job_of(policy: str | None, creation: str, backoff: int = 3) -> dict:
    job = mpijob(run_policy={"backoffLimit": backoff}, spec={"launcherCreationPolicy": creation})
    if policy:
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = policy
    return job


@pytest.mark.parametrize(("policy", "creation", "want_pod", "want_container"), [
    (None, "AtStartup", "Never", {"restartPolicy": "OnFailure"}),
    ("OnFailure", "AtStartup", "Never", {"restartPolicy": "OnFailure"}),
    ("ExitCode", "AtStartup", "Never", {"restartPolicy": "Never", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": restartpolicy.RETRIED_EXIT_CODES}}]}),
    # WaitForWorkersReady: never in place, a new pod (made afresh and held by the operator) per retry
    (None, "WaitForWorkersReady", "Never", {}),
    ("OnFailure", "WaitForWorkersReady", "Never", {}),
    ("ExitCode", "WaitForWorkersReady", "Never", {}),
])
def test_in_place_waits_no_restart_in_place_under_wait_for_workers_ready(policy, creation, want_pod, want_container):
    pod_policy, container, failure_policy = restartpolicy.launcher_pod(job_of(policy, creation), RULES)
    assert (pod_policy, container) == (want_pod, want_container)
    assert failure_policy is not None  # the Job's podFailurePolicy: a disruption is ignored
    assert failure_policy["rules"][0]["action"] == "Ignore"


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_waits_the_launcher_job_under_wait_for_workers_ready_has_no_in_place_restart(backend):
    job = job_of(None, "WaitForWorkersReady")
    job, obs, _ = converge(job, backend=backend, container_restart_rules=True)
    assert obs.launcher is None  # held until every worker is Ready
    job, obs, _ = converge(job, workers_ready(obs, 2), backend, container_restart_rules=True)
    spec = obs.launcher["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"
    assert "restartPolicy" not in spec["containers"][0] and "restartPolicyRules" not in spec["containers"][0]


def running(job: dict, backend: str):
    """Running under WaitForWorkersReady: the workers made and Ready first, then the launcher."""
    job, obs, _ = converge(job, backend=backend)
    job, obs, _ = converge(job, workers_ready(obs, 2), backend)
    obs = replace(obs, launcher=with_status(obs.launcher, active=1, ready=1),
                  pods=[pod(job, "launcher")] + [pod(job, "worker", i, backend=backend) for i in range(2)])
    job, obs, _ = converge(job, obs, backend)
    return job, obs


def _lost_and_failed(job: dict, obs, backend: str, replacement_ready: bool):
    """Worker 0 lost: its replacement Pending (not Ready) or Ready; the launcher pod failed on the loss."""
    new0 = pod(job, "worker", 0, backend=backend, phase="Pending" if not replacement_ready else "Running",
               conditions=[{"type": "Ready", "status": "True" if replacement_ready else "False"}])
    if backend == "job":
        new0["metadata"].update(name="pi-worker-0-new", uid="pod-pi-worker-0-new")
    pods = [failed_launcher(job, code=1), new0, pod(job, "worker", 1, backend=backend)]
    obs = replace(obs, pods=pods, launcher=with_status(obs.launcher, active=0, ready=0, failed=1))
    return workers_ready(obs, 2 if replacement_ready else 1)


def test_in_place_waits_a_retry_waits_for_every_worker_ready_statefulset():
    """The StatefulSet backend (the Job backend makes its launcher afresh after a loss anyway): the
    launcher pod failed while worker 0's replacement is not Ready. The launcher Job is made afresh
    (not left to its own retry, which would run without worker 0), and created again only once worker
    0 is Ready; the failure is counted once."""
    backend = "statefulset"
    job, obs = running(job_of(None, "WaitForWorkersReady"), backend)
    obs = _lost_and_failed(job, obs, backend, replacement_ready=False)
    p = run(job, obs, backend)
    assert [d.ref.name for d in p.deletes] == ["pi-launcher"], p
    assert any("the launcher Job is made afresh" in e.message for e in p.events), p.events
    job, obs = apply_plan(job, obs, p)
    obs = replace(obs, pods=[q for q in obs.pods if q["metadata"]["labels"].get("training.kubeflow.org/job-role")
                             != "launcher"])
    for _ in range(3):  # however often it looks, no launcher while worker 0 is not Ready
        p = run(job, obs, backend)
        assert not [c for c in p.creates if c.obj["kind"] == "Job"], p.creates
        job, obs = apply_plan(job, obs, p)
    assert obs.launcher is None
    obs = workers_ready(replace(obs, pods=[pod(job, "worker", i, backend=backend) for i in range(2)]), 2)
    p = run(job, obs, backend)
    made = [c.obj for c in p.creates if c.obj["kind"] == "Job"]
    assert [m["metadata"]["name"] for m in made] == ["pi-launcher"], p.creates
    book = json.loads(made[0]["metadata"]["annotations"]["mpijob-operator.dev/launcher-retries"])
    assert (book["failed"], book["counted"]) == (1, 1), book
