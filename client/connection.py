"""Keep-alive HTTP/1.1 connections to the API server, one per calling thread, for the operator's
requests (GET, POST, PATCH, PUT, DELETE), not its watches.

Why not urllib3's pool, which the watches use: on the way to the API server a request spent about
0.45 ms of CPU in urllib3 (its PoolManager keys, URL parsing, header dicts, Timeout objects) on top
of http.client's own 0.2 ms, and writes are where the operator's CPU went after JSON
(docs/architecture.md section 7.1). http.client does the HTTP (chunked bodies, keep-alive, a
`Connection: close`); this module only keeps one connection per thread, opens it with the
kubernetes Configuration's TLS settings, and drops it when it can no longer be trusted.

Configurations this transport does not reproduce (a proxy, a TLS server name or hostname assertion
other than the host's, socket options) are left to urllib3: `supported()` says which.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
from email.message import Message
from typing import Any
from urllib.parse import urlsplit


def supported(configuration: Any) -> bool:
    """Whether `configuration` asks only for what this transport does: http or https to the host,
    its CA, client certificate and verification switch."""
    scheme = urlsplit(configuration.host or "").scheme
    return (scheme in ("http", "https")
            and not getattr(configuration, "proxy", None)
            and not getattr(configuration, "tls_server_name", None)
            and getattr(configuration, "assert_hostname", None) is None
            and getattr(configuration, "socket_options", None) is None
            and not getattr(configuration, "keep_alive", False))


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The client side of TLS as the kubernetes client's urllib3 pool sets it up: the CA (file or
    data), the client certificate, and no verification when verify_ssl is off."""
    ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert,
                                     cadata=getattr(configuration, "ca_cert_data", None))
    if not configuration.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        ctx.load_cert_chain(configuration.cert_file, configuration.key_file)
    return ctx


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle kept-alive connection that is readable has been closed by the server (or holds bytes
    nobody asked for): it must not carry the next request."""
    sock = conn.sock
    if sock is None:
        return False  # not connected yet: http.client connects on the next request
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Connections:
    """One keep-alive connection per thread to the configuration's host."""

    def __init__(self, configuration: Any) -> None:
        url = urlsplit(configuration.host)
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname or "localhost", url.port
        self.prefix = url.path.rstrip("/")  # a host such as https://proxy/k8s/clusters/c1 keeps its path
        self._ctx = tls_context(configuration) if self.https else None
        self._local = threading.local()

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and _dropped(conn):
            conn.close()
        if conn is None:
            if self.https:
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._ctx)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout  # used when it (re)connects
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def request(self, method: str, target: str, body: bytes | None, headers: dict[str, str],
                timeout: float | None) -> tuple[int, str, Message, bytes]:
        """(status, reason, headers, body) of one request; `target` is the path and query. `timeout`
        bounds the connect and each read. Connection errors propagate (OSError, http.client's
        HTTPException); the connection is then closed, so the thread's next request opens a new one."""
        conn = self._connection(timeout)
        try:
            conn.request(method, self.prefix + target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        return resp.status, resp.reason, resp.headers, data
