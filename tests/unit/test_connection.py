"""client/connection.py: one keep-alive connection per thread, reused while the server keeps it, a new
one once the server closed it or a request failed on it; chunked and `Connection: close` answers;
the host's path prefix; which configurations it leaves to urllib3. Against a real HTTP/1.1 server
on a local port (the API server's side of HTTP is not what is tested here)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from client import connection
from client.errors import CONNECTION_ERRORS, ApiError
from client.rest import RestClient
from testsupport.net import free_port, local_client, serving
from testsupport.waiting import wait_until


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.peers: list[tuple[str, int]] = []  # the client end of each request's connection
        self.paths: list[str] = []
        self.bodies: list[bytes] = []
        self.close_after: set[int] = set()  # request numbers answered with Connection: close
        self.drop_after: set[int] = set()  # request numbers after which the server just closes
        self.chunked = False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, payload: dict) -> None:
        srv: _Server = self.server  # type: ignore[assignment]
        n = len(srv.paths)
        srv.peers.append(self.client_address)
        srv.paths.append(self.path)
        body = json.dumps({**payload, "n": n}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if n in srv.close_after:
            self.send_header("Connection", "close")
            self.close_connection = True
        if n in srv.drop_after:
            self.close_connection = True
        if srv.chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(body), 7):
                part = body[i:i + 7]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.endswith("/missing"):
            self._answer(404, {"kind": "Status", "reason": "NotFound", "message": "not here"})
        else:
            self._answer(200, {"kind": "Thing"})

    def do_PATCH(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append(raw)  # type: ignore[attr-defined]
        got = json.loads(raw)
        self._answer(200, {"kind": "Thing", "got": got, "type": self.headers["Content-Type"]})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    with serving(_Server()) as srv:
        yield srv


def _client(srv: _Server, prefix: str = "") -> RestClient:
    return local_client(f"http://127.0.0.1:{srv.server_address[1]}{prefix}")


def test_one_connection_carries_a_threads_requests(server):
    c = _client(server)
    assert [c.request("GET", "/api")["n"] for _ in range(5)] == [0, 1, 2, 3, 4]
    assert len(set(server.peers)) == 1


def test_each_thread_has_its_own_connection(server):
    c = _client(server)
    c.request("GET", "/api")
    t = threading.Thread(target=lambda: c.request("GET", "/api"))
    t.start()
    t.join()
    c.request("GET", "/api")
    assert server.peers[0] == server.peers[2] != server.peers[1]


def test_a_connection_the_server_closed_is_replaced_not_used(server):
    """The server closes after answering request 1 (as an API server does with an idle or draining
    connection): the next request goes out on a new connection and succeeds."""
    server.close_after = {1}
    c = _client(server)
    for _ in range(4):
        c.request("GET", "/api")
    assert server.peers[0] == server.peers[1] != server.peers[2] == server.peers[3]


def test_a_connection_dropped_while_idle_is_replaced(server):
    """The server closes after request 0 without saying so (a restarted API server, a proxy's idle
    timeout): once its FIN is in, the next request does not fail on the dead socket."""
    server.drop_after = {0}
    c = _client(server)
    c.request("GET", "/api")
    conn = c._transport()._local.conn
    wait_until(lambda: connection._dropped(conn), timeout=5, interval=0.01, what="the server's FIN")
    assert c.request("GET", "/api")["n"] == 1
    assert server.peers[0] != server.peers[1]


def test_a_chunked_answer_is_read_whole_and_the_connection_kept(server):
    server.chunked = True
    c = _client(server)
    out = c.request("PATCH", "/apis/x", body={"spec": {"a": 1}}, content_type="application/merge-patch+json")
    assert out["got"] == {"spec": {"a": 1}} and out["type"] == "application/merge-patch+json"
    assert c.request("GET", "/api")["n"] == 1 and len(set(server.peers)) == 1


def test_a_non_2xx_is_an_api_error_with_the_servers_status_and_the_connection_kept(server):
    c = _client(server)
    with pytest.raises(ApiError) as e:
        c.request("GET", "/api/v1/namespaces/a/configmaps/missing")
    assert (e.value.status, e.value.reason, e.value.message) == (404, "NotFound", "not here")
    c.request("GET", "/api")
    assert len(set(server.peers)) == 1


def test_a_body_orjson_refuses_goes_out_as_the_standard_library_writes_it(server):
    """Integers beyond 64 bits (the CRD fuzz sends them; the API server judges them) and keys that
    are not strings: written by the standard library, as before orjson."""
    c = _client(server)
    c.request("PATCH", "/apis/x", body={"spec": {"n": -(2**63) - 1, "m": 2**70}, "k": {1: "a"}})
    assert json.loads(server.bodies[-1]) == {"spec": {"n": -(2**63) - 1, "m": 2**70}, "k": {"1": "a"}}


def test_what_orjson_refuses_to_read_is_read_as_the_standard_library_reads_it():
    from client.rest import _loads

    assert _loads(b'{"a":"\\ud800","b":1e400}') == {"a": "\ud800", "b": float("inf")}
    assert _loads(b'{"a":[1,2]}') == {"a": [1, 2]}
    with pytest.raises(ValueError):
        _loads(b'{"a":')


def test_the_hosts_path_and_the_query_reach_the_server(server):
    c = _client(server, prefix="/k8s/clusters/c1/")
    c.request("GET", "/api/v1/pods", query={"limit": 5, "watch": False, "labelSelector": "a=b,c"})
    assert server.paths == ["/k8s/clusters/c1/api/v1/pods?limit=5&watch=false&labelSelector=a%3Db%2Cc"]


def test_a_refused_connection_is_a_connection_error():
    c = local_client(f"http://127.0.0.1:{free_port()}")  # nobody listens there
    with pytest.raises(CONNECTION_ERRORS):
        c.request("GET", "/api", timeout=2)


def _cfg(**kw) -> SimpleNamespace:
    base = {"host": "https://10.0.0.1:6443", "proxy": None, "tls_server_name": None, "assert_hostname": None,
            "socket_options": None}
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("cfg, ours", [
    (_cfg(), True),
    (_cfg(host="http://127.0.0.1:8080"), True),
    (_cfg(host="https://rancher.example/k8s/clusters/c-1"), True),
    (_cfg(proxy="http://proxy:3128"), False),
    (_cfg(tls_server_name="kubernetes.default"), False),
    (_cfg(assert_hostname=False), False),
    (_cfg(socket_options=[(6, 1, 1)]), False),
    (_cfg(keep_alive=True), False),
    (_cfg(host="unix:///run/api.sock"), False),
])
def test_what_is_left_to_urllib3(cfg, ours):
    assert connection.supported(cfg) is ours
