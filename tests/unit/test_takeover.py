"""Issue 42 item 6: MPIJobs the upstream operator started, taken over whole (reconcilers/takeover.py,
docs/architecture.md section 6.3). A bare worker lost mid-run comes back as upstream makes it; a
suspended taken-over job resumes, in this operator's own shape. The real upgrade (the Go operator
v0.8.2 stopped mid-run) is e2e/test_takeover.py."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from reconcilers import desired, names
from reconcilers.types import Observed
from tests.unit import sim

READY = {"conditions": [{"type": "Ready", "status": "True"}]}


def _bare(job: dict, i: int, phase: str = "Running", **meta) -> dict:
    """A worker pod as the upstream operator made it: controlled by the MPIJob itself."""
    name = f"{names.worker_name(job)}-{i}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {**names.job_labels(job, names.ROLE_WORKER), names.REPLICA_INDEX_LABEL: str(i)},
                         "ownerReferences": [desired.owner_reference(job)], **meta},
            "spec": {"hostname": name, "subdomain": names.service_name(job)},
            "status": {"phase": phase, **(READY if phase == "Running" else {})}}


def _taken_over(job: dict, workers: list[dict]) -> tuple[dict, Observed]:
    """The MPIJob running on upstream's shape: its launcher Job without our template hash (upstream's),
    its workers bare pods, the Service, ConfigMap and Secret adopted."""
    job, obs = sim.running_state(job, "job")
    launcher = copy.deepcopy(obs.launcher)
    launcher["metadata"]["annotations"].pop(names.TEMPLATE_HASH_ANNOTATION)
    launcher_pod = sim.pod(job, "launcher")
    return job, replace(obs, workers=None, launcher=launcher, pods=[launcher_pod, *workers])


def _pod_creates(plan) -> list[dict]:
    return [c.obj for c in plan.creates if c.obj["kind"] == "Pod"]


def test_takeover_a_lost_bare_worker_comes_back_as_upstream_makes_it():
    job = sim.mpijob()
    job, obs = _taken_over(job, [_bare(job, 0)])
    p = sim.run(job, obs)
    (pod,) = _pod_creates(p)
    assert not [c for c in p.creates if c.obj["kind"] != "Pod"], "no worker Job nor StatefulSet beside bare pods"
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "pi-worker-1" and meta["namespace"] == "ns"
    assert meta["labels"] == {names.OPERATOR_NAME_LABEL: names.OPERATOR_NAME, names.JOB_NAME_LABEL: "pi",
                              names.JOB_ROLE_LABEL: "worker", names.REPLICA_INDEX_LABEL: "1"}
    assert meta["ownerReferences"] == [desired.owner_reference(job)]
    assert (spec["hostname"], spec["subdomain"], spec["restartPolicy"]) == ("pi-worker-1", "pi", "Never")
    assert "pi.ns.svc.cluster.local" in spec["dnsConfig"]["searches"]
    (c,) = spec["containers"]
    assert c["command"] == ["/usr/sbin/sshd"] and {"name": "K_MPI_JOB_ROLE", "value": "worker"} in c["env"]
    assert {"name": "ssh-auth", "mountPath": "/root/.ssh"} in c["volumeMounts"]
    (vol,) = [v for v in spec["volumes"] if v["name"] == "ssh-auth"]
    assert vol["secret"]["secretName"] == "pi-ssh" and vol["secret"]["defaultMode"] == 0o600
    # once the pod is back, nothing more
    job2 = copy.deepcopy(job)
    again = sim.run(job2, replace(obs, pods=[*obs.pods, _bare(job, 1)]))
    assert not _pod_creates(again)


@pytest.mark.parametrize("why", ["Failed", "deleting"])
def test_takeover_a_bare_worker_that_still_exists_is_left_as_upstream_leaves_it(why):
    job = sim.mpijob()
    gone = _bare(job, 1, phase="Failed") if why == "Failed" else _bare(job, 1, deletionTimestamp="2025-01-01T12:00:00Z")
    job, obs = _taken_over(job, [_bare(job, 0), gone])
    assert not _pod_creates(sim.run(job, obs))


def test_takeover_runlauncherasworker_numbers_the_workers_from_one():
    job = sim.mpijob(spec={"runLauncherAsWorker": True})
    job, obs = _taken_over(job, [_bare(job, 0)])
    (pod,) = _pod_creates(sim.run(job, obs))
    assert pod["metadata"]["labels"][names.REPLICA_INDEX_LABEL] == "2"
    assert names.REPLICA_INDEX_OFFSET_ANNOTATION not in (pod["metadata"].get("annotations") or {})


def test_takeover_a_suspended_taken_over_job_resumes_in_our_shape():
    job = sim.mpijob()
    job, obs = _taken_over(job, [_bare(job, 0), _bare(job, 1)])
    job["spec"]["runPolicy"]["suspend"] = True
    p = sim.run(job, obs, now=sim.at(10))
    deleted = {(d.ref.kind, d.ref.name, d.propagation) for d in p.deletes}
    assert ("Job", "pi-launcher", "Foreground") in deleted, "upstream's launcher Job gives way"
    assert {("Pod", "pi-worker-0"), ("Pod", "pi-worker-1")} <= {(k, n) for k, n, _ in deleted}
    assert not p.creates
    # everything of upstream's gone: suspended, nothing is made
    job["status"] = p.status
    empty = replace(obs, launcher=None, pods=[])
    assert not sim.run(job, empty, now=sim.at(12)).creates
    # resumed: this operator's own shape, afresh
    job["spec"]["runPolicy"]["suspend"] = False
    job, obs2, plans = sim.converge(job, empty, "job", now=sim.at(20))
    kinds = {(c.obj["kind"], c.obj["metadata"]["name"]) for pl in plans for c in pl.creates}
    assert {("Job", "pi-worker"), ("Job", "pi-launcher")} <= kinds and not [k for k in kinds if k[0] == "Pod"]
    assert names.TEMPLATE_HASH_ANNOTATION in obs2.launcher["metadata"]["annotations"]


def test_takeover_suspended_before_upstreams_launcher_was_seen_adopts_it_to_delete_it():
    """Upstream's launcher Job has only `app: <name>`: the cache shows it once a create met it and the
    executor adopted it. A suspend that finds only the bare workers plans that create (suspended)."""
    job = sim.mpijob()
    job, obs = _taken_over(job, [_bare(job, 0), _bare(job, 1)])
    job["spec"]["runPolicy"]["suspend"] = True
    p = sim.run(job, replace(obs, launcher=None), now=sim.at(10))
    (create,) = [c.obj for c in p.creates]
    assert (create["kind"], create["metadata"]["name"], create["spec"]["suspend"]) == ("Job", "pi-launcher", True)
    assert {d.ref.name for d in p.deletes} == {"pi-worker-0", "pi-worker-1"}
    assert all("suspended" in d.reason for d in p.deletes)


def test_takeover_no_bare_worker_is_made_while_upstreams_launcher_is_being_deleted():
    """A resume while upstream's launcher Job still stops (Foreground): wait for it, make no bare pod."""
    job = sim.mpijob()
    job, obs = _taken_over(job, [])
    obs.launcher["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    p = sim.run(job, obs)
    assert not _pod_creates(p) and not [c for c in p.creates if c.obj["kind"] == "Job"]


def test_takeover_a_failed_attempt_of_upstreams_launcher_is_announced_once():
    """Upstream's launcher Job keeps its backoffLimit, but the ledger of announced attempts is kept on
    it, so a failed attempt gives one Restarting Event, not one per pass."""
    job = sim.mpijob()
    job, obs = _taken_over(job, [_bare(job, 0), _bare(job, 1)])
    failed = sim.pod(job, "launcher", index=1, phase="Failed", containerStatuses=[
        {"name": "launcher", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    obs = replace(obs, launcher=sim.with_status(obs.launcher, failed=1, active=1),
                  pods=[*obs.pods, failed])
    p = sim.run(job, obs)
    assert [e.reason for e in p.events].count("MPIJobRestarting") == 1, p.events
    (ledger,) = [x for x in p.patches if x.ref.kind == "Job"]
    assert "spec" not in ledger.patch, "upstream's backoffLimit stays"
    job, obs = sim.apply_plan(job, obs, p)
    again = sim.run(job, obs)
    assert "MPIJobRestarting" not in [e.reason for e in again.events], again.events
