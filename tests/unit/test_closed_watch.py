"""Issue 24 item 3: a watch that the server (or a proxy in between) answers and closes at once.

A hostile server, not a stand-in for the API server: a tiny HTTP server on 127.0.0.1 that answers
every list with an empty page and every watch with an empty 200 that ends at once. The reflector
must count such a watch as a failure and back off, growing, instead of asking again in a loop.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from client.resources import CONFIGMAPS
from client.rest import RestClient
from informers.reflector import Backoff, Reflector
from testsupport.net import local_client, serving


class _ClosingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.watches = 0
        self.lists = 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        srv: _ClosingServer = self.server  # type: ignore[assignment]
        watch = "watch=true" in self.path
        with srv.lock:
            if watch:
                srv.watches += 1
            else:
                srv.lists += 1
        body = b"" if watch else json.dumps({"kind": "ConfigMapList", "items": [],
                                             "metadata": {"resourceVersion": "1"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def closing_server():
    with serving(_ClosingServer()) as srv:
        yield srv


def _client(port: int) -> RestClient:
    # No client-side limit: what bounds the watches here must be the reflector itself.
    return local_client(f"http://127.0.0.1:{port}")


def watches_per_second(server: _ClosingServer, seconds: float, backoff: Backoff | None = None) -> float:
    r = Reflector(_client(server.server_address[1]), CONFIGMAPS, lambda *a: None, lambda *a: None,
                  namespace="ns", name="closed-watch", backoff=backoff)
    t = threading.Thread(target=r.run, daemon=True)
    t.start()
    time.sleep(seconds)
    r.stop()
    t.join(5)
    with server.lock:
        return server.watches / seconds


def test_closed_watch_backs_off_growing(closing_server):
    """Before the fix the backoff was reset by every watch the server answered: thousands of watch
    requests a second (issue 24 saw 182,681 in one second). Now each one is a failure: 0.8 s, then
    1.6 s, then 3.2 s (plus jitter), so at most three in three seconds."""
    rate = watches_per_second(closing_server, 3.0)
    assert closing_server.lists == 1  # a closed watch is watched again, not relisted
    assert rate * 3.0 <= 3, f"{rate:.0f} watch requests/s against a server that closes every watch"


def test_closed_watch_backoff_grows_across_failures(closing_server):
    """Each closed watch doubles the wait (no jitter here), up to the cap: it is never reset by a
    watch that the server merely answered."""
    backoff = Backoff(0.05, 0.4, jitter=0.0)
    delays: list[float] = []
    real_next = backoff.next
    backoff.next = lambda: delays.append(real_next()) or delays[-1]  # type: ignore[method-assign]
    watches_per_second(closing_server, 1.5, backoff)
    assert delays[:5] == [0.05, 0.1, 0.2, 0.4, 0.4], delays
