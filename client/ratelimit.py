"""Client-side rate limiting, as client-go's flowcontrol: a token bucket shared by a client's requests."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    """client-go's flowcontrol token bucket: `qps` tokens a second, at most `burst` saved up.
    Takers reserve a token (the balance may go negative) and sleep outside the lock until it is due,
    so concurrent callers are served in arrival order at the configured rate."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, max(1, int(burst))
        self._tokens = float(self.burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Takes a token; returns how long the caller must wait before using it."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def take(self) -> None:
        wait = self.reserve()
        if wait > 0:
            time.sleep(wait)
