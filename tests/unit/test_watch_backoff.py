"""Issue 36 item 4: a watch refused at once backs off, growing, as client-go's reflector does.

Before the fix every list that succeeded reset the backoff, and so did the first event of a watch
even when it was an ERROR: a watch refused with 403 (RBAC that allows list but not watch), 400 or 405
(a proxy) relisted every 0.8-1.6 s forever. The waits are recorded here, not slept (the reflector's
`_sleep` is the test's), so nothing depends on the clock; the real API server's refusal is in
tests/integration/test_watch_backoff.py.
"""

from __future__ import annotations

import pytest

from client.errors import ApiError
from client.resources import CONFIGMAPS
from informers.reflector import Backoff, Reflector
from testsupport.fake_api import FakeApi, FakeStream
from testsupport.reflector_waits import first_waits

GROWING = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


def page(rv: int) -> dict:
    return {"items": [], "metadata": {"resourceVersion": str(rv)}}


def cm(name: str, rv: int) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)}}


def refused(status: int) -> ApiError:
    reason = {400: "BadRequest", 403: "Forbidden", 405: "MethodNotAllowed"}[status]
    return ApiError(status, reason, f'configmaps is forbidden: cannot watch ({status})')


def error_event(status: int) -> dict:
    return {"type": "ERROR", "object": {"kind": "Status", "code": status, "reason": refused(status).reason,
                                        "message": "watch refused"}}


def run(client: FakeApi, n: int) -> tuple[list[float], Reflector]:
    """The first `n` waits of a reflector on `client`."""
    r = Reflector(client, CONFIGMAPS, lambda *a: None, lambda *a: None, namespace="ns", name="watch-backoff",
                  backoff=Backoff(jitter=0.0))
    return first_waits(r, n), r


@pytest.mark.parametrize("status", [403, 400, 405])
def test_watch_backoff_grows_for_a_watch_refused_by_its_status(status):
    """Every list passes, every watch is refused: before, [0.8, 0.8, ...] (reset by each list)."""
    client = FakeApi(respond=lambda method, path, body: page(7))
    client.watch_scripts = [refused(status)] * 8
    delays, r = run(client, 8)
    assert delays == GROWING
    assert r.lists == 8  # each refusal relists (the cache stays as fresh as the backoff allows)


@pytest.mark.parametrize("status", [403, 400, 405])
def test_watch_backoff_grows_for_a_watch_refused_by_an_error_event(status):
    """The watch opens and its first event is an ERROR: before, that event reset the backoff."""
    client = FakeApi(respond=lambda method, path, body: page(7))
    client.watch_scripts = [FakeStream([error_event(status)]) for _ in range(8)]
    delays, _ = run(client, 8)
    assert delays == GROWING


def test_watch_backoff_resets_after_a_watch_that_delivered_an_event():
    """A watch that works (a real event) starts the backoff afresh, as before."""
    client = FakeApi(respond=lambda method, path, body: page(7))
    client.watch_scripts = [refused(403), refused(403), refused(403),
                            FakeStream([{"type": "ADDED", "object": cm("a", 8)}, ConnectionResetError("cut")]),
                            refused(403), refused(403)]
    delays, _ = run(client, 6)
    # three refusals grow it; the good watch resets it, so its cut waits 0.8 s; then it grows again
    assert delays == [0.8, 1.6, 3.2, 0.8, 1.6, 3.2]


def test_watch_backoff_a_bookmark_is_a_real_event():
    client = FakeApi(respond=lambda method, path, body: page(7))
    client.watch_scripts = [refused(403), refused(403),
                            FakeStream([{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
                                        error_event(403)]),
                            refused(403)]
    delays, _ = run(client, 4)
    assert delays == [0.8, 1.6, 0.8, 1.6]
