"""The launcher's retries told apart by cause (reconcilers/failure/retries.py, reconcilers/failure/restartpolicy.py,
docs/architecture.md section 11): disruptions use no retry (`disruption`), restartPolicy ExitCode
(`exit_code`), restarts in place counted by the operator (`in_place`), and what the status says."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from reconcilers import desired as dz
from reconcilers import status as st
from reconcilers.defaults import with_defaults
from reconcilers.failure import ledger, messages, retries
from reconcilers.failure import restartpolicy as rp
from reconcilers.types import Config, Observed
from tests.unit.sim import BACKENDS, apply_plan, job_finished, mpijob, pod, run, running_state, with_status

DT = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
      "message": "Eviction API: evicting", "lastTransitionTime": "2025-01-01T12:00:10Z"}
READY = {"type": "Ready", "status": "True"}


def job_with(policy: str | None = None, backoff: int = 3) -> dict:
    spec: dict = {"mpiReplicaSpecs": {"Launcher": {}}}
    job = mpijob(run_policy={"backoffLimit": backoff})
    if policy:
        job["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = policy
    del spec
    return job


def cond(st_or_job: dict, ctype: str) -> dict | None:
    return st.get_condition(st_or_job.get("status", st_or_job), ctype)


def events(p) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in p.events]


def failed_launcher(job: dict, index: int = 0, code: int = 1, disrupted: bool = False, restarts: int = 0) -> dict:
    conditions = [DT] if disrupted else []
    return pod(job, "launcher", index, phase="Failed", conditions=conditions, containerStatuses=[{
        "name": "launcher", "restartCount": restarts,
        "state": {"terminated": {"exitCode": code, "reason": "Error"}}}])


def running_launcher(job: dict, index: int = 0, restarts: int = 0, last_code: int | None = None) -> dict:
    cs: dict = {"name": "launcher", "restartCount": restarts, "state": {"running": {}}}
    if last_code is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_code, "reason": "Error"}}
    return pod(job, "launcher", index, containerStatuses=[cs], conditions=[READY])


def workers(job: dict, backend: str, disrupted: int | None = None, ready: bool = True) -> list[dict]:
    out = []
    for i in range(2):
        conditions = [READY] if ready else []
        if i == disrupted:
            conditions = [DT]
        p = pod(job, "worker", i, backend=backend, conditions=conditions)
        if i == disrupted:
            p["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:40Z"
        out.append(p)
    return out


def with_pods(obs: Observed, pods: list[dict], **launcher_status) -> Observed:
    return replace(obs, pods=pods, launcher=with_status(obs.launcher, **launcher_status) if launcher_status
                   else obs.launcher)


def not_counted(patch: dict) -> dict:
    return json.loads(patch["metadata"]["annotations"][ledger.LEDGER])["notCounted"]


def handed_over(p) -> ledger.Ledger:
    """The ledger a plan hands to the launcher Job made afresh (on the ConfigMap: ledger.hand_over)."""
    patch = next(x.patch for x in p.patches if x.ref.kind == "ConfigMap")
    return ledger.parse(patch["metadata"]["annotations"][ledger.LEDGER])


def launcher_patch(p) -> dict | None:
    return next((x.patch for x in p.patches if x.ref.kind == "Job" and x.ref.name == "pi-launcher"), None)


# -- the launcher pod: how it runs again -----------------------------------------------------------------------

NEVER_RULES = {"restartPolicy": "OnFailure"}
EXIT_RULES = {"restartPolicy": "Never", "restartPolicyRules": [
    {"action": "Restart", "exitCodes": {"operator": "In", "values": list(range(128, 256))}}]}
IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
FAIL_1_127 = {"action": "FailJob", "onExitCodes": {"containerName": "launcher", "operator": "In",
                                                   "values": list(range(1, 128))}}


STS, JOB = {"worker_backend": "statefulset"}, {"worker_backend": "job"}


@pytest.mark.parametrize(("policy", "config", "backoff", "pod_policy", "container", "failure_rules"), [
    # in place (auto, both backends): the container restarts itself, the pod stays Never so that the
    # Job may ignore disruptions
    ("Never", STS, 3, "Never", NEVER_RULES, [IGNORE]),
    ("OnFailure", STS, 3, "Never", NEVER_RULES, [IGNORE]),
    ("ExitCode", STS, 3, "Never", EXIT_RULES, [IGNORE, FAIL_1_127]),
    ("Never", JOB, 3, "Never", NEVER_RULES, [IGNORE]),
    ("OnFailure", JOB, 3, "Never", NEVER_RULES, [IGNORE]),
    ("ExitCode", JOB, 3, "Never", EXIT_RULES, [IGNORE, FAIL_1_127]),
    # --launcher-restart=in-place: both backends; new-pod: neither
    ("Never", {**JOB, "launcher_restart": "in-place"}, 3, "Never", NEVER_RULES, [IGNORE]),
    ("Never", {**STS, "launcher_restart": "new-pod"}, 3, "Never", {}, [IGNORE]),
    ("Never", {**JOB, "launcher_restart": "new-pod"}, 3, "Never", {}, [IGNORE]),
    ("ExitCode", {**JOB, "launcher_restart": "new-pod"}, 3, "Never", {}, [IGNORE, FAIL_1_127]),
    # no retry allowed: nothing restarts in place
    ("Never", STS, 0, "Never", {}, [IGNORE]),
    ("OnFailure", STS, 0, "Never", {}, [IGNORE]),
    ("ExitCode", STS, 0, "Never", {}, [IGNORE, FAIL_1_127]),
    # a cluster without container restart rules: a new pod per retry
    ("Never", {**STS, "container_restart_rules": False}, 3, "Never", {}, [IGNORE]),
    ("ExitCode", {**STS, "container_restart_rules": False}, 3, "Never", {}, [IGNORE, FAIL_1_127]),
    # the kubelet restarts an OnFailure pod itself; the Job API allows no podFailurePolicy then
    ("OnFailure", {**STS, "container_restart_rules": False}, 3, "OnFailure", {}, None),
    ("OnFailure", {**JOB, "container_restart_rules": False}, 3, "OnFailure", {}, None),
    ("OnFailure", {**JOB, "launcher_restart": "new-pod"}, 3, "OnFailure", {}, None),
])
def test_in_place_disruption_exit_code_launcher_job(policy, config, backoff, pod_policy, container, failure_rules):
    """The launcher Job for each restartPolicy, backend, --launcher-restart, with and without container
    restart rules."""
    job = with_defaults(job_with(policy, backoff))
    lau = dz.launcher(job, Config(**{"container_restart_rules": True, **config}))
    spec = lau["spec"]
    pod_spec = spec["template"]["spec"]
    c = pod_spec["containers"][0]
    assert pod_spec["restartPolicy"] == pod_policy
    assert {k: c[k] for k in ("restartPolicy", "restartPolicyRules") if k in c} == container
    assert (spec.get("podFailurePolicy") or {}).get("rules") == failure_rules
    # the net under the operator's count: the Job controller fails OnFailure pods one restart sooner
    assert spec["backoffLimit"] == backoff + (rp.NET_ON_FAILURE if pod_policy == "OnFailure" else rp.NET)
    assert spec["podReplacementPolicy"] == "Failed"  # what a podFailurePolicy requires


def test_in_place_keeps_the_users_own_restart_fields():
    job = job_with("Never")
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["restartPolicy"] = "Never"
    config = Config(container_restart_rules=True, worker_backend="statefulset")
    c = dz.launcher(with_defaults(job), config)["spec"]["template"]["spec"]["containers"][0]
    assert c["restartPolicy"] == "Never" and "restartPolicyRules" not in c


def test_exit_code_is_a_launcher_restart_policy_only():
    from reconcilers.validation import validate

    assert validate(job_with("ExitCode")) == []
    bad = job_with()
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    assert [e.path for e in validate(bad)] == ["spec.mpiReplicaSpecs.Worker.restartPolicy"]


# -- disruptions ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_disruption_of_the_launcher_uses_no_retry(backend):
    """backoffLimit 0: the evicted launcher pod (its DisruptionTarget) is not counted; the MPIJob says
    why it restarts, in Restarting and a Warning Event, and keeps running."""
    job, obs = running_state(job_with(backoff=0), backend)
    obs = with_pods(obs, [failed_launcher(job, code=143, disrupted=True), *workers(job, backend)],
                    active=0, ready=0, failed=0)
    p = run(job, obs, backend)
    assert cond(p.status, st.FAILED) is None, p.status
    msg = cond(p.status, st.RESTARTING)["message"]
    assert "was disrupted (EvictionByEvictionAPI" in msg and "not counted" in msg and "0 of 0 retries" in msg, msg
    assert (st.R_RESTARTING, msg) in events(p)
    assert p.status["replicaStatuses"]["Launcher"]["failed"] == 1
    # announced once: the same failure seen again writes and says nothing more
    job2, obs2 = apply_plan(job, obs, p)
    p2 = run(job2, obs2, backend)
    assert not p2.events and p2.status is None, (p2.events, p2.status)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seen", ["while-running", "with-the-failure"])
def test_disruption_of_a_worker_does_not_count_the_launcher_failure_it_causes(backend, seen):
    """A worker evicted while the launcher runs: mpirun loses the host and fails. Seen while the
    launcher still ran, or only together with its failure, that attempt is not counted (backoffLimit
    0 survives); the launcher Job's ledger and limit say so."""
    job, obs = running_state(job_with(backoff=0), backend)
    launcher = running_launcher(job)
    if seen == "while-running":
        obs = with_pods(obs, [launcher, *workers(job, backend, disrupted=1)])
        p = run(job, obs, backend)
        patch = launcher_patch(p)
        book = not_counted(patch)
        assert list(book) == ["pi-launcher-abc0#0"] and book["pi-launcher-abc0#0"]["worker"] == "pi-worker-1"
        assert patch["spec"]["backoffLimit"] == 0 + 1 + 1
        job, obs = apply_plan(job, obs, p)
    obs = with_pods(obs, [failed_launcher(job, code=205), *workers(job, backend, disrupted=1)],
                    active=0, ready=0, failed=1)
    p = run(job, obs, backend)
    assert cond(p.status, st.FAILED) is None, p.status
    msg = cond(p.status, st.RESTARTING)["message"]
    assert "exit code 205; worker pi-worker-1 was disrupted (EvictionByEvictionAPI" in msg, msg
    assert "not counted, 0 of 0 retries (runPolicy.backoffLimit) used, 1 not counted" in msg, msg
    if seen == "with-the-failure" and backend == "statefulset":
        assert launcher_patch(p)["spec"]["backoffLimit"] == 2
    elif seen == "with-the-failure":  # the Job backend makes the launcher Job afresh with the ledger (section 11)
        book = handed_over(p)
        assert (book.failed, book.counted, book.excused) == (1, 0, 1), book
        assert ledger.job_limit(job, obs.launcher, book) == 2


@pytest.mark.parametrize("backend", ["statefulset"])
def test_disruption_excuses_the_failure_it_caused_not_the_retry_before_the_worker_is_back(backend):
    """The eviction excuses the failure it caused; the retry that fails while worker 0 is still away
    counts (the launcher's own: it started without its host), and so does the next: backoffLimit 1
    is exceeded at the second counted failure (tests/unit/test_retry_ledger.py: pending_replacement).
    The Job backend's launcher Job made afresh with its workers: tests/unit/test_relaunch_workers.py."""
    job, obs = running_state(job_with(backoff=1), backend)
    first = failed_launcher(job, 0, code=205)
    obs = with_pods(obs, [first, *workers(job, backend, disrupted=0)], active=0, ready=0, failed=1)
    job, obs = apply_plan(job, obs, run(job, obs, backend))
    second = failed_launcher(job, 1, code=205)
    away = [p for p in workers(job, backend) if not p["spec"]["hostname"].endswith("-0")]
    obs = with_pods(obs, [first, second, *away], failed=2)
    p = run(job, obs, backend)
    msg = cond(p.status, st.RESTARTING)["message"]
    assert cond(p.status, st.FAILED) is None and "counted, 1 of 1 retries" in msg and "1 not counted" in msg, msg
    job, obs = apply_plan(job, obs, p)
    back = workers(job, backend)
    back[0]["metadata"]["uid"] = "pod-new-worker-0"
    third = failed_launcher(job, 2, code=1)
    p = run(job, with_pods(obs, [first, second, third, *back], failed=3), backend)
    failed = cond(p.status, st.FAILED)
    assert failed["reason"] == "BackoffLimitExceeded" and "failed 2 time(s)" in failed["message"], failed


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_deleted_without_disruption_counts(backend):
    """`kubectl delete pod` of a worker is no disruption: the failure it causes is counted, and with
    backoffLimit 0 the MPIJob fails, naming the attempt and its exit code."""
    job, obs = running_state(job_with(backoff=0), backend)
    gone = workers(job, backend)
    gone[0]["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:40Z"
    obs = with_pods(obs, [failed_launcher(job, code=205), *gone], active=0, ready=0, failed=1)
    p = run(job, obs, backend)
    failed = cond(p.status, st.FAILED)
    assert failed["reason"] == "BackoffLimitExceeded", p.status
    assert "attempt 1 (pod pi-launcher-abc0) exit code 205" in failed["message"], failed
    # the launcher Job, whose own limit is a failure wider, is stopped
    assert any(x.ref.name == "pi-launcher" and x.patch == {"spec": {"suspend": True}} for x in p.patches), p.patches


def test_disruption_of_an_on_failure_launcher_raises_the_jobs_limit():
    """restartPolicy OnFailure on a cluster without container restart rules: no podFailurePolicy, so
    the Job counts the evicted pod; the ledger raises its limit by one, the operator does not count it."""
    job, obs = running_state(job_with("OnFailure", backoff=1), "job")
    assert "podFailurePolicy" not in obs.launcher["spec"]
    obs = with_pods(obs, [failed_launcher(job, code=143, disrupted=True), *workers(job, "job")], failed=1)
    p = run(job, obs, "job")
    patch = launcher_patch(p)
    assert patch["spec"]["backoffLimit"] == 1 + 1 + rp.NET_ON_FAILURE and "pi-launcher-abc0#0" in not_counted(patch)
    assert "0 of 1 retries" in cond(p.status, st.RESTARTING)["message"]


def test_disruption_ledger_garbage_is_an_empty_ledger():
    for raw in ("{", "[]", "3", "", '{"failed": -1, "last": 3, "notCounted": []}'):
        assert ledger.read({"metadata": {"annotations": {ledger.LEDGER: raw}}}) == ledger.Ledger()


# -- restartPolicy ExitCode -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_code_1_to_127_fails_at_once_naming_the_code(backend):
    """The launcher Job's podFailurePolicy failed it (exit code 3): the MPIJob's reason and message say
    so, with backoffLimit 3 unused."""
    job, obs = running_state(job_with("ExitCode", backoff=3), backend)
    obs = replace(obs, pods=[failed_launcher(job, code=3), *workers(job, backend)],
                  launcher=job_finished(obs.launcher, "Failed", reason="PodFailurePolicy", failed=1,
                                        active=0, ready=0))
    p = run(job, obs, backend)
    failed = cond(p.status, st.FAILED)
    assert failed["reason"] == "PermanentExitCode3", failed
    assert "exited with code 3" in failed["message"] and "pi-launcher-abc0" in failed["message"], failed


def test_exit_code_permanent_seen_before_the_job_fails():
    """The pod's exit 3 shows before the Job controller's failure (it batches pod events for 1 s): the
    MPIJob fails PermanentExitCode at once, never Restarting, never BackoffLimitExceeded."""
    job, obs = running_state(job_with("ExitCode", backoff=0), "job")
    obs = with_pods(obs, [failed_launcher(job, code=3), *workers(job, "job")], active=0, ready=0, failed=1)
    p = run(job, obs, "job")
    assert cond(p.status, st.FAILED)["reason"] == "PermanentExitCode3"
    assert cond(p.status, st.RESTARTING) is None and st.R_RESTARTING not in [e[0] for e in events(p)]


@pytest.mark.parametrize("code", [137, 128, 255])
def test_exit_code_128_to_255_is_retried_and_counted(code):
    job, obs = running_state(job_with("ExitCode", backoff=3), "job")
    obs = with_pods(obs, [failed_launcher(job, code=code), *workers(job, "job")], active=0, ready=0, failed=1)
    p = run(job, obs, "job")
    assert cond(p.status, st.FAILED) is None
    msg = cond(p.status, st.RESTARTING)["message"]
    assert f"exit code {code}" in msg and "counted, 1 of 3 retries" in msg, msg


def test_exit_code_without_the_job_failing_is_not_renamed():
    """Only the podFailurePolicy's failure is PermanentExitCode: BackoffLimitExceeded stays itself."""
    job, obs = running_state(job_with("ExitCode", backoff=0), "job")
    obs = replace(obs, pods=[failed_launcher(job, code=137), failed_launcher(job, 1, code=137)],
                  launcher=job_finished(obs.launcher, "Failed", reason="BackoffLimitExceeded", failed=2))
    assert cond(run(job, obs, "job").status, st.FAILED)["reason"] == "BackoffLimitExceeded"


# -- restarts in place -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_restarts_are_announced_and_counted(backend):
    """The kubelet restarted the launcher container (restartCount 1, last exit 1): Restarting names the
    attempt, the exit code and that it restarts in place, and Running follows a second later; two more
    restarts exceed backoffLimit 2 and the operator fails the MPIJob and stops the launcher Job."""
    job, obs = running_state(job_with(backoff=2), backend)
    obs = with_pods(obs, [running_launcher(job, restarts=1, last_code=1), *workers(job, backend)])
    p = run(job, obs, backend)
    msg = cond(p.status, st.RESTARTING)["message"]
    assert "launcher attempt 1 (pod pi-launcher-abc0) failed: exit code 1; counted, 1 of 2 retries" in msg, msg
    assert msg.endswith("the launcher restarts in place."), msg
    assert p.requeue_after == retries.RUNNING_AGAIN_S
    job, obs = apply_plan(job, obs, p)
    p = run(job, obs, backend)
    assert st.is_true(p.status, st.RUNNING), p.status
    job, obs = apply_plan(job, obs, p)
    obs = with_pods(obs, [running_launcher(job, restarts=3, last_code=1), *workers(job, backend)])
    p = run(job, obs, backend)
    failed = cond(p.status, st.FAILED)
    assert failed["reason"] == "BackoffLimitExceeded" and "failed 3 time(s)" in failed["message"], failed


def test_in_place_restart_while_waiting_is_not_running():
    """A launcher container in the kubelet's back-off (waiting) is not running: no Running then."""
    job, obs = running_state(job_with(backoff=3), "job")
    waiting = running_launcher(job, restarts=1, last_code=1)
    waiting["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    obs = with_pods(obs, [waiting, *workers(job, "job")], ready=0)
    job, obs = apply_plan(job, obs, run(job, obs, "job"))
    assert cond(job, st.RESTARTING)["status"] == "True"
    p = run(job, obs, "job")
    assert not st.is_true(p.status or job["status"], st.RUNNING)


def test_in_place_ledger_binds_the_restarted_attempt():
    """In place, the attempt a worker's eviction hits is <pod>#<restarts>: the restart it causes is
    not counted."""
    job, obs = running_state(job_with(backoff=1), "job")
    obs = with_pods(obs, [running_launcher(job, restarts=1, last_code=1), *workers(job, "job")])
    job, obs = apply_plan(job, obs, run(job, obs, "job"))  # restart #1 announced, counted
    obs = with_pods(obs, [running_launcher(job, restarts=1, last_code=1), *workers(job, "job", disrupted=0)])
    p = run(job, obs, "job")
    assert list(not_counted(launcher_patch(p))) == ["pi-launcher-abc0#1"]
    job, obs = apply_plan(job, obs, p)
    obs = with_pods(obs, [running_launcher(job, restarts=2, last_code=205), *workers(job, "job", disrupted=0)])
    p = run(job, obs, "job")
    assert cond(p.status, st.FAILED) is None
    assert "1 of 1 retries (runPolicy.backoffLimit) used, 1 not counted" in cond(p.status, st.RESTARTING)["message"]


def test_the_net_follows_an_edited_backoff_limit():
    """runPolicy.backoffLimit raised while running: the launcher Job's limit follows (+ ledger + net)."""
    job, obs = running_state(job_with(backoff=1), "job")
    job = copy.deepcopy(job)
    job["spec"]["runPolicy"]["backoffLimit"] = 5
    assert launcher_patch(run(job, obs, "job")) == {"spec": {"backoffLimit": 5 + rp.NET}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_disruption_of_a_worker_gone_from_the_cache_still_binds(backend):
    """On kwok a StatefulSet's evicted pod is gone within a fraction of a second, before the batched
    reconcile: the controller remembers it (Inputs.disrupted), and the plan binds it all the same."""
    from reconcilers.plan import plan
    from reconcilers.types import Inputs
    from tests.unit.sim import NOW, KeyGen

    job, obs = running_state(job_with(backoff=0), backend)
    gone = workers(job, backend, disrupted=1)[1]
    obs = with_pods(obs, [running_launcher(job), workers(job, backend)[0]])
    p = plan(Inputs(job, obs, Config(worker_backend=backend), NOW, KeyGen(), disrupted=(gone,)))
    assert not_counted(launcher_patch(p))["pi-launcher-abc0#0"]["worker"] == "pi-worker-1"
    # (a launcher pod cannot leave the cache so: it is held until its end is recorded,
    # tests/unit/test_attempt_record.py)


def test_in_place_run_waiting_out_the_back_off_is_a_failure_already():
    """The second run ended (137) and waits out the kubelet's back-off (CrashLoopBackOff: restartCount
    stays 1 until it starts again, lastState is this run's end): with backoffLimit 1 the MPIJob fails
    now, before the kubelet starts a third run."""
    job, obs = running_state(job_with(backoff=1), "statefulset")
    lau = copy.deepcopy(obs.launcher)
    lau["spec"]["template"]["spec"]["containers"][0]["restartPolicy"] = "OnFailure"
    waiting = running_launcher(job, restarts=1, last_code=137)
    waiting["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    p = run(job, replace(obs, launcher=lau, pods=[waiting, *workers(job, "statefulset")]), "statefulset")
    failed = cond(p.status, st.FAILED)
    assert failed["reason"] == "BackoffLimitExceeded" and "failed 2 time(s)" in failed["message"], failed
    assert "attempt 2 (pod pi-launcher-abc0) exit code 137" in failed["message"], failed
    # a template that does not restart in place: the run's end is the pod's, counted once it fails
    p = run(job, replace(obs, pods=[waiting, *workers(job, "statefulset")]), "statefulset")
    assert cond(p.status or job["status"], st.FAILED) is None


def test_a_failed_pod_leaving_the_cache_is_no_news():
    """Each failed attempt is announced once: when the newest failed pod leaves the cache (a deleted
    pod goes once the Job counted it), the older one is not announced again."""
    job, obs = running_state(job_with(backoff=3), "job")
    a, b = failed_launcher(job, 0, code=1), failed_launcher(job, 1, code=2)
    a["metadata"]["creationTimestamp"] = "2025-01-01T12:00:00Z"
    b["metadata"]["creationTimestamp"] = "2025-01-01T12:01:00Z"
    obs = with_pods(obs, [a, *workers(job, "job")], failed=1)
    job, obs = apply_plan(job, obs, run(job, obs, "job"))
    obs = with_pods(obs, [a, b, *workers(job, "job")], failed=2)
    p = run(job, obs, "job")
    assert "launcher attempt 2 (pod pi-launcher-abc1) failed: exit code 2" in cond(p.status, st.RESTARTING)["message"]
    job, obs = apply_plan(job, obs, p)
    p = run(job, with_pods(obs, [a, *workers(job, "job")], active=0, ready=0), "job")
    assert st.R_RESTARTING not in [e[0] for e in events(p)], p.events
    book = json.loads(obs.launcher["metadata"]["annotations"][ledger.LEDGER])
    assert (book["failed"], book["last"]) == (2, {"at": "2025-01-01T12:01:00Z", "runs": {"pi-launcher-abc1": 0}})


def test_in_place_the_failure_that_ends_the_job_is_counted_and_stays():
    """backoffLimit 1, the second run ended in place: Failed, replicaStatuses.Launcher.failed 2, and
    2 still once the stopped launcher's pod is gone."""
    job, obs = running_state(job_with(backoff=1), "statefulset")
    obs = with_pods(obs, [running_launcher(job, restarts=1, last_code=1), *workers(job, "statefulset")])
    job, obs = apply_plan(job, obs, run(job, obs, "statefulset"))
    obs = with_pods(obs, [running_launcher(job, restarts=2, last_code=1), *workers(job, "statefulset")])
    p = run(job, obs, "statefulset")
    assert cond(p.status, st.FAILED)["reason"] == "BackoffLimitExceeded"
    assert p.status["replicaStatuses"]["Launcher"]["failed"] == 2
    job, obs = apply_plan(job, obs, p)
    p = run(job, with_pods(obs, workers(job, "statefulset")), "statefulset")
    assert (p.status or job["status"])["replicaStatuses"]["Launcher"]["failed"] == 2


@pytest.mark.parametrize(("code", "reason"), [(3, "PermanentExitCode3"), (1, "PermanentExitCode1"),
                                              (127, "PermanentExitCode127"), (None, "PermanentExitCode")])
def test_exit_code_permanent_reason_names_the_code(code, reason):
    """The reason names the code (issue 35); a Job failure whose pod and message lost it keeps the prefix."""
    assert messages.permanent_reason(code) == reason
