"""With --log-format=json every line is JSON: structlog's, the informers' (standard logging, with
%-style arguments and tracebacks), Python warnings and a dying thread's traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import logging, threading, warnings
    from controller import logs
    logs.setup("json", "info")
    logging.getLogger("informers.reflector").warning("%s: connection error (%s); retrying in %.1fs", "pods", "x", 1.5)
    try:
        1 / 0
    except ZeroDivisionError:
        logging.getLogger("informers.informer").exception("%s: handler raised", "pods")
    logs.get("controller").warning("reconcile failed; retrying with backoff", error="ConnectionRefusedError: x")
    warnings.warn("deprecated thing")
    t = threading.Thread(target=lambda: 1 / 0, name="doomed")
    t.start(); t.join()
    logging.getLogger("informers.reflector").debug("filtered out at info")
""")


@pytest.fixture(scope="module")
def lines() -> list[str]:
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stderr.splitlines()


def test_every_line_is_json(lines):
    assert len(lines) == 5, lines
    for line in lines:
        json.loads(line)


def test_stdlib_records_keep_their_arguments_level_logger_and_traceback(lines):
    recs = [json.loads(line) for line in lines]
    assert recs[0] == {**recs[0], "event": "pods: connection error (x); retrying in 1.5s", "level": "warning",
                       "logger": "informers.reflector"}
    assert recs[1]["level"] == "error" and "ZeroDivisionError" in recs[1]["exception"]
    assert recs[2]["error"] == "ConnectionRefusedError: x" and "exception" not in recs[2]
    assert "deprecated thing" in recs[3]["event"]
    assert recs[4]["event"] == "thread doomed died" and "ZeroDivisionError" in recs[4]["exception"]


@pytest.mark.parametrize(("error", "expected"), [
    (ConnectionRefusedError(111, "Connection refused"), True),
    (TimeoutError("timed out"), True),
    ("urllib3", True),
    ("api", True),
    (KeyError("Worker"), False),
    (TypeError("bug"), False),
])
def test_expected_network_errors_are_warnings_bugs_are_tracebacks(error, expected):
    import urllib3

    from client.errors import ApiError
    from controller.mpijob_controller import _expected
    if error == "urllib3":
        error = urllib3.exceptions.MaxRetryError(None, "/apis", "Connection refused")
    elif error == "api":
        error = ApiError(503, "ServiceUnavailable", "etcd leader changed")
    assert _expected(error) is expected


CONCURRENT = textwrap.dedent("""
    import logging, threading
    from controller import logs
    logs.setup("json", "info")
    s, std = logs.get("controller"), logging.getLogger("informers.reflector")
    def work(i):
        for j in range(2000):
            s.info("structlog line", i=i, j=j) if (i + j) % 2 else std.info("stdlib line %d %d", i, j)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
""")


def test_lines_from_many_threads_never_interleave():
    """structlog's PrintLogger wrote a line and its newline in two calls: with the informers logging
    from their own threads, about one line in ten was two JSON objects glued together."""
    r = subprocess.run([sys.executable, "-c", CONCURRENT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 16000
    bad = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            bad.append(line)
    assert not bad, f"{len(bad)} broken lines, e.g. {bad[0][:200]}"
