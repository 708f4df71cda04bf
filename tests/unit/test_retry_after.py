"""Issue 36 item 5: a Retry-After the server (or a proxy) sends is clamped before anyone sleeps on it.

Malformed answers come from a fault server on 127.0.0.1 (a stand-in for a broken server or proxy, not
for the API server's behaviour): it answers every request with 503 and the Retry-After of the test,
in the header, in the Status's details.retryAfterSeconds, or both. Before the fix -1 made the
reflector ask again at once (70 LISTs in 3 s, the client's token bucket the only bound), a negative
value made the executor's sleep raise, and 2147483647 froze an informer for decades while /healthz
said ok.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import tenacity

from client.errors import RETRY_AFTER_MAX, ApiError, retry_after_seconds
from client.resources import CONFIGMAPS, MPIJOBS
from controller import mpijob_controller as mc
from controller.config import parse
from controller.executor import RETRYING, _wait
from informers.factory import InformerFactory
from informers.reflector import Backoff, Reflector
from testsupport.fake_api import FakeApi, FakeStream
from testsupport.net import local_client, serving
from testsupport.reflector_waits import first_waits


@pytest.mark.parametrize("value,seconds", [
    ("-1", None), (-1, None), ("0", None), (0, None), ("-0.5", None), ("nan", None), ("inf", None),
    ("-inf", None), ("", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", None), (True, None),
    ([1], None), ({}, None), (None, None),
    ("1", 1.0), (1, 1.0), ("2.5", 2.5), ("60", 60.0), ("61", RETRY_AFTER_MAX), ("2147483647", RETRY_AFTER_MAX),
    (2147483647, RETRY_AFTER_MAX), ("1e308", RETRY_AFTER_MAX),
])
def test_retry_after_seconds_clamped(value, seconds):
    assert retry_after_seconds(value) == seconds


def status_body(retry_after) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "ServiceUnavailable",
                       "message": "later", "code": 503, "details": {"retryAfterSeconds": retry_after}}).encode()


@pytest.mark.parametrize("header,body,seconds", [
    ("-1", -1, None),
    (None, -1, None),
    ("-1", 5, 5.0),  # a header that is not a usable wait leaves the Status's own
    ("3", -1, 3.0),  # the header first, as client-go
    (None, 2147483647, RETRY_AFTER_MAX),
    ("2147483647", None, RETRY_AFTER_MAX),
    (None, "x", None),
])
def test_retry_after_from_a_malformed_answer(header, body, seconds):
    headers = {"Retry-After": header} if header is not None else {}
    assert ApiError.from_response(503, status_body(body), headers).retry_after == seconds


def test_retry_after_details_that_are_not_an_object_are_ignored():
    data = json.dumps({"kind": "Status", "code": 503, "details": ["retryAfterSeconds", 5]}).encode()
    assert ApiError.from_response(503, data, {}).retry_after is None


@pytest.mark.parametrize("retry_after", [-1, 0, float("nan")])
def test_retry_after_executor_never_sleeps_a_negative_time(retry_after):
    """Before: _wait returned -1 and tenacity's sleep raised ValueError out of the reconcile."""
    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.set_exception((ApiError, ApiError(503, "ServiceUnavailable", "", retry_after=retry_after), None))
    assert 0 < _wait(state) <= 5.1


def test_retry_after_negative_is_retried_by_the_executor():
    answers = [ApiError(503, "ServiceUnavailable", "", retry_after=-1), {"metadata": {"resourceVersion": "2"}}]
    slept: list[float] = []
    retrying = RETRYING.copy(sleep=slept.append)
    assert retrying(FakeApi(*answers).request, "GET", "/api/v1/namespaces/ns/configmaps/x") == answers[1]
    assert len(slept) == 1 and slept[0] > 0


# -- the reflector against a fault server ---------------------------------------------------------


class _FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, header: str | None, body) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.header, self.body = header, body
        self.requests = 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        srv: _FaultServer = self.server  # type: ignore[assignment]
        with srv.lock:
            srv.requests += 1
        data = status_body(srv.body)
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        if srv.header is not None:
            self.send_header("Retry-After", srv.header)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def reflector_delays(header: str | None, body, n: int = 6) -> list[float]:
    """The first `n` waits of a reflector whose every LIST the fault server answers so. The waits are
    recorded, not slept: the test does not depend on the clock."""
    with serving(_FaultServer(header, body)) as srv:
        r = Reflector(local_client(f"http://127.0.0.1:{srv.server_address[1]}"), CONFIGMAPS,
                      lambda *a: None, lambda *a: None, namespace="ns", name="retry-after",
                      backoff=Backoff(jitter=0.0))
        delays = first_waits(r, n)
        assert srv.requests == n  # one LIST per wait: nothing sent without a wait before it
    return delays


@pytest.mark.parametrize("header,body", [("-1", -1), (None, -1), ("0", 0), ("nan", None)])
def test_retry_after_negative_backs_off_growing(header, body):
    """Before: the waits were -1 (or 0): the LISTs went out as fast as the client's bucket allowed."""
    assert reflector_delays(header, body) == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6]


@pytest.mark.parametrize("header,body", [("2147483647", None), (None, 2147483647)])
def test_retry_after_huge_is_at_most_a_minute(header, body):
    """Before: the reflector slept 2147483647 s (68 years)."""
    assert reflector_delays(header, body, n=3) == [RETRY_AFTER_MAX] * 3


def test_retry_after_is_a_floor_under_the_backoff():
    """A server that asks for 1 s every time still sees the waits grow past it."""
    assert reflector_delays("1", None) == [1.0, 1.6, 3.2, 6.4, 12.8, 25.6]


# -- /healthz sees an informer that has not synced for too long -----------------------------------


def controller(client) -> mc.MPIJobController:
    return mc.MPIJobController(parse(["--namespace", "ns"]), InformerFactory(client, namespace="ns"), executor=None)


def test_retry_after_healthz_reports_an_informer_that_never_synced():
    """Every LIST refused (a Retry-After of a minute each time): the informer never syncs. /healthz
    said ok for as long as that lasted; it now fails once an informer has not followed the API
    server for INFORMER_STALE_SECONDS. The clock is the check's argument: nothing waits for it."""
    refused = ApiError(503, "ServiceUnavailable", "later", retry_after=2147483647)
    client = FakeApi(respond=lambda method, path, body: (
        refused if path.startswith(MPIJOBS.path("ns")) else {"items": [], "metadata": {"resourceVersion": "5"}}))
    ctrl = controller(client)
    for inf in [ctrl.mpijobs, *ctrl._children()]:
        inf.start()
    try:
        deadline = time.monotonic() + 10
        others = [inf for inf in ctrl._children()]
        while not all(inf.reflector.current_stream is not None for inf in others) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not ctrl.mpijobs.has_synced()
        now = time.monotonic()
        assert ctrl.healthy(now=now) == (True, "ok")
        ok, why = ctrl.healthy(now=now + mc.INFORMER_STALE_SECONDS + 1)
        assert not ok
        assert "mpijobs" in why and "configmaps" not in why, why  # a watching informer is not stale
    finally:
        for inf in [ctrl.mpijobs, *ctrl._children()]:
            inf.stop()


def test_retry_after_healthz_ok_for_informers_that_watch():
    client = FakeApi(respond=lambda method, path, body: {"items": [], "metadata": {"resourceVersion": "5"}})
    client.watch_scripts = [FakeStream([], end=False) for _ in range(20)]
    ctrl = controller(client)
    infs = [ctrl.mpijobs, *ctrl._children()]
    for inf in infs:
        inf.start()
    try:
        deadline = time.monotonic() + 10
        while not all(inf.reflector.current_stream is not None for inf in infs) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ctrl.healthy(now=time.monotonic() + 10 * mc.INFORMER_STALE_SECONDS) == (True, "ok")
    finally:
        for inf in infs:
            inf.stop()
