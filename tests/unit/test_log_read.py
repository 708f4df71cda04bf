"""Reading a launcher's log for the verdict on an Open MPI exit 0 (controller/evidence.py,
controller/logscan.py, controller/logreader.py, client/rest.py get_stream, docs/architecture.md
section 9.1): `chatty_launcher` (issue 50 item 10: the log scanned as it streams from just before
the loss, line by line, in constant memory, up to a bound that says so), `log_reads_apart` (item 8:
the reads run on reader threads of their own, deduplicated per pod, bounded; a reconcile never
waits on one) and `transient_read` (issue 41 item 5: a transient answer is tried again through the
work queue, what cannot come back is unreadable at once). The client part runs against a local HTTP
server; the pure parts are tables."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from controller import evidence as ce
from controller import logreader, logscan
from controller.job_memory import JobMemory
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
        # HANG answers wait for this before a byte is sent: a kubelet that does not answer
        self.released = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        srv: _LogServer = self.server  # type: ignore[assignment]
        query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        with srv.lock:
            srv.queries.append(query)
            code, body, headers = srv.answers.pop(0) if len(srv.answers) > 1 else srv.answers[0]
        if code == HANG[0]:
            srv.released.wait(30)
            return
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


HANG = (-1, b"", {})  # no answer at all until the server's `released` is set


# -- chatty_launcher ----------------------------------------------------------------------------------------------

P = PRRTE_LINE.encode()
FILL = b"step: " + b"x" * 1017 + b"\n"  # 1 KiB: what a launcher prints after mpirun
MIB = FILL * 1024
SINCE = "2026-12-07T20:00:00Z"
AFTER_LOSS = LogRead("ns", "pi-launcher-abc", "uid-1", "launcher", since=SINCE)


def clock(*times: float):
    it = iter(times)
    return lambda: next(it)


@pytest.mark.parametrize("chunks,limit,want", [
    pytest.param([P + b"\n" + MIB], 64 * len(MIB), logscan.Scanned(PRRTE_LINE, len(P) + 1 + len(MIB)), id="at-byte-0"),
    pytest.param([b"a\n" + P[:10], P[10:] + b"\nb\n"], 10**6, logscan.Scanned(PRRTE_LINE, len(P) + 5),
                 id="split-across-chunks"),
    pytest.param([P[:5], P[5:20], P[20:], b"\n"], 10**6, logscan.Scanned(PRRTE_LINE, len(P) + 1),
                 id="split-across-four-chunks"),
    pytest.param([MIB, MIB[:100], MIB[100:], b"  " + P + b"\n", MIB], 64 * len(MIB),
                 logscan.Scanned(PRRTE_LINE, 2 * len(MIB) + len(P) + 3), id="after-2-MiB"),
    pytest.param([MIB, P], 64 * len(MIB), logscan.Scanned(PRRTE_LINE, len(MIB) + len(P)), id="last-line-no-newline"),
    pytest.param([MIB, b"", MIB], 64 * len(MIB), logscan.Scanned(None, 2 * len(MIB)), id="none-to-the-end"),
    pytest.param([MIB], len(MIB), logscan.Scanned(None, len(MIB)), id="exactly-the-bound-then-the-end"),
    pytest.param([MIB, P + b"\n"], len(MIB), logscan.Scanned(None, len(MIB), "bytes"), id="bound-reached-before-it"),
    pytest.param([MIB + P + b"\n"], len(MIB), logscan.Scanned(None, len(MIB), "bytes"),
                 id="bound-reached-inside-a-chunk"),
    pytest.param([P + b"\n" + MIB], 100, logscan.Scanned(PRRTE_LINE, 100), id="found-before-the-bound"),
    pytest.param([], 100, logscan.Scanned(None, 0), id="empty"),
])
def test_chatty_launcher_scan_table(chunks, limit, want):
    assert logscan.scan(iter(chunks), evidence.first_cut_short, limit) == want


_LINES = hs.sampled_from([b"", b"pi is approximately 3.14", b"rank 0 on host w-0", "été ✓".encode(), P.rstrip(b"\n"),
                          b"  " + P.rstrip(b"\n") + b"  ", b"x" * 300,
                          b"[w-1:00042] noticed that process rank 3 with PID 42 on node w-1 exited on signal 9",
                          b"The system has lost communication with the following daemon:"])


@settings(max_examples=300, deadline=None)
@given(lines=hs.lists(_LINES, max_size=30), newline_at_end=hs.booleans(), cuts=hs.lists(hs.integers(0, 10**4)),
       limit=hs.integers(0, 10**4))
def test_chatty_launcher_scan_is_the_same_however_the_stream_is_cut(lines, newline_at_end, cuts, limit):
    """Any log, cut into chunks anywhere (inside a line, inside a UTF-8 character): the scan finds the
    first line a scan of the whole text finds, among the first `limit` bytes, and says whether the
    bound stopped it before the end."""
    data = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    at = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]
    got = logscan.scan(iter(chunks), evidence.first_cut_short, limit)
    seen = data[:limit]
    want = evidence.scan("u", seen.decode("utf-8", "replace")).cut_short
    assert got.found == want
    if want is None:
        assert got.read == len(seen) and got.bound == ("bytes" if len(data) > limit else None)


def test_chatty_launcher_scan_stops_at_its_deadline():
    got = logscan.scan(iter([FILL] * 10), evidence.first_cut_short, 10**6, deadline=2.5, clock=clock(1, 2, 3, 4))
    assert got == logscan.Scanned(None, 3 * len(FILL), "time")


def test_chatty_launcher_scan_memory_stays_constant():
    """32 MiB of short lines, then a 16 MiB line with no newline: what the scan holds stays under
    1 MiB (one chunk and at most MAX_LINE_BYTES of a line), never the log."""
    import tracemalloc

    chunk = FILL * 64  # 64 KiB, one object yielded again and again: only the scan allocates
    flat = b"y" * (64 * 1024)

    def stream():
        for _ in range(512):
            yield chunk
        for _ in range(256):
            yield flat
        yield b"\n" + P + b"\n"

    tracemalloc.start()
    try:
        got = logscan.scan(stream(), evidence.first_cut_short, 10**9)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.found == PRRTE_LINE and got.read == 48 * 2**20 + len(P) + 2
    assert peak < 2**20, peak


@pytest.mark.parametrize("before,after", [(0, 1.5), (1.5, 1.5), (0, 40)])
def test_chatty_launcher_the_lost_daemon_is_found_anywhere_after_the_loss(before, after):
    """`mpirun ...; rc=$?; <print MiBs>; exit $rc`: PRRTE's lost daemon, then `after` MiB of output (and
    `before` MiB of it before the loss): found. The read asks from just before the loss (sinceTime)
    up to the bound plus one byte (limitBytes). (Before: the last 500 lines, 256 KiB of them kept:
    the line was not in them, and the run ended Succeeded.)"""
    text = (FILL * int(before * 1024) + b"Rank 0 on host pi-worker-0\n" + P + b"\n  HNP daemon   : [prterun]\n"
            + FILL * int(after * 1024) + b"pi is approximately 3.1416\n").decode()
    with serving(_LogServer(log(text))) as srv:
        got = ce.read(local_client(f"http://127.0.0.1:{srv.server_address[1]}"), AFTER_LOSS)
        assert got == LauncherReport("uid-1", cut_short=PRRTE_LINE)
        assert srv.queries == [{"limitBytes": str(evidence.LOG_SCAN_LIMIT_BYTES + 1), "container": "launcher",
                                "sinceTime": SINCE}]


def test_chatty_launcher_without_a_loss_the_whole_log_is_asked_for():
    with serving(_LogServer(log("pi is approximately 3.1416\n"))) as srv:
        assert ce.read(local_client(f"http://127.0.0.1:{srv.server_address[1]}"), WANT) == LauncherReport("uid-1")
        assert srv.queries == [{"limitBytes": str(evidence.LOG_SCAN_LIMIT_BYTES + 1), "container": "launcher"}]


def test_chatty_launcher_the_bound_reached_says_so_and_is_never_a_clean_log(monkeypatch):
    """More than the bound after the loss, PRRTE's line beyond it: the report says the bound was
    reached and how much was read; the verdict weighs it as a log it could not read: Failed after the
    loss seen, and without one a success said so with a Warning, never the plain success of a clean log.
    (Before: the last 500 lines were read, the line not in them: a clean report, Succeeded.)"""
    from dataclasses import replace

    from tests.unit.sim import running_state
    from tests.unit.test_worker_loss import (
        cond,
        exits,
        launcher,
        lose_worker_0,
        open_mpi,
        verdict,
        worker_back,
    )

    monkeypatch.setattr(evidence, "LOG_SCAN_LIMIT_BYTES", 2**20)
    text = (MIB * 2 + P + b"\n").decode()
    with serving(_LogServer(log(text))) as srv:
        got = ce.read(local_client(f"http://127.0.0.1:{srv.server_address[1]}"), AFTER_LOSS)
    assert got.cut_short is None and got.unreadable is not None, got
    assert "bound of 1 MiB" in got.unreadable and f"1.0 MiB read since {SINCE}" in got.unreadable, got
    for backend in ("job", "statefulset"):
        job, obs = running_state(open_mpi(), backend)
        a = launcher(job, 0)
        lost, lobs, _ = lose_worker_0(backend, job, obs, a)
        lost, lobs = worker_back(backend, lost, lobs, a, now=23)
        done = launcher(job, 0, end=60)
        reports = {done["metadata"]["uid"]: replace(got, uid=done["metadata"]["uid"])}
        failed = exits(lost, lobs, backend, done, 61, reports=reports)
        assert verdict(failed) == "Failed/WorkerLostDuringRun", failed.status
        assert "bound of 1 MiB" in cond(failed.status, "Failed")["message"]
        success = exits(job, obs, backend, done, 61, reports=reports)
        assert verdict(success) == "Succeeded" and "bound of 1 MiB" in cond(success.status, "Succeeded")["message"]
        assert [e.reason for e in success.events if e.type == "Warning"] == ["LauncherLogUnreadable"]


@pytest.mark.parametrize("backend", ["job", "statefulset"])
def test_chatty_launcher_the_read_starts_just_before_the_loss(backend):
    """The plan's read of an exit 0 after a loss asks from LOSS_MARGIN_S before it: the worker's
    delete asked for at 20 s (the record written at 20.6 s) -> sinceTime 20 s - 60 s; the replacement
    cached, the record alone gives the time. No loss seen: the whole log (since None)."""
    from tests.unit.sim import at, running_state
    from tests.unit.test_worker_loss import exits, launcher, lose_worker_0, open_mpi, t, worker_back

    job, obs = running_state(open_mpi(), backend)
    clean = exits(job, obs, backend, launcher(job, 0, end=60), 61)
    assert [r.since for r in clean.read_logs] == [None]
    a = launcher(job, 0)
    job, obs, _ = lose_worker_0(backend, job, obs, a)
    seen = exits(job, obs, backend, launcher(job, 0, end=30), 31)  # the lost pod still cached
    assert [r.since for r in seen.read_logs] == [t(20 - evidence.LOSS_MARGIN_S)]
    job, obs = worker_back(backend, job, obs, a, now=23)
    later = exits(job, obs, backend, launcher(job, 0, end=60), 61)  # the record alone
    record = at(20.6).replace(microsecond=0)
    assert [r.since for r in later.read_logs] == [st_fmt(record, -evidence.LOSS_MARGIN_S)]


def st_fmt(when, seconds: float) -> str:
    from datetime import timedelta

    from reconcilers import status as st

    return st.fmt_time(when + timedelta(seconds=seconds))

# -- transient_read -----------------------------------------------------------------------------------------------


def attempt(client, reports: dict, retries: dict, now: float) -> tuple[bool, float | None]:
    """What a reader does at `now` (controller/logreader.py): read if due, record the outcome. (a
    report was added, seconds until the key is to be looked at again)."""
    after = ce.due(reports, retries, WANT, now)
    if after is None or after > 0:
        return False, after
    wait = ce.settle(reports, retries, WANT, ce.read(client, WANT), now)
    return wait is None, wait


def drive(*answers, times=(0, 1, 3, 7, 15, 31, 61, 62, 70)):
    """A read attempted at the monotonic `times` against a server answering `answers` in turn: what
    each attempt returned, the GETs sent, and the report in the end (None: none yet)."""
    reports: dict = {}
    retries: dict = {}
    calls = []
    with serving(_LogServer(*answers)) as srv:
        client = local_client(f"http://127.0.0.1:{srv.server_address[1]}")
        for now in times:
            calls.append(attempt(client, reports, retries, float(now)))
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
    assert attempt(local_client(f"http://127.0.0.1:{port}"), reports, retries, 0.0) == (False, 1.0)
    assert not reports and retries[WANT.uid].failures == 1


# -- log_reads_apart ----------------------------------------------------------------------------------------------


class Keys:
    """The work queue as the readers see it: the keys queued now, and after a delay."""

    def __init__(self) -> None:
        self.now: list[str] = []
        self.later: list[tuple[str, float]] = []
        self.cv = threading.Condition()

    def add(self, key: str) -> None:
        with self.cv:
            self.now.append(key)
            self.cv.notify_all()

    def add_after(self, key: str, seconds: float) -> None:
        with self.cv:
            self.later.append((key, seconds))
            self.cv.notify_all()

    def wait(self, what, timeout: float = 10.0):
        with self.cv:
            assert self.cv.wait_for(what, timeout), f"not within {timeout}s: now {self.now}, later {self.later}"


def reads(srv: _LogServer, n: int, timeout: float = 10.0) -> None:
    """Waits until the server has been asked `n` times."""
    import time

    deadline = time.monotonic() + timeout
    while len(srv.queries) < n:
        assert time.monotonic() < deadline, f"{len(srv.queries)} reads, not {n}"
        time.sleep(0.01)


def launcher_read(uid: str) -> LogRead:
    return LogRead("ns", f"pi-launcher-{uid}", uid, "launcher")


def test_log_reads_apart_a_reconcile_never_waits_on_a_log_that_hangs(monkeypatch):
    """The launcher's node does not answer: `ask` returns at once; asked again and again meanwhile,
    the pod is read once (deduplicated per pod); the read's timeout is a transient outcome, stored
    where the next reconcile finds it (the retry), the key queued after the backoff; the retry, due,
    reads the log: the report stored, the key queued at once."""
    import time

    monkeypatch.setattr(ce, "READ_TIMEOUT_S", 1.0)
    keys = Keys()
    with serving(_LogServer(HANG, log("pi is approximately 3.14\n"))) as srv:
        reader = logreader.LogReader(lambda: local_client(f"http://127.0.0.1:{srv.server_address[1]}"),
                                     threading.RLock(),
                                     keys.add, keys.add_after, threads=2)
        reader.start()
        try:
            mem = JobMemory("uid-pi")
            t0 = time.monotonic()
            for _ in range(20):  # every reconcile of the MPIJob asks again while the read hangs
                assert reader.ask("ns/pi", mem, [WANT]) == (False, None)
            assert time.monotonic() - t0 < 0.5, "a reconcile waited on the read"
            reads(srv, 1)
            time.sleep(0.3)
            assert len(srv.queries) == 1 and reader.waiting() == 1
            keys.wait(lambda: keys.later)
            assert keys.later == [("ns/pi", 1.0)] and not keys.now and not mem.reports
            assert mem.log_retries[WANT.uid].failures == 1 and reader.waiting() == 0
            assert reader.ask("ns/pi", mem, [WANT]) == (False, pytest.approx(1.0, abs=0.5))  # not yet due
            mem.log_retries[WANT.uid].next_at = time.monotonic()
            assert reader.ask("ns/pi", mem, [WANT]) == (False, None)
            keys.wait(lambda: keys.now)
            assert keys.now == ["ns/pi"] and mem.reports == {WANT.uid: LauncherReport(WANT.uid)}
            assert not mem.log_retries and len(srv.queries) == 2
            assert reader.ask("ns/pi", mem, [WANT]) == (False, None) and len(srv.queries) == 2  # known: no read
        finally:
            srv.released.set()
            reader.stop()


def test_log_reads_apart_bounded_in_readers_and_waiting_reads(monkeypatch):
    """One reader, room for one waiting read: the first pod is read (it hangs), the second waits its
    turn, the third is not taken (its key looked at again after BUSY_RETRY_S); two pods of the same
    MPIJob are two reads; at most `threads` reads at once."""
    import time

    monkeypatch.setattr(ce, "READ_TIMEOUT_S", 1.0)
    keys = Keys()
    with serving(_LogServer(HANG)) as srv:
        reader = logreader.LogReader(lambda: local_client(f"http://127.0.0.1:{srv.server_address[1]}"),
                                     threading.RLock(),
                                     keys.add, keys.add_after, threads=1, capacity=1)
        reader.start()
        try:
            assert reader.ask("ns/a", JobMemory("a"), [launcher_read("a")]) == (False, None)
            reads(srv, 1)
            assert reader.ask("ns/b", JobMemory("b"), [launcher_read("b")]) == (False, None)
            assert reader.ask("ns/c", JobMemory("c"), [launcher_read("c")]) == (False, logreader.BUSY_RETRY_S)
            time.sleep(0.3)
            assert len(srv.queries) == 1 and reader.waiting() == 2
        finally:
            srv.released.set()
            reader.stop()


def test_log_reads_apart_no_pods_log_granted_is_a_report_at_once():
    """The operator's RBAC lacks pods/log (controller/access.py): each wanted log is unreadable for
    that reason at once, without a request, and the MPIJob is planned again now."""
    keys = Keys()
    reader = logreader.LogReader(lambda: None, threading.RLock(), keys.add, keys.add_after)  # type: ignore
    mem = JobMemory("uid-pi")
    assert reader.ask("ns/pi", mem, [WANT], off="no get pods/log") == (True, None)
    assert mem.reports == {WANT.uid: LauncherReport(WANT.uid, unreadable="no get pods/log")}
    assert reader.waiting() == 0


def test_log_reads_apart_the_controller_queues_the_read_and_returns():
    """The controller's wiring (MPIJobController._read_logs): with the launcher's node not answering,
    the reconcile returns at once; the reader's outcome queues the MPIJob (after the backoff for a
    transient one). (Before: the reconcile worker read the log itself, held READ_TIMEOUT_S per try.)"""
    import time

    from controller import mpijob_controller as mc
    from controller.config import Options
    from informers.factory import InformerFactory
    from reconcilers.types import Plan

    with serving(_LogServer(HANG)) as srv:
        client = local_client(f"http://127.0.0.1:{srv.server_address[1]}")

        class Executor:
            pass

        executor = Executor()
        executor.client = client  # type: ignore[attr-defined]
        ctrl = mc.MPIJobController(Options(), InformerFactory(client, namespace="ns"), executor)  # type: ignore[arg-type]
        ctrl.log_reader.start()
        try:
            mem, plan = JobMemory("uid-pi"), Plan(read_logs=[WANT])
            t0 = time.monotonic()
            ctrl._read_logs("ns/pi", mem, plan)
            assert time.monotonic() - t0 < 0.5, "the reconcile waited on the read"
            reads(srv, 1)
            assert len(ctrl.queue) == 0 and ctrl.queue.waiting_len() == 0 and not mem.reports
        finally:
            srv.released.set()
            ctrl.queue.shutdown()
            ctrl.log_reader.stop()
