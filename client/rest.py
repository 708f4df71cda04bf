"""A thin REST transport over the kubernetes client's configuration: raw JSON in and out, a
client-side token bucket (client-go's --kube-api-qps/--kube-api-burst), and line-by-line watch
streams.

The generated model classes are not used: they are an order of magnitude slower than json.loads,
and the informers only need dicts. Nor is ApiClient.call_api, whose per-request serialization walk
of the body and refresh of the credentials were a fifth of the operator's CPU (docs/architecture.md
section 7.1). JSON in and out is orjson's: every watch event and response passes through here, and
orjson gives the same dicts as the standard library's decoder in about half its CPU. Requests go
over a keep-alive connection of the calling thread (client/connection.py: http.client, the
Configuration's TLS settings); watches, and every request of a configuration that transport does
not reproduce (a proxy, say), go through the kubernetes client's urllib3 pool.
Authentication (bearer tokens, exec plugins, the in-cluster token that rotates) is still the
kubernetes client's: its Configuration's auth settings, asked again every AUTH_REFRESH_SECONDS and
after any 401.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import kubernetes
import orjson
import urllib3
from prometheus_client import Counter

from client import connection
from client.errors import ApiError
from client.permissions import Fence
from client.ratelimit import TokenBucket

# How long an Authorization header is reused. Tokens that rotate (in-cluster, exec plugins) are
# renewed well ahead of their expiry, by minutes, so a few seconds of reuse never sends an expired one.
AUTH_REFRESH_SECONDS = 10.0

# The answer as a PartialObjectMetadata (apiVersion meta.k8s.io/v1: the object's metadata alone),
# else JSON of the whole object. The API server honours it for reads and writes alike (GET, POST,
# PATCH, PUT): a write's answer is then a third of the object or less, which neither the server
# encodes nor this client decodes (docs/architecture.md section 7.1).
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"

requests_total = Counter(
    "rest_client_requests_total", "API requests by method and HTTP status code", ["method", "code"]
)


def _dumps(body: Any) -> bytes:
    """`body` as compact JSON. orjson refuses what the standard library writes (integers beyond 64
    bits, keys that are not strings): such a body, which a client may send and the API server will
    judge, goes out as the standard library writes it."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    """Decoded JSON. orjson refuses a few things the standard library reads (a lone surrogate
    escape, a number beyond a double): those are read as the standard library reads them."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _query_string(query: dict | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in (query or {}).items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        out.append((k, str(v)))
    return out


class WatchStream:
    """The events of one watch response, decoded line by line. Closing it closes the response;
    `shutdown()` (any thread) breaks a read that is blocked on the socket."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self.response = response
        self._closed = False

    def __iter__(self) -> Iterator[dict]:
        return self._events()

    def _events(self) -> Iterator[dict]:
        buf = b""
        try:
            for chunk in self.response.stream(64 * 1024, decode_content=True):
                if b"\n" not in chunk:  # an event larger than a chunk: gather it
                    buf += chunk
                    continue
                # one split a chunk, not a slice of the rest per line (a chunk holds dozens of events)
                lines = (buf + chunk).split(b"\n")
                buf = lines.pop()
                for line in lines:
                    if line.strip():
                        yield _loads(line)
            if buf.strip():
                yield _loads(buf)
        finally:
            self.close()

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.response.shutdown()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Close first: a connection with unread watch data must not go back to the pool.
        with contextlib.suppress(Exception):
            self.response.close()
        with contextlib.suppress(Exception):
            self.response.release_conn()

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _body(raw: urllib3.BaseHTTPResponse) -> bytes:
    """The whole body of a response, its connection back in the pool; ApiError on a non-2xx."""
    try:
        data = raw.read()
    finally:
        raw.release_conn()
    if not 200 <= raw.status <= 299:
        raise ApiError.from_response(raw.status, data, raw.headers, raw.reason or "")
    return data


class RestClient:
    def __init__(self, api_client: kubernetes.client.ApiClient, qps: float = 20.0, burst: int = 30,
                 connections: connection.Connections | None = None, fence: Fence | None = None) -> None:
        self.api_client = api_client
        # What this client may send (client/permissions.py): the operator's process sets it, so that no
        # code path sends a request its RBAC does not grant; None for tools and tests.
        self.fence = fence
        self.qps, self.burst = qps, burst
        self.limiter = TokenBucket(qps, burst)
        self._auth: tuple[float, dict[str, str]] | None = None  # (when asked, headers)
        self._auth_lock = threading.Lock()
        # Built on first use (the configuration's host may be set after this client is made):
        # False when the configuration needs urllib3 for every request.
        self._connections: connection.Connections | bool | None = connections

    def _transport(self) -> connection.Connections | None:
        if self._connections is None:
            with self._auth_lock:
                if self._connections is None:
                    cfg = self.api_client.configuration
                    self._connections = connection.Connections(cfg) if connection.supported(cfg) else False
        return self._connections or None

    def _auth_headers(self) -> dict[str, str]:
        """The Authorization header of the configuration (none with client certificates), reused for
        AUTH_REFRESH_SECONDS: asking is a refresh of the credentials (kubeconfig or token file)."""
        now = time.monotonic()
        cached = self._auth
        if cached is not None and now - cached[0] < AUTH_REFRESH_SECONDS:
            return cached[1]
        with self._auth_lock:
            headers = {}
            for setting in self.api_client.configuration.auth_settings().values():
                if setting.get("in") == "header" and setting.get("value"):
                    headers[setting["key"]] = setting["value"]
            self._auth = (now, headers)
            return headers

    def forget_auth(self) -> None:
        """The next request asks the configuration for credentials again (after a 401)."""
        self._auth = None

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, qps: float = 20.0, burst: int = 30) -> RestClient:
        """From a kubeconfig file; with no path, the in-cluster config when running in a pod,
        else the default kubeconfig ($KUBECONFIG or ~/.kube/config)."""
        cfg = kubernetes.client.Configuration()
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        else:
            kubernetes.config.load_kube_config(config_file=path, client_configuration=cfg)
        # Enough pooled connections for the watches plus concurrent workers.
        cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, 64)
        cfg.retries = False
        api = kubernetes.client.ApiClient(configuration=cfg)
        api.user_agent = "mpijob-operator/0.1"
        return cls(api, qps=qps, burst=burst)

    def with_own_limiter(self, qps: float, burst: int) -> RestClient:
        """A client on the same configuration and connection pool with a token bucket of its own:
        leader election renews through one, so that reconciles that use up the controller's bucket
        never delay a renewal (docs/architecture.md section 3.2)."""
        return RestClient(self.api_client, qps=qps, burst=burst, connections=self._transport(), fence=self.fence)

    def _prepare(self, path: str, query: dict | None, body: Any, content_type: str,
                 guard: Callable[[], None] | None,
                 accept: str = "application/json") -> tuple[str, bytes | None, dict[str, str]]:
        """(path?query, body bytes, headers) of a call once the throttle lets it go and `guard` passed."""
        self.limiter.take()
        if guard is not None:  # after the throttle: what held when the call was made may not hold now
            guard()
        headers = {"Accept": accept, "User-Agent": self.api_client.user_agent, **self._auth_headers()}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = body if isinstance(body, bytes) else (
                body.encode() if isinstance(body, str) else _dumps(body))
        qs = _query_string(query)
        return (path + "?" + urlencode(qs) if qs else path), data, headers

    def _answered(self, method: str, status: int) -> None:
        requests_total.labels(method, str(status)).inc()
        if status == 401:
            self.forget_auth()

    def _exchange(self, method: str, path: str, query: dict | None, body: Any, content_type: str,
                  timeout: float, guard: Callable[[], None] | None, accept: str = "application/json") -> bytes:
        """The body of a 2xx answer to one call; ApiError on any other."""
        if self.fence is not None:
            self.fence.check(method, path, query)  # before the throttle: a refused call costs no token
        conns = self._transport()
        if conns is None:
            return _body(self._send(method, path, query, body, content_type, timeout, guard, accept))
        target, data, headers = self._prepare(path, query, body, content_type, guard, accept)
        try:
            status, reason, resp_headers, out = conns.request(method, target, data, headers, timeout or None)
        except Exception:
            requests_total.labels(method, "<error>").inc()
            raise
        self._answered(method, status)
        if not 200 <= status <= 299:
            raise ApiError.from_response(status, out, resp_headers, reason or "")
        return out

    def _send(self, method: str, path: str, query: dict | None, body: Any, content_type: str,
              timeout: Any, guard: Callable[[], None] | None = None,
              accept: str = "application/json") -> urllib3.BaseHTTPResponse:
        """One call through the kubernetes client's urllib3 pool (watches; configurations that
        client/connection.py does not reproduce); the response not yet read."""
        target, data, headers = self._prepare(path, query, body, content_type, guard, accept)
        url = self.api_client.configuration.host + target
        if isinstance(timeout, tuple):
            tmo = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            tmo = urllib3.Timeout(total=timeout) if timeout else None
        try:
            raw = self.api_client.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, timeout=tmo, preload_content=False, retries=False)
        except Exception:
            requests_total.labels(method, "<error>").inc()
            raise
        self._answered(method, raw.status)
        return raw

    def request(self, method: str, path: str, *, query: dict | None = None, body: Any = None,
                content_type: str = "application/json", timeout: float = 30,
                guard: Callable[[], None] | None = None, metadata_only: bool = False) -> dict:
        """One API call; returns the decoded JSON body ({} when empty). Raises ApiError on a non-2xx
        answer; connection errors propagate as they are (client.errors.CONNECTION_ERRORS). `guard` is
        called once the client's throttle lets the call go, just before it is sent; what it raises
        aborts the call. `metadata_only`: the caller reads only the answer's `metadata` (a write's
        resourceVersion, an object's owners and labels), so the server is asked for that alone
        (METADATA_ONLY); a server that cannot answer so sends the whole object, which has it too."""
        accept = METADATA_ONLY if metadata_only else "application/json"
        data = self._exchange(method.upper(), path, query, body, content_type, timeout, guard, accept)
        return _loads(data) if data else {}

    def get_text(self, path: str, timeout: float = 30, query: dict | None = None) -> str:
        """A GET of a non-JSON endpoint (the API server's /metrics); raises ApiError on a
        non-2xx."""
        data = self._exchange("GET", path, query, None, "application/json", timeout, None, "text/plain, */*")
        return data.decode("utf-8", "replace")

    @contextlib.contextmanager
    def get_stream(self, path: str, timeout: float = 15, query: dict | None = None) -> Iterator[Iterator[bytes]]:
        """A GET whose answer is handed over in chunks as they arrive, never held whole: a pod's log,
        scanned as it streams (controller/logscan.py). `timeout` bounds the connect and each read
        (urllib3's ReadTimeoutError); the caller bounds the whole. ApiError on a non-2xx; connection
        errors propagate. Leaving the block early closes the connection."""
        if self.fence is not None:
            self.fence.check("GET", path, query)
        raw = self._send("GET", path, query, None, "application/json", (timeout, timeout), accept="text/plain, */*")
        if not 200 <= raw.status <= 299:
            _body(raw)  # raises ApiError with the server's Status
        try:
            yield raw.stream(64 * 1024, decode_content=True)
        finally:
            with contextlib.suppress(Exception):
                raw.close()
            with contextlib.suppress(Exception):
                raw.release_conn()

    def stream(self, path: str, query: dict | None = None, timeout: float = 80) -> WatchStream:
        """A watch: GET `path?watch=true&...`; iterate the result for event dicts
        {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}. `timeout` is the read
        timeout: a stream silent for that long raises (urllib3 ReadTimeoutError)."""
        q = dict(query or {})
        q.setdefault("watch", True)
        if self.fence is not None:
            self.fence.check("GET", path, q)
        raw = self._send("GET", path, q, None, "application/json", (min(timeout, 30.0), timeout))
        if not 200 <= raw.status <= 299:
            _body(raw)  # raises ApiError with the server's Status
        return WatchStream(raw)
