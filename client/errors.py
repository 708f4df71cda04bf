"""A non-2xx answer of the API server as one exception type, with the fields of its Status."""

from __future__ import annotations

import http.client
import json
import math
from typing import Any

import urllib3

# What a request raises when the connection, not the API server, failed: worth another try.
# OSError covers sockets, TLS and timeouts; http.client's and urllib3's own errors the rest.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError, http.client.HTTPException, urllib3.exceptions.HTTPError)

# The longest wait a server's Retry-After is taken for. Whatever a server or a proxy sends, a
# request is tried again within a minute: 2147483647 froze an informer for decades (issue 36).
RETRY_AFTER_MAX = 60.0


def retry_after_seconds(value: Any) -> float | None:
    """A Retry-After (the header, or a Status's details.retryAfterSeconds) as the seconds to wait:
    None unless it is a positive finite number, and at most RETRY_AFTER_MAX. As in client-go
    (apierrors.SuggestsClientDelay takes only a retryAfterSeconds > 0), a value of 0 or below asks
    for no particular delay: the caller backs off on its own schedule, never sleeps a negative time
    nor retries in a tight loop (docs/architecture.md section 3.2)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return min(seconds, RETRY_AFTER_MAX)


class ApiError(Exception):
    """A non-2xx answer from the API server, with the fields of its Status."""

    def __init__(self, status: int, reason: str, message: str, body: dict | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        # Clamped here, so that no consumer (executor, reflector) sees a wait it must not sleep.
        self.body, self.retry_after = body, retry_after_seconds(retry_after)

    @classmethod
    def from_response(cls, status: int, data: bytes, headers: Any = None, http_reason: str = "") -> ApiError:
        body: dict | None = None
        try:
            parsed = json.loads(data) if data else None
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            pass
        reason = (body or {}).get("reason") or http_reason or ""
        message = (body or {}).get("message") or (data or b"").decode("utf-8", "replace")[:1000]
        # The header first, as client-go; one that is not a usable number leaves the Status's own.
        retry_after = retry_after_seconds(headers.get("Retry-After") if headers is not None else None)
        details = (body or {}).get("details")
        if retry_after is None and isinstance(details, dict):
            retry_after = retry_after_seconds(details.get("retryAfterSeconds"))
        return cls(status, reason, message, body, retry_after)

    @classmethod
    def from_status(cls, status: dict) -> ApiError:
        """From a Status object, as a watch ERROR event carries it."""
        code = int(status.get("code") or 500)
        return cls(code, status.get("reason") or "", status.get("message") or "", status)
