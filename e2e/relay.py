"""A TCP relay between the operator and the API server, to cut the network from outside the
operator (as client-go's tests do with a proxy): `cut()` resets every open connection and refuses
new ones, `restore()` accepts again on the same port. TLS passes through untouched."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a dropped route or a dead peer's stack would."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class Relay:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._listener: socket.socket | None = None
        self.port = 0
        self._listen()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _listen(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self.port = ls.getsockname()[1]
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True, name="relay-accept").start()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return  # the listener was closed: cut
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                live = self._listener is ls  # accepted just before a cut: cut it too
                if live:
                    self._conns.append((client, up))
            if not live:
                _reset(client)
                _reset(up)
                continue
            threading.Thread(target=self._pump, args=(client, up), daemon=True, name="relay-pump").start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 1.0)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            _reset(a)
            _reset(b)
            with self._lock, contextlib.suppress(ValueError):
                self._conns.remove((a, b))

    def cut(self) -> None:
        """Every open connection reset, new ones refused (nothing listens on the port)."""
        with self._lock:
            ls, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if ls is not None:
            # shutdown first: close alone leaves a thread blocked in accept() holding the port open
            with contextlib.suppress(OSError):
                ls.shutdown(socket.SHUT_RDWR)
            ls.close()
        for a, b in conns:
            _reset(a)
            _reset(b)

    def restore(self) -> None:
        with self._lock:
            if self._listener is not None:
                return
        self._listen()

    def close(self) -> None:
        self.cut()
