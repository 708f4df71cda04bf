"""Local ports for the processes a test or a benchmark starts, and local HTTP servers with a
RestClient for them."""

from __future__ import annotations

import contextlib
import fcntl
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import HTTPServer
from pathlib import Path

import kubernetes

from client.rest import RestClient

# The ports handed out lately, by every process on this machine (make test's pytest workers run side
# by side): a port is free when the kernel hands it out, but taken only once the process it was
# meant for binds it, seconds later; until then another worker's bind(0) may be handed it too.
_HANDED_OUT = Path(tempfile.gettempdir()) / "mpijob-operator-ports"
_HOLD_S = 600.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, and that no caller of this function on
    this machine was handed in the last ten minutes."""
    with open(_HANDED_OUT, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed
        f.seek(0)
        now = time.time()
        recent = {int(p): float(t) for p, t in (line.split() for line in f if line.strip())
                  if now - float(t) < _HOLD_S}
        for _ in range(1000):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in recent:
                break
        recent[port] = now
        f.seek(0)
        f.truncate()
        f.writelines(f"{p} {t}\n" for p, t in recent.items())
    return port


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
