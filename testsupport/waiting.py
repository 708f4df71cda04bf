"""Polling helper for tests against the real cluster: behaviour is asserted, time only bounds it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(fn: Callable[[], T], timeout: float = 60, interval: float = 0.5, what: str = "") -> T:
    """Returns fn()'s first truthy value; fails with the last value seen after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or fn}: last={last!r}")
        time.sleep(interval)
