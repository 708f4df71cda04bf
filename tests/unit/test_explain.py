"""Issue 51: every MPIJob explains itself (reconcilers/explain/): why it is not running (the condition
Waiting), and what ended a pod of it (ends.end)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import status as st
from reconcilers.explain import ends, facts, pods, waiting
from tests.unit.sim import BACKENDS, NOW, apply_plan, at, converge, mpijob, pod, run, with_status

SCHED_MSG = ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes "
             "are available: 3 Preemption is not helpful for scheduling.")


def unschedulable(p: dict) -> dict:
    return with_status(p, phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SCHED_MSG}])


def on_node(p: dict, node: str = "n1", **container: dict) -> dict:
    p = dict(p, spec={**p["spec"], "nodeName": node,
                      "containers": [{"name": "worker", "resources": {"limits": {"memory": "512Mi"}}}]})
    return p


def waiting_c(p: dict, reason: str, message: str = "", image: str = "nope:1") -> dict:
    return with_status(on_node(p), phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"}],
        containerStatuses=[{"name": "worker", "image": image, "ready": False, "restartCount": 0,
                            "state": {"waiting": {"reason": reason, "message": message}}}])


def crash_looping(p: dict, code: int = 1, reason: str = "Error") -> dict:
    return with_status(on_node(p), phase="Running", containerStatuses=[
        {"name": "worker", "ready": False, "restartCount": 3,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
         "lastState": {"terminated": {"exitCode": code, "reason": reason}}}])


def terminated(p: dict, code: int, reason: str = "Error", **more) -> dict:
    return with_status(on_node(p), phase="Failed", containerStatuses=[
        {"name": "worker", "ready": False, "state": {"terminated": {"exitCode": code, "reason": reason, **more}}}])


JOB = mpijob()
W1 = pod(JOB, "worker", 1, phase="Pending", backend="statefulset")


# -- what holds a pod (table) -----------------------------------------------------------------------


@pytest.mark.parametrize("the_pod, reason, says", [
    (unschedulable(W1), "Unschedulable", ["worker pi-worker-1 (pod pi-worker-1) cannot be scheduled",
                                          "the scheduler: 0/3 nodes are available"]),
    (waiting_c(W1, "ErrImagePull", 'failed to pull image "nope:1": not found'), "ImagePullFailed",
     ["worker pi-worker-1 (pod pi-worker-1, node n1): container worker cannot pull image nope:1",
      'the kubelet: ErrImagePull: failed to pull image "nope:1": not found']),
    (waiting_c(W1, "ImagePullBackOff", 'Back-off pulling image "nope:1"'), "ImagePullFailed",
     ["cannot pull image nope:1", "ImagePullBackOff"]),
    (waiting_c(W1, "CreateContainerConfigError", 'secret "creds" not found'), "ContainerConfigError",
     ["container worker cannot be created", 'CreateContainerConfigError: secret "creds" not found']),
    (crash_looping(W1), "CrashLoopBackOff",
     ["container worker keeps failing: its last run ended with exit code 1 (container worker)"]),
    (crash_looping(W1, 137, "OOMKilled"), "CrashLoopBackOff", ["was OOMKilled (limit 512Mi"]),
])
def test_explain_pod_hold_quotes_the_component(the_pod, reason, says):
    h = pods.hold(the_pod)
    assert h is not None and h.reason == reason
    text = f"{h.subject}; {h.detail}"
    for s in says:
        assert s in text, text


@pytest.mark.parametrize("the_pod", [
    W1,  # pending, nobody said anything yet
    with_status(W1, conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),  # a gang's
    with_status(on_node(W1), phase="Running", conditions=[{"type": "Ready", "status": "True"}]),
    with_status(on_node(pod(JOB, "launcher")), phase="Running", containerStatuses=[  # a launcher's retry: not here
        {"name": "launcher", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1}}}]),
])
def test_explain_pod_hold_none_when_nothing_is_reported(the_pod):
    assert pods.hold(the_pod) is None


# -- what ended a pod (table) -----------------------------------------------------------------------


@pytest.mark.parametrize("the_pod, says", [
    (terminated(W1, 137, "OOMKilled"),
     "worker pi-worker-1 (pod pi-worker-1, node n1) was OOMKilled (limit 512Mi; container worker, exit code 137)"),
    (terminated(W1, 139), "ended with exit code 139 (signal 11, SIGSEGV; container worker)"),
    (terminated(W1, 1), "ended with exit code 1 (container worker)"),
    (terminated(W1, 128, "StartError", message="exec: \"sshd\": not found"),
     'could not start container worker (StartError: exec: "sshd": not found)'),
    (with_status(on_node(W1), phase="Failed", reason="Evicted",
                 message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 20Mi."),
     "was evicted by the kubelet: The node was low on resource: memory."),
    (with_status(on_node(W1), phase="Failed", reason="DeadlineExceeded"), "activeDeadlineSeconds (DeadlineExceeded)"),
    (with_status(on_node(W1), conditions=[{"type": "DisruptionTarget", "status": "True",
                                           "reason": "PreemptionByScheduler", "message": "Preempted by pod x"}]),
     "was preempted by the scheduler (PreemptionByScheduler: Preempted by pod x)"),
    (with_status(on_node(W1), conditions=[{"type": "DisruptionTarget", "status": "True",
                                           "reason": "DeletionByTaintManager", "message": "Taint manager: deleting"}]),
     "lost its node (deleted by the taint manager) (DeletionByTaintManager"),
    (with_status(on_node(W1), conditions=[{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]),
     "lost its node (NodeNotReady)"),
])
def test_explain_pod_end_names_pod_node_container_cause(the_pod, says):
    assert says in ends.ended_text(the_pod)


def deleting(p: dict) -> dict:
    return dict(p, metadata={**p["metadata"], "deletionTimestamp": "2025-01-01T12:00:00Z"})


@pytest.mark.parametrize("the_pod, says", [
    # `kubectl delete pod`: the kubelet's SIGTERM stops sshd, which exits 0 (or 143): the delete ended it
    (deleting(with_status(terminated(W1, 0, "Completed"), phase="Succeeded")),
     "worker pi-worker-1 (pod pi-worker-1, node n1) was lost (deleted)"),
    (deleting(terminated(W1, 143)), "worker pi-worker-1 (pod pi-worker-1, node n1) was lost (deleted)"),
    # what ended it before or beside the delete stays told
    (deleting(terminated(W1, 137, "OOMKilled")), "was OOMKilled (limit 512Mi; container worker, exit code 137)"),
    (deleting(terminated(W1, 1)), "ended with exit code 1 (container worker)"),
    (with_status(terminated(W1, 0, "Completed"), phase="Succeeded"), "ended with exit code 0 (container worker)"),
])
def test_explain_pod_end_a_delete_is_no_exit_of_its_own(the_pod, says):
    assert says in ends.ended_text(the_pod)


# -- the condition Waiting, through plan() ----------------------------------------------------------


def _started(backend: str, **spec):
    job = mpijob(spec=spec or None)
    job, obs, _ = converge(job, backend=backend)
    return job, obs


def _worker(job, i, backend, **status):
    return with_status(pod(job, "worker", i, backend=backend), **status)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_unschedulable_names_the_pods_once_and_keeps_the_state(backend):
    job, obs = _started(backend)
    stuck = [unschedulable(pod(job, "worker", i, phase="Pending", backend=backend)) for i in range(2)]
    obs = replace(obs, pods=stuck)
    p = run(job, obs, backend)
    c = st.get_condition(p.status, waiting.WAITING)
    assert c is not None and c["status"] == "True" and c["reason"] == "Unschedulable"
    names = sorted(x["metadata"]["name"] for x in stuck)
    assert f"pods {', '.join(names)} cannot be scheduled; the scheduler: {SCHED_MSG}" == c["message"]
    assert st.conditions_of(p.status)[-1]["type"] == waiting.WAITING  # the State column, Reason beside it
    assert [e.reason for e in p.events] == ["Unschedulable"]
    job, obs = apply_plan(job, obs, p)
    # steady state: the scheduler retries with other words, nothing is written
    reworded = [with_status(x, conditions=[{**x["status"]["conditions"][0], "message": "0/4 nodes are available"}])
                for x in stuck]
    again = run(job, replace(obs, pods=reworded), backend, now=at(30))
    assert again.writes == 0 and not again.events


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_image_pull_backoff_flip_writes_nothing(backend):
    job, obs = _started(backend)
    w0 = pod(job, "worker", 0, phase="Pending", backend=backend)
    pulled = [waiting_c(w0, "ErrImagePull", "rpc error: not found"), waiting_c(w0, "ImagePullBackOff", "Back-off")]
    p = run(job, replace(obs, pods=[pulled[0]]), backend)
    assert st.get_condition(p.status, waiting.WAITING)["reason"] == "ImagePullFailed"
    job, obs = apply_plan(job, obs, p)
    for i in range(4):
        assert run(job, replace(obs, pods=[pulled[i % 2]]), backend, now=at(10 * i)).writes == 0


def test_explain_backoff_first_then_the_kubelet_words_once():
    job, obs = _started("job")
    w0 = pod(job, "worker", 0, phase="Pending")
    p = run(job, replace(obs, pods=[waiting_c(w0, "ImagePullBackOff", "Back-off")]))
    job, obs = apply_plan(job, obs, p)
    p = run(job, replace(obs, pods=[waiting_c(w0, "ErrImagePull", "not found")]))
    assert "ErrImagePull: not found" in st.get_condition(p.status, waiting.WAITING)["message"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_clears_with_running_in_one_write(backend):
    job, obs = _started(backend)
    stuck = [unschedulable(pod(job, "worker", i, phase="Pending", backend=backend)) for i in range(2)]
    job, obs = apply_plan(job, obs, run(job, replace(obs, pods=stuck), backend))
    ready = [_worker(job, i, backend, phase="Running", conditions=[{"type": "Ready", "status": "True"}])
             for i in range(2)]
    launcher = with_status(pod(job, "launcher"), phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    obs = replace(obs, pods=[launcher, *ready], launcher=with_status(obs.launcher, active=1, ready=1))
    p = run(job, obs, backend)
    assert st.is_true(p.status, st.RUNNING) and st.get_condition(p.status, waiting.WAITING) is None
    assert not [e for e in p.events if e.type == "Warning"]  # (the same status write, no extra Event)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_normal_start_never_writes_waiting(backend):
    job, obs = _started(backend)
    # pods being created, scheduled and started: nothing reported, nothing slow yet
    pending = [_worker(job, i, backend, phase="Pending") for i in range(2)]
    p = run(job, replace(obs, pods=pending), backend, now=at(20))
    assert st.get_condition(p.status or job["status"], waiting.WAITING) is None and p.writes == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_worker_not_ready_only_after_it_lasted(backend):
    job, obs = _started(backend)
    since = "2025-01-01T12:00:00Z"
    not_ready = [on_node(_worker(job, i, backend, phase="Running", conditions=[
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False", "lastTransitionTime": since}])) for i in range(2)]
    obs = replace(obs, pods=not_ready)
    early = run(job, obs, backend, now=at(20))
    assert st.get_condition(early.status, waiting.WAITING) is None and not early.events  # (counts only)
    assert early.requeue_after == pytest.approx(waiting.SLOW_AFTER_S - 20)
    late = run(job, obs, backend, now=at(waiting.SLOW_AFTER_S + 1))
    c = st.get_condition(late.status, waiting.WAITING)
    assert c["reason"] == "WorkerNotReady" and f"runs but is not Ready since {since}" in c["message"]
    assert "worker pi-worker-0" in c["message"] and "node n1" in c["message"]


def test_explain_wait_for_workers_ready_names_the_workers():
    job = mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"})
    job, obs, _ = converge(job)
    assert obs.launcher is None
    ready = _worker(job, 0, "job", phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    pending = _worker(job, 1, "job", phase="Pending")
    obs = replace(obs, pods=[ready, pending])
    early = run(job, obs, now=NOW)
    assert st.get_condition(early.status, waiting.WAITING) is None and early.requeue_after == waiting.SLOW_AFTER_S
    p = run(job, obs, now=at(waiting.SLOW_AFTER_S + 5))
    c = st.get_condition(p.status, waiting.WAITING)
    assert c["reason"] == "WaitingForWorkers" and c["message"].endswith("not Ready: pi-worker-1")


def test_explain_suspended_or_finished_drops_waiting():
    job, obs = _started("job")
    stuck = [unschedulable(pod(job, "worker", 0, phase="Pending"))]
    job, obs = apply_plan(job, obs, run(job, replace(obs, pods=stuck)))
    assert st.get_condition(job["status"], waiting.WAITING) is not None
    job["spec"]["runPolicy"] = {**job["spec"].get("runPolicy", {}), "suspend": True}
    p = run(job, replace(obs, pods=stuck))
    assert st.get_condition(p.status, waiting.WAITING) is None


def test_explain_restarting_outranks_waiting_in_the_state_column():
    status = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Restarting", "status": "True"},
                             {"type": "Waiting", "status": "True"}]}
    st.before_the_true_ones(status, waiting.WAITING, waiting.STRONGER)
    assert [c["type"] for c in status["conditions"]] == ["Created", "Waiting", "Restarting"]


def test_explain_crd_columns_show_reason_and_wide_message():
    import yaml

    from testsupport.paths import ROOT
    crd = yaml.safe_load((ROOT / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml").read_text())
    cols = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert cols["Reason"]["jsonPath"] == ".status.conditions[-1:].reason" and "priority" not in cols["Reason"]
    assert cols["Message"]["jsonPath"] == ".status.conditions[-1:].message" and cols["Message"]["priority"] == 1
    policy = (ROOT / "manifests" / "admission" / "condition_order_policy.yaml").read_text()
    assert "'Created', 'Waiting', 'WaitingForGang'" in policy


# -- metrics ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("message, cause", [
    ("MPIJob ns/pi is restarting: worker pi-worker-1 (pod pi-worker-1, node n1) was OOMKilled (limit 512Mi; "
     "container worker, exit code 137); the launcher Job retries", "OOMKilled"),
    ("MPIJob ns/pi is restarting: launcher attempt 1 (pod p) failed: exit code 1 after worker pi-worker-0 (pod x) "
     "was evicted by the kubelet: The node was low on resource: memory.", "Evicted"),
    ("BackoffLimitExceeded: ... last: attempt 1 (pod p) exit code 139 (signal 11, SIGSEGV)", "Signal"),
    ("worker w (pod x, node n) lost its node (deleted by the taint manager) (DeletionByTaintManager: ...)", "NodeLost"),
    ("DeadlineExceeded: MPIJob ns/pi ran longer than runPolicy.activeDeadlineSeconds (60s)", "DeadlineExceeded"),
    ("PermanentExitCode3: MPIJob ns/pi has failed: the launcher exited with code 3", "ExitCode"),
    ("restarting: worker pi-worker-0 (pod p) was lost (deleted); the launcher Job retries", "WorkerLost"),
    ("ChildRefused: the API server refused ...", "Other"),
])
def test_explain_failure_cause_is_one_of_a_bounded_set(message, cause):
    from reconcilers.explain import causes
    assert causes.classify(message) == cause and cause in causes.REASONS


def test_explain_metrics_count_causes_and_time_to_running():
    from controller import explain_metrics, metrics
    from reconcilers.types import Event

    def value(metric, *labels):
        return metric.labels(*labels)._value.get()

    job = {"metadata": {"creationTimestamp": "2025-01-01T11:59:00Z"}, "status": {"conditions": [
        {"type": "Created", "status": "True"}]}}
    before = value(metrics.failures, "OOMKilled")
    explain_metrics.record(job, [Event("Warning", "MPIJobRestarting", "worker w (pod p) was OOMKilled (limit 1Gi)")],
                           NOW)
    assert value(metrics.failures, "OOMKilled") == before + 1
    waits_before = value(metrics.waits, "ImagePullFailed")
    explain_metrics.record(job, [Event("Warning", "ImagePullFailed", "...")], NOW)
    assert value(metrics.waits, "ImagePullFailed") == waits_before + 1
    first = metrics.creation_to_running._sum.get()
    explain_metrics.record(job, [Event("Normal", "MPIJobRunning", "running")], NOW)
    assert metrics.creation_to_running._sum.get() == first + 60
    restarted = {**job, "status": {"conditions": [
        {"type": "Restarting", "status": "True", "lastTransitionTime": "2025-01-01T11:59:30Z"}]}}
    again = metrics.restart_to_running._sum.get()
    explain_metrics.record(restarted, [Event("Normal", "MPIJobRunning", "running")], NOW)
    assert metrics.restart_to_running._sum.get() == again + 30 and metrics.creation_to_running._sum.get() == first + 60


# -- who failed, where, why: through plan() ---------------------------------------------------------


def _oom_restarted_worker(job, finished: str) -> dict:
    """Worker 1 (StatefulSet) whose container was OOMKilled and restarted in place: its pod never ended."""
    w = on_node(pod(job, "worker", 1, backend="statefulset"))
    return with_status(w, phase="Running", conditions=[{"type": "Ready", "status": "True"}], containerStatuses=[
        {"name": "worker", "ready": True, "restartCount": 1, "state": {"running": {}},
         "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": finished}}}])


@pytest.mark.parametrize("finished, named", [("2025-01-01T12:00:20Z", True), ("2025-01-01T11:59:00Z", False)])
def test_explain_launcher_failure_names_the_worker_oomkilled_in_place(finished, named):
    """Upstream's issue 90: a worker OOMKilled mid-run showed only as the launcher failing. Its
    container restarted in place after the launcher pod was created: the Restarting message names
    it; one that restarted before this attempt began is not this attempt's loss."""
    from tests.unit.sim import running_state
    job, obs = running_state(mpijob(run_policy={"backoffLimit": 3}), "statefulset")
    launcher = with_status(on_node(pod(job, "launcher")), phase="Failed", containerStatuses=[
        {"name": "launcher", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    launcher["metadata"]["creationTimestamp"] = "2025-01-01T12:00:00Z"
    worker0 = next(p for p in obs.pods if p["metadata"]["name"] == "pi-worker-0")
    obs = replace(obs, pods=[launcher, worker0, _oom_restarted_worker(job, finished)],
                  launcher=with_status(obs.launcher, active=0, ready=0, failed=1))
    p = run(job, obs, "statefulset", now=at(30))
    msg = st.get_condition(p.status, st.RESTARTING)["message"]
    assert "launcher attempt 1 (pod pi-launcher-abc0, node n1) failed: exit code 1" in msg, msg
    said = "after worker pi-worker-1 (pod pi-worker-1, node n1) was OOMKilled (limit 512Mi; container worker"
    assert (said in msg) is named, msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_explain_launcher_oomkilled_backoff_0_failed_names_pod_node_limit(backend):
    from tests.unit.sim import running_state
    job, obs = running_state(mpijob(run_policy={"backoffLimit": 0}), backend)
    launcher = with_status(pod(job, "launcher"), phase="Failed", containerStatuses=[
        {"name": "launcher", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}])
    launcher["spec"].update(nodeName="n2", containers=[{"name": "launcher",
                                                        "resources": {"limits": {"memory": "64Mi"}}}])
    workers_now = [p for p in obs.pods if "worker" in p["metadata"]["name"]]
    obs = replace(obs, pods=[launcher, *workers_now], launcher=with_status(obs.launcher, active=0, ready=0, failed=1))
    p = run(job, obs, backend, now=at(30))
    failed = st.get_condition(p.status, st.FAILED)
    assert failed["reason"] == "BackoffLimitExceeded", p.status
    assert ("last: attempt 1 (pod pi-launcher-abc0, node n2) exit code 137 (OOMKilled: limit 64Mi, container "
            "launcher)") in failed["message"], failed
    assert any("OOMKilled: limit 64Mi" in e.message for e in p.events if e.reason == "MPIJobFailed")


def test_explain_cached_pod_takes_image_limit_and_volumes_from_the_template():
    """The pod cache keeps no containers or volumes (informers/transforms.py slim_pod): the image, the
    memory limit and the volumes named come from the MPIJob's template."""
    from informers.transforms import slim_pod
    job = mpijob()
    tmpl = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    tmpl["containers"][0]["resources"] = {"limits": {"memory": "96Mi"}}
    tmpl["volumes"] = [{"name": "v", "secret": {"secretName": "creds"}}]
    image = tmpl["containers"][0]["image"]
    w = slim_pod(dict(pod(job, "worker", 1, backend="statefulset"), spec={"nodeName": "n1", **tmpl}))
    assert "containers" not in w["spec"]
    pulled = facts.with_template(with_status(w, phase="Pending", containerStatuses=[
        {"name": "worker", "image": "", "state": {"waiting": {"reason": "ErrImagePull", "message": "x"}}}]), job)
    assert f"cannot pull image {image}" in pods.hold(pulled).subject
    w["status"] = {"phase": "Failed", "containerStatuses": [
        {"name": "worker", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
    assert "was OOMKilled (limit 96Mi" in ends.ended_text(facts.with_template(w, job))
    w["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True",
                                                       "lastTransitionTime": "2025-01-01T12:00:00Z"}]}
    assert "it mounts secret creds" in pods.slow(facts.with_template(w, job)).detail


def test_explain_an_init_container_that_runs_is_no_slow_start():
    w = with_status(on_node(W1), phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"}])
    assert pods.slow(w).reason == "ContainersNotStarted"
    w["status"]["initContainerStatuses"] = [{"name": "wait", "state": {"running": {}}}]
    assert pods.slow(w) is None


def test_explain_wait_for_workers_ready_uses_the_launchers_own_gate():
    """The worker Job counts its workers Ready before the pod cache shows them: the launcher is created
    in this very plan, so nothing waits (found by test_properties: Waiting set, then dropped)."""
    from tests.unit.sim import workers_ready
    job = mpijob(spec={"launcherCreationPolicy": "WaitForWorkersReady"})
    job, obs, _ = converge(job)
    p = run(job, workers_ready(obs, 2), now=at(waiting.SLOW_AFTER_S + 1))
    assert any(c.obj["kind"] == "Job" and c.obj["metadata"]["name"] == "pi-launcher" for c in p.creates)
    assert st.get_condition(p.status, waiting.WAITING) is None
