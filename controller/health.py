"""HTTP endpoints: /metrics (Prometheus text format), /healthz (the process can do its job: its
informers run and no worker is hung, MPIJobController.healthy) and /readyz (informer caches synced).
Served by a small threaded server per bind address (an IPv6 one too: the pod's IP may be one)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

Check = Callable[[], tuple[bool, str]]


def _handler(routes: dict[str, Callable[[], tuple[int, str, bytes]]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            code, ctype, body = route() if route else (404, "text/plain", b"not found\n")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # probes every few seconds: not worth a line
            pass

    return Handler


def _check_route(check: Check) -> Callable[[], tuple[int, str, bytes]]:
    def route() -> tuple[int, str, bytes]:
        ok, why = check()
        return (200 if ok else 503), "text/plain", (why or "ok").encode() + b"\n"

    return route


def _metrics() -> tuple[int, str, bytes]:
    return 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class Servers:
    """Starts one server per distinct address; metrics and probes may share one."""

    def __init__(self) -> None:
        self._servers: list[ThreadingHTTPServer] = []

    def serve(self, address: tuple[str, int], routes: dict) -> int:
        host = address[0].strip("[]")
        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        srv = server_class((host, address[1]), _handler(routes))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, name=f"http-{address[1]}", daemon=True).start()
        self._servers.append(srv)
        return srv.server_address[1]

    def start(
        self,
        metrics: tuple[str, int] | None,
        probes: tuple[str, int] | None,
        healthz: Check,
        readyz: Check,
    ) -> dict[str, int]:
        probe_routes = {"/healthz": _check_route(healthz), "/readyz": _check_route(readyz)}
        ports: dict[str, int] = {}
        if metrics and probes and metrics == probes:
            ports["metrics"] = ports["probes"] = self.serve(metrics, {"/metrics": _metrics, **probe_routes})
            return ports
        if metrics:
            ports["metrics"] = self.serve(metrics, {"/metrics": _metrics})
        if probes:
            ports["probes"] = self.serve(probes, probe_routes)
        return ports

    def stop(self) -> None:
        for srv in self._servers:
            srv.shutdown()
            srv.server_close()
