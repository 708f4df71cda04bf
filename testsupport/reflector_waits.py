"""The waits of a reflector, recorded instead of slept: a test of its backoff runs on no clock."""

from __future__ import annotations

import threading

from informers.reflector import Reflector


def first_waits(reflector: Reflector, n: int, join_s: float = 20.0) -> list[float]:
    """Runs `reflector` until it has asked to wait `n` times and returns those waits (seconds); each
    wait returns at once, and the n-th stops it."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= n:
            reflector.stop()

    reflector._sleep = sleep  # type: ignore[method-assign]
    t = threading.Thread(target=reflector.run, daemon=True)
    t.start()
    t.join(join_s)
    assert not t.is_alive(), f"the reflector still runs after {len(waits)} wait(s)"
    return waits
