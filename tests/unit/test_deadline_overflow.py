"""Every number the CRD admits gets an answer (issue 36 item 2): a run, or a condition naming the field,
never a reconcile that raises. `runPolicy.activeDeadlineSeconds` is an int64 (minimum 1),
`ttlSecondsAfterFinished` an int32, and anyone with status access may write a `startTime` or a
`completionTime` in year 9999 or year 1; a pod's `deletionGracePeriodSeconds` is an int64 too. A
moment beyond what a datetime holds never comes (reconcilers/status.py `later`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import desired
from reconcilers import status as st
from reconcilers.defaults import with_defaults
from reconcilers.failure import runs
from reconcilers.types import Config
from tests.unit.sim import BACKENDS, NOW, at, converge, exited_0, job_finished, mpijob, pod, run, running_state

INT64 = 2**63 - 1
INT32 = 2**31 - 1
LAST = "9999-12-31T23:59:59Z"
FIRST = "0001-01-01T00:00:00Z"


def cond(status: dict, ctype: str) -> dict | None:
    return st.get_condition(status, ctype)


# (case, runPolicy) of an MPIJob just created: it must run, with its children, and no Failed.
NEW = [
    ("deadline 10^12 s", {"activeDeadlineSeconds": 10**12}),
    ("deadline int64 max", {"activeDeadlineSeconds": INT64}),
    ("deadline one past Go's Duration", {"activeDeadlineSeconds": desired.MAX_JOB_DEADLINE_S + 1}),
    ("ttl int32 max", {"ttlSecondsAfterFinished": INT32}),
    ("both at their max", {"activeDeadlineSeconds": INT64, "ttlSecondsAfterFinished": INT32}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("case", "run_policy"), NEW, ids=[c[0] for c in NEW])
def test_deadline_overflow_a_new_mpijob_runs(backend, case, run_policy):
    job, obs, plans = converge(mpijob(run_policy=run_policy), backend=backend)
    assert plans[0].creates and cond(plans[0].status, st.CREATED)["status"] == "True"
    assert cond(job["status"], st.FAILED) is None
    assert obs.launcher is not None and obs.workers is not None


# (case, runPolicy, startTime of a running MPIJob, the Failed reason expected or None: it runs on)
RUNNING = [
    ("startTime year 9999, deadline 1 s", {"activeDeadlineSeconds": 1}, LAST, None),
    ("startTime year 9999, deadline int64 max", {"activeDeadlineSeconds": INT64}, LAST, None),
    ("startTime year 1, deadline int64 max", {"activeDeadlineSeconds": INT64}, FIRST, None),
    ("startTime year 1, deadline 1 s: ran out long ago", {"activeDeadlineSeconds": 1}, FIRST, st.R_DEADLINE),
    ("startTime now, deadline int64 max", {"activeDeadlineSeconds": INT64}, st.fmt_time(NOW), None),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("case", "run_policy", "start", "failed"), RUNNING, ids=[c[0] for c in RUNNING])
def test_deadline_overflow_a_running_mpijob(backend, case, run_policy, start, failed):
    job, obs = running_state(mpijob(run_policy=run_policy), backend)
    job["status"]["startTime"] = start
    p = run(job, obs, backend=backend, now=at(60))
    status = p.status or job["status"]  # None: unchanged
    if failed is None:
        assert cond(status, st.FAILED) is None and cond(status, st.RUNNING)["status"] == "True"
        assert not p.patches and not p.deletes  # the children run on untouched
    else:
        c = cond(status, st.FAILED)
        assert c["reason"] == failed and "runPolicy.activeDeadlineSeconds" in c["message"]


# (case, ttlSecondsAfterFinished, completionTime of a Succeeded MPIJob, deleted now?)
FINISHED = [
    ("completed year 9999, ttl int32 max", INT32, LAST, False),
    ("completed year 9999, ttl 1", 1, LAST, False),
    ("completed year 1, ttl int32 max: ran out long ago", INT32, FIRST, True),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("case", "ttl", "done", "deleted"), FINISHED, ids=[c[0] for c in FINISHED])
def test_deadline_overflow_ttl_of_a_finished_mpijob(backend, case, ttl, done, deleted):
    job, obs = running_state(mpijob(run_policy={"ttlSecondsAfterFinished": ttl}), backend)
    obs, logs = exited_0(replace(obs, launcher=job_finished(obs.launcher, "Complete", when=done)))
    p = run(job, obs, backend=backend, reports=logs)
    job["status"] = p.status
    assert cond(job["status"], st.SUCCEEDED)["status"] == "True"
    assert job["status"]["completionTime"] == done
    p = run(job, obs, backend=backend, now=at(60))
    assert p.delete_mpijob is deleted


# (activeDeadlineSeconds, what the launcher Job gets): the Job controller counts its deadline as int64
# nanoseconds, which wrap past MAX_JOB_DEADLINE_S into a negative deadline that fails the Job at once.
LAUNCHER_DEADLINE = [
    (1, 1),
    (desired.MAX_JOB_DEADLINE_S, desired.MAX_JOB_DEADLINE_S),
    (desired.MAX_JOB_DEADLINE_S + 1, None),
    (10**10, None),
    (INT64, None),
]


@pytest.mark.parametrize(("ads", "want"), LAUNCHER_DEADLINE)
def test_deadline_overflow_the_launcher_job_gets_a_deadline_its_controller_can_count(ads, want):
    assert desired.MAX_JOB_DEADLINE_S == 9223372036
    job = with_defaults(mpijob(run_policy={"activeDeadlineSeconds": ads}))
    assert desired.launcher(job, Config()).get("spec", {}).get("activeDeadlineSeconds") == want


# A worker pod deleted with a grace period beyond what the API server's clock arithmetic holds: the
# API server stores the int64 as given, its deletionTimestamp wraps to some date in range.
GRACE = [
    ("grace 10^12 s", 10**12, "2147-01-01T00:00:00Z", at(0).replace(year=2147, month=1, day=1, hour=0)),
    ("grace int64 max", INT64, "2025-01-01T12:00:50Z", at(50)),
    ("grace 30 s", 30, "2025-01-01T12:00:50Z", at(20)),
]


@pytest.mark.parametrize(("case", "grace", "deleting", "want"), GRACE, ids=[c[0] for c in GRACE])
def test_deadline_overflow_delete_asked_at(case, grace, deleting, want):
    p = {"metadata": {"deletionTimestamp": deleting, "deletionGracePeriodSeconds": grace},
         "status": {"phase": "Running"}}
    assert runs.delete_asked_at(p) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_deadline_overflow_a_worker_deleted_with_a_huge_grace_period(backend):
    job, obs = running_state(mpijob(spec={"mpiImplementation": "OpenMPI"}), backend)
    gone = pod(job, "worker", 0, backend=backend)
    gone["metadata"].update(deletionTimestamp="2147-01-01T00:00:00Z", deletionGracePeriodSeconds=10**12)
    obs = replace(obs, pods=[p for p in obs.pods if p["metadata"]["name"] != gone["metadata"]["name"]] + [gone])
    p = run(job, obs, backend=backend, now=at(60))
    assert cond(p.status or job["status"], st.FAILED) is None
