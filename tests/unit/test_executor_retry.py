"""Which failures the executor retries: transient ones only (never a 4xx that will not change)."""

from __future__ import annotations

import pytest
import urllib3

from controller.executor import _retriable
from informers.rest import ApiError


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
    (api_error(409, "AlreadyExists"), False),
    (api_error(409, "Conflict", "Precondition failed: UID in precondition: a, UID in object meta: b"), False),
    (api_error(400, "BadRequest"), False),
    (api_error(403, "Forbidden"), False),
    (api_error(404, "NotFound"), False),
    (api_error(422, "Invalid"), False),
    (ValueError("a bug"), False),
])
def test_retriable(error, retry):
    assert _retriable(error) is retry
