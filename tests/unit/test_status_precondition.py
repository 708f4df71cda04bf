"""Issue 36 item 1, the controller's side: the status write carries the resourceVersion the plan was
made from; a conflict on it is not retried, sends none of the plan's Events, and makes the controller
plan again. What the API server enforces is in tests/integration/test_status_precondition.py."""

from __future__ import annotations

import pytest

from client.errors import ApiError
from controller import metrics
from controller.executor import Executor, StaleStatus
from reconcilers.types import Event, Plan
from tests.unit.test_controller_sync import KEY, setup  # noqa: F401 (fixture)
from tests.unit.test_controller_sync import job as job  # the setup fixture's
from testsupport.fake_api import FakeApi

CONFLICT = ApiError(409, "Conflict", 'Operation cannot be fulfilled on mpijobs.kubeflow.org "pi": the object has '
                    "been modified; please apply your changes to the latest version and try again")
JOB = {"metadata": {"name": "pi", "namespace": "ns", "uid": "uid-a", "resourceVersion": "41"},
       "status": {"startTime": "2024-01-01T00:00:00Z"}}


def status_patches(api: FakeApi) -> list:
    return [c for c in api.calls if c[0] == "PATCH" and c[1].endswith("/status")]


def test_status_precondition_sent_with_the_write():
    api = FakeApi({"metadata": {"resourceVersion": "42"}})
    res = Executor(api, lambda: True, "c", "i").apply(JOB, Plan(status={"startTime": "2024-01-01T00:00:00Z",
                                                                       "completionTime": "2024-01-01T00:01:00Z"}))
    assert res.stale is None
    [(_, _, body)] = status_patches(api)
    assert body == {"metadata": {"resourceVersion": "41"}, "status": {"completionTime": "2024-01-01T00:01:00Z"}}


def test_status_precondition_conflict_is_not_retried_and_sends_no_event():
    api = FakeApi(CONFLICT)
    plan = Plan(status={"completionTime": "2024-01-01T00:01:00Z"}, events=[Event("Normal", "MPIJobSucceeded", "ok")])
    res = Executor(api, lambda: True, "c", "i").apply(JOB, plan)
    assert isinstance(res.stale, StaleStatus) and res.stopped
    assert len(api.calls) == 1, api.calls  # no retry of a precondition that cannot pass, no Event


@pytest.fixture
def conflicting(setup):  # noqa: F811
    ctrl, api, server = setup

    def respond(method, path, body):
        if method == "PATCH" and path.endswith("/status"):
            raise CONFLICT
        return server(method, path, body)

    api.respond = respond
    return ctrl, api


def test_status_precondition_conflict_plans_again(conflicting):
    ctrl, api = conflicting
    created = metrics.jobs_created._value.get()
    assert ctrl.sync(KEY) is False  # it set the retry itself
    assert len(status_patches(api)) == 1
    assert not [c for c in api.calls if c[1].endswith("/events")], "the stale plan's Events were sent"
    assert metrics.jobs_created._value.get() == created
    assert ctrl.queue.num_requeues(KEY) == 1  # planned again, after a backoff
