"""Which failures the executor retries: transient ones only (never a 4xx that will not change)."""

from __future__ import annotations

import pytest
import tenacity
import urllib3

from client.errors import ApiError
from controller.executor import (
    Executor,
    ForeignObject,
    NotLeader,
    ObjectGone,
    PredecessorChild,
    Refused,
    _retriable,
    _wait,
)
from reconcilers.types import Create, Patch, Plan, Ref
from testsupport.fake_api import FakeApi


def api_error(status: int, reason: str, message: str = "") -> ApiError:
    return ApiError(status, reason, message)


@pytest.mark.parametrize("error,retry", [
    (api_error(409, "Conflict", "the object has been modified"), True),
    (api_error(429, "TooManyRequests"), True),
    (api_error(500, "InternalError"), True),
    (api_error(503, "ServiceUnavailable"), True),
    (api_error(504, "Timeout"), True),
    (urllib3.exceptions.ProtocolError("Connection aborted"), True),
    (urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"), True),
    (ConnectionResetError(), True),
    (ConnectionRefusedError(), True),
    (TimeoutError(), True),
    (urllib3.exceptions.NewConnectionError(None, "connection refused"), True),
    (api_error(502, "BadGateway"), True),
    (api_error(409, "Conflict", "Operation cannot be fulfilled on jobs.batch \"pi\": the object has been modified; "
               "please apply your changes to the latest version and try again"), True),
    (api_error(409, "AlreadyExists"), False),
    (api_error(409, "Conflict", "Precondition failed: UID in precondition: a, UID in object meta: b"), False),
    (api_error(400, "BadRequest"), False),
    (api_error(403, "Forbidden"), False),
    (api_error(404, "NotFound"), False),
    (api_error(422, "Invalid"), False),
    (api_error(401, "Unauthorized"), False),
    (api_error(410, "Gone"), False),
    (ValueError("a bug"), False),
])
def test_retriable(error, retry):
    assert _retriable(error) is retry


@pytest.mark.parametrize("retry_after,wait", [(3.0, 3.0), (60.0, 10.0)])
def test_retry_after_is_honoured_up_to_ten_seconds(retry_after, wait):
    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.set_exception((ApiError, ApiError(429, "TooManyRequests", "", retry_after=retry_after), None))
    assert _wait(state) == wait


OK = {"metadata": {"resourceVersion": "7"}}
REF = Ref("v1", "ConfigMap", "ns", "pi-config")


def transient(status: int = 503) -> ApiError:
    return ApiError(status, "ServiceUnavailable", "", retry_after=0.001)  # retried at once


@pytest.mark.parametrize("answers,calls,outcome", [
    ([transient(), transient(409), OK], 3, "7"),
    ([ConnectionResetError(), OK], 2, "7"),
    ([transient()], 5, Refused),  # gives up after five attempts: reported (Blocked), retried later
    ([ApiError(404, "NotFound", "")], 1, ObjectGone),  # deleted meanwhile: a race, not a refusal
    ([ApiError(422, "Invalid", "")], 1, Refused),  # reported in the result, not raised
])
def test_executor_retries_transient_failures_only(answers, calls, outcome):
    client = FakeApi(*answers)
    ex = Executor(client, is_leader=lambda: True, component="c", instance="i")
    if isinstance(outcome, str):
        res = ex.apply({}, Plan(patches=[Patch(REF, {"data": {}})]))
        assert res.written[("configmaps", "ns", "pi-config")] == outcome
    elif outcome is Refused:
        res = ex.apply({}, Plan(patches=[Patch(REF, {"data": {}})]))
        assert isinstance(res.refused, Refused) and res.refused.status == answers[0].status
    else:
        with pytest.raises(outcome):
            ex.apply({}, Plan(patches=[Patch(REF, {"data": {}})]))
    assert len(client.calls) == calls


def test_a_retry_after_the_lease_is_lost_is_not_sent():
    """The leader guard holds for every attempt, not only the first: a replica that lost its Lease while
    backing off must not write over the new leader."""
    leading = [True]
    client = FakeApi(transient(), OK, on_request=lambda: leading.__setitem__(0, False))
    ex = Executor(client, is_leader=lambda: leading[0], component="c", instance="i")
    with pytest.raises(NotLeader):
        ex.apply({}, Plan(patches=[Patch(REF, {"data": {}})]))
    assert len(client.calls) == 1


JOB = {"metadata": {"name": "pi", "namespace": "ns", "uid": "uid-pi"}}
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config", "namespace": "ns"}}
EXISTS = ApiError(409, "AlreadyExists", "configmaps \"pi-config\" already exists")
GONE = ApiError(404, "NotFound", "")


def ours(uid: str = "uid-pi", name: str = "pi", kind: str = "MPIJob") -> dict:
    return {"metadata": {"resourceVersion": "9", "ownerReferences": [
        {"kind": kind, "name": name, "uid": uid, "controller": True}]}}


@pytest.mark.parametrize("answers,outcome", [
    ([EXISTS, ours()], "9"),  # the cache was behind: ours already
    ([EXISTS, GONE, OK], "7"),  # collected between the AlreadyExists and the GET: created again
    ([EXISTS, GONE, EXISTS, GONE, EXISTS, GONE], PredecessorChild),  # keeps coming and going: later
    ([EXISTS, ours(uid="uid-old")], PredecessorChild),  # a deleted namesake's, being collected
    ([EXISTS, ours(uid="u-rs", kind="ReplicaSet", name="rs")], ForeignObject),
    ([EXISTS, {"metadata": {"resourceVersion": "9"}}], ForeignObject),
])
def test_create_meeting_already_exists(answers, outcome):
    ex = Executor(FakeApi(*answers), is_leader=lambda: True, component="c", instance="i")
    plan = Plan(creates=[Create(CM)])
    if isinstance(outcome, str):
        assert ex.apply(JOB, plan).written[("configmaps", "ns", "pi-config")] == outcome
    elif outcome is ForeignObject:  # reported in the result, like a refusal: the plan stops there
        foreign = ex.apply(JOB, plan).foreign
        assert isinstance(foreign, ForeignObject) and "is not controlled by MPIJob ns/pi" in str(foreign)
    else:
        with pytest.raises(outcome):
            ex.apply(JOB, plan)
