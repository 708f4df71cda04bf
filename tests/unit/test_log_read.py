"""Reading a launcher's log for the verdict on an exit 0 (controller/evidence.py, client/rest.py
get_tail, docs/architecture.md section 9.1): `log_tail` (issue 41 item 2: the newest lines always
arrive) and `transient_read` (item 5: a transient answer is tried again through the work queue,
what cannot come back is unreadable at once). The client part runs against a local HTTP server; the
pure parts are tables."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from client.rest import tail
from controller import evidence as ce
from reconcilers.failure import evidence
from reconcilers.failure.evidence import LauncherReport
from reconcilers.types import LogRead
from testsupport.net import local_client, serving

PRRTE_LINE = "PRTE has lost communication with a remote daemon."
WANT = LogRead("ns", "pi-launcher-abc", "uid-1", "launcher")


class _LogServer(ThreadingHTTPServer):
    """Answers a pod's log GET with `answers` in turn (the last one repeats): a (code, body, headers)
    tuple. A `limitBytes` in the query is honoured as the API server does: the answer stops there."""

    daemon_threads = True

    def __init__(self, *answers: tuple[int, bytes, dict]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = list(answers)
        self.queries: list[dict] = []
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        srv: _LogServer = self.server  # type: ignore[assignment]
        query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        with srv.lock:
            srv.queries.append(query)
            code, body, headers = srv.answers.pop(0) if len(srv.answers) > 1 else srv.answers[0]
        if "limitBytes" in query:
            body = body[:int(query["limitBytes"])]
        self.send_response(code)
        for k, v in {"Content-Type": "text/plain" if code == 200 else "application/json", **headers}.items():
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for at in range(0, len(body), 8192):  # streamed as a kubelet streams a log: in chunks
            piece = body[at:at + 8192]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


def status(code: int, reason: str, message: str = "no") -> tuple[int, bytes, dict]:
    return code, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                             "message": message, "code": code}).encode(), {}


def log(text: str) -> tuple[int, bytes, dict]:
    return 200, text.encode(), {}


def chatty(lines: int = 500, width: int = 700) -> str:
    """The last `lines` lines of a launcher that printed a great deal (more than LOG_LIMIT_BYTES in
    all), PRRTE's message among its last lines, then mpirun's last words."""
    body = [f"step {i}: " + "x" * width for i in range(lines - 4)]
    return "\n".join([*body, "-" * 40, PRRTE_LINE, "  HNP daemon   : [prterun-pi-launcher-1@0,0]", "-" * 40]) + "\n"


# -- log_tail -----------------------------------------------------------------------------------------------------


def test_log_tail_the_newest_lines_arrive_from_a_log_larger_than_the_limit():
    """500 lines of 700 bytes (350 KiB, more than LOG_LIMIT_BYTES): the lost daemon, in the last lines,
    is found. (Before: tailLines with limitBytes: the answer stopped at 256 KiB from the start of the
    last 500 lines, before PRRTE's message: Succeeded.)"""
    text = chatty()
    assert len(text) > evidence.LOG_LIMIT_BYTES
    with serving(_LogServer(log(text))) as srv:
        got = ce.read(local_client(f"http://127.0.0.1:{srv.server_address[1]}"), WANT)
        assert got == LauncherReport("uid-1", cut_short=PRRTE_LINE)
        assert srv.queries == [{"tailLines": str(evidence.LOG_TAIL_LINES), "container": "launcher"}]


def test_log_tail_the_client_keeps_only_the_end_of_a_streamed_answer():
    body = "".join(f"line {i}\n" for i in range(100_000))  # 1.1 MB
    with serving(_LogServer(log(body))) as srv:
        got = local_client(f"http://127.0.0.1:{srv.server_address[1]}").get_tail("/x/log", keep=1000)
    assert got.decode().endswith("line 99999\n") and len(got) <= 1000
    assert got.decode().startswith("line ")  # from a line's start


@pytest.mark.parametrize("chunks,keep,want", [
    ([b"a\nb\nc\n"], 100, b"a\nb\nc\n"),  # all of it fits
    ([b"a\nb\n", b"c\n"], 4, b"b\nc\n"),  # cut at a line's start: kept whole
    ([b"aaaa\nbb\n", b"c\n"], 5, b"bb\nc\n"),  # cut within a line: that partial line dropped
    ([b"aaaa", b"aaaa", b"\nb\n"], 3, b"b\n"),
    ([b"abcdefgh"], 3, b"fgh"),  # one line longer than the limit: its end
    ([b"", b"x\n", b""], 10, b"x\n"),
    ([], 10, b""),
    ([b"1\n"] * 10_000, 4, b"1\n1\n"),
])
def test_log_tail_table(chunks, keep, want):
    assert tail(iter(chunks), keep) == want


def test_log_tail_memory_stays_bounded():
    """The held chunks never hold more than `keep` plus one chunk."""
    held = []

    def chunks():
        for _ in range(1000):
            held.append(1)
            yield b"x" * 1000 + b"\n"

    assert len(tail(chunks(), 5000)) <= 5000 and len(held) == 1000


# -- transient_read -----------------------------------------------------------------------------------------------


def drive(*answers, times=(0, 1, 3, 7, 15, 31, 61, 62, 70)):
    """read_wanted at the monotonic `times` against a server answering `answers` in turn: what each
    call returned, the GETs sent, and the report in the end (None: none yet)."""
    reports: dict = {}
    retries: dict = {}
    calls = []
    with serving(_LogServer(*answers)) as srv:
        client = local_client(f"http://127.0.0.1:{srv.server_address[1]}")
        for now in times:
            calls.append(ce.read_wanted(client, reports, retries, [WANT], float(now)))
            if WANT.uid in reports:
                break
        gets = len(srv.queries)
    return calls, gets, reports.get(WANT.uid)


@pytest.mark.parametrize("code,reason", [(429, "TooManyRequests"), (500, "InternalError"), (502, "BadGateway"),
                                         (503, "ServiceUnavailable"), (504, "Timeout")])
def test_transient_read_is_tried_again_with_backoff_and_the_log_decides(code, reason):
    """Two transient answers, then the log: no report until then, each retry due after the backoff
    (1 s, then 2 s), one GET per try. (Before: the first answer was `unreadable`, stored for good,
    and a healthy run ended Failed/WorkerLostDuringRun.)"""
    calls, gets, got = drive(status(code, reason), status(code, reason), log("pi is approximately 3.14\n"))
    assert calls == [(False, 1.0), (False, 2.0), (True, None)] and gets == 3
    assert got == LauncherReport("uid-1")


def test_transient_read_a_retry_not_yet_due_sends_nothing():
    calls, gets, got = drive(status(503, "ServiceUnavailable"), log("done\n"), times=(0, 0.4, 0.9, 1.0))
    assert calls == [(False, 1.0), (False, pytest.approx(0.6)), (False, pytest.approx(0.1)), (True, None)]
    assert gets == 2 and got == LauncherReport("uid-1")


def test_transient_read_honours_retry_after():
    answer = (429, status(429, "TooManyRequests")[1], {"Retry-After": "5"})
    calls, gets, _ = drive(answer, log("done\n"), times=(0, 5))
    assert calls == [(False, 5.0), (True, None)] and gets == 2


def test_transient_read_gives_up_after_about_a_minute():
    calls, gets, got = drive(status(503, "ServiceUnavailable"))
    assert [c[1] for c in calls] == [1.0, 2.0, 4.0, 8.0, 16.0, 29.0, None] and gets == 7
    assert got is not None and got.unreadable is not None and "tried 7 times over 61s" in got.unreadable


@pytest.mark.parametrize("code,reason,says", [
    (404, "NotFound", "404 NotFound"),  # the pod gone
    (400, "BadRequest", "400 BadRequest"),  # the container unknown
    (403, "Forbidden", "get pods/log"),  # RBAC: named
])
def test_transient_read_what_cannot_come_back_is_unreadable_at_once(code, reason, says):
    calls, gets, got = drive(status(code, reason))
    assert calls == [(True, None)] and gets == 1
    assert got is not None and says in (got.unreadable or ""), got


def test_transient_read_a_connection_refused_is_transient():
    reports: dict = {}
    retries: dict = {}
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port = srv.server_address[1]
    srv.server_close()  # nothing listens there now
    assert ce.read_wanted(local_client(f"http://127.0.0.1:{port}"), reports, retries, [WANT], 0.0) == (False, 1.0)
    assert not reports and retries[WANT.uid].failures == 1


def test_transient_read_the_controller_queues_the_retry_never_sleeps():
    """The controller's wiring (MPIJobController._read_logs): a transient answer puts the MPIJob back
    in the work queue after the backoff (the worker returns at once); the read that succeeds queues
    it now, so that the verdict is planned with the report."""
    import time

    from controller import mpijob_controller as mc
    from controller.config import Options
    from controller.job_memory import JobMemory
    from informers.factory import InformerFactory
    from reconcilers.types import Plan

    with serving(_LogServer(status(503, "ServiceUnavailable"), log("pi is approximately 3.14\n"))) as srv:
        client = local_client(f"http://127.0.0.1:{srv.server_address[1]}")

        class Executor:
            pass

        executor = Executor()
        executor.client = client  # type: ignore[attr-defined]
        ctrl = mc.MPIJobController(Options(), InformerFactory(client, namespace="ns"), executor)  # type: ignore[arg-type]
        try:
            mem, plan = JobMemory("uid-pi"), Plan(read_logs=[WANT])
            t0 = time.monotonic()
            ctrl._read_logs("ns/pi", mem, plan)
            assert time.monotonic() - t0 < 1.0, "the worker slept"
            assert len(ctrl.queue) == 0 and ctrl.queue.waiting_len() == 1 and not mem.reports
            assert mem.log_retries[WANT.uid].failures == 1
            mem.log_retries[WANT.uid].next_at = time.monotonic()  # the backoff has run out
            ctrl._read_logs("ns/pi", mem, plan)
            assert mem.reports == {WANT.uid: LauncherReport(WANT.uid)} and not mem.log_retries
            assert len(ctrl.queue) == 1  # planned again at once
        finally:
            ctrl.queue.shutdown()
