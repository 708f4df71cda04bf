"""A non-2xx answer of the API server as one exception type, with the fields of its Status."""

from __future__ import annotations

import http.client
import json
from typing import Any

import urllib3

# What a request raises when the connection, not the API server, failed: worth another try.
# OSError covers sockets, TLS and timeouts; http.client's and urllib3's own errors the rest.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError, http.client.HTTPException, urllib3.exceptions.HTTPError)


class ApiError(Exception):
    """A non-2xx answer from the API server, with the fields of its Status."""

    def __init__(self, status: int, reason: str, message: str, body: dict | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        self.body, self.retry_after = body, retry_after

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
        retry_after = None
        ra = headers.get("Retry-After") if headers is not None else None
        if ra is None and body:
            ra = ((body.get("details") or {}).get("retryAfterSeconds"))
        if ra is not None:
            try:
                retry_after = float(ra)
            except (TypeError, ValueError):
                retry_after = None
        return cls(status, reason, message, body, retry_after)

    @classmethod
    def from_status(cls, status: dict) -> ApiError:
        """From a Status object, as a watch ERROR event carries it."""
        code = int(status.get("code") or 500)
        return cls(code, status.get("reason") or "", status.get("message") or "", status)
