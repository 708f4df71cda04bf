"""Local ports for the processes a test or a benchmark starts, and local HTTP servers with a
RestClient for them."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import HTTPServer

import kubernetes

from client.rest import RestClient


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(server: HTTPServer) -> Iterator[HTTPServer]:
    """`server` answering on a thread of its own until the block ends; then shut down and closed."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def local_client(host: str) -> RestClient:
    """A RestClient for `host` (http://127.0.0.1:<port>[/prefix]) with no client-side limit."""
    cfg = kubernetes.client.Configuration()
    cfg.host = host
    cfg.retries = False
    return RestClient(kubernetes.client.ApiClient(configuration=cfg), qps=0, burst=1)
