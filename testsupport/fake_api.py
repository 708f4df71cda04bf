"""The API server as unit tests script it, for the parts that talk to it: the informers (lists and
watches), the executor (writes) and the controller over both. Not a stand-in for the API server's
behaviour (integration and e2e tests run the real one): each answer is the test's own.

- `request` answers a GET with the next of `list_pages` while there are any (an informer's list),
  anything else with the next of `answers` (the last one repeats), else with what `respond(method,
  path, body)` returns; an exception is raised, any other value returned; with none of these, an
  empty object at resourceVersion 1.
- `stream` (a watch) answers with the next of `watch_scripts`: a FakeStream, or an exception.
Every call is recorded: `calls` (method, path, body), `list_queries`, `watch_queries` (and the
watches' paths, `watch_paths`).
Every call is held to the operator's grants (client/permissions.py `everything`, or the `fence`
given): one outside them raises Unpermitted, as the operator's own RestClient does, so that every
unit test that drives the executor, the controller or the informers also checks that they send
nothing the manifests do not grant (issue 36 item 9).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import urllib3

from client import permissions

EMPTY = {"metadata": {"resourceVersion": "1"}}


class FakeStream:
    """Yields its events, then either ends (a normal close) or blocks until shut down."""

    def __init__(self, events: list, end: bool = True) -> None:
        self.events, self.end = events, end
        self.cut = threading.Event()

    def __iter__(self):
        for e in self.events:
            if isinstance(e, BaseException):
                raise e
            yield e
        if not self.end:
            self.cut.wait()
            raise urllib3.exceptions.ProtocolError("connection cut")

    def shutdown(self) -> None:
        self.cut.set()

    def close(self) -> None:
        self.cut.set()


class FakeApi:
    def __init__(self, *answers: Any, on_request: Callable[[], None] | None = None,
                 respond: Callable[[str, str, Any], Any] | None = None,
                 fence: permissions.Fence | None = None) -> None:
        self.fence = fence or permissions.everything()
        self.watch_paths: list[str] = []
        self.answers: list = list(answers)
        self.respond = respond
        self.list_pages: list = []
        self.watch_scripts: list = []
        self.calls: list[tuple[str, str, Any]] = []
        self.list_queries: list[dict] = []
        self.watch_queries: list[dict] = []
        self.on_request = on_request
        self.lock = threading.Lock()

    def request(self, method: str, path: str, *, query: dict | None = None, body: Any = None,
                content_type: str = "", timeout: float = 30, guard: Callable[[], None] | None = None,
                metadata_only: bool = False) -> Any:
        self.fence.check(method, path, query)
        if guard is not None:  # as RestClient: after the throttle, before sending
            guard()
        with self.lock:
            self.calls.append((method, path, body))
            if method == "GET":
                self.list_queries.append(dict(query or {}))
            if method == "GET" and self.list_pages:
                answer = self.list_pages.pop(0)
            elif self.answers:
                answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            elif self.respond is None:
                answer = EMPTY
            else:
                answer = None
        if answer is None:
            try:
                answer = self.respond(method, path, body)  # type: ignore[misc]
            except BaseException as e:  # raised below, as a scripted exception is
                answer = e
        if self.on_request:
            self.on_request()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def get_text(self, path: str, timeout: float = 30, query: dict | None = None) -> str:
        """As RestClient.get_text (/metrics): the answer as text."""
        answer = self.request("GET", path, query=query, timeout=timeout)
        return answer if isinstance(answer, str) else ""

    @contextlib.contextmanager
    def get_stream(self, path: str, timeout: float = 15, query: dict | None = None) -> Iterator[Iterator[bytes]]:
        """As RestClient.get_stream (a pod's log): the answer in chunks of 64 KiB."""
        answer = self.request("GET", path, query=query, timeout=timeout)
        data = (answer if isinstance(answer, str) else "").encode()
        yield iter([data[at:at + 65536] for at in range(0, len(data), 65536)])

    def stream(self, path: str, query: dict | None = None, timeout: float = 80) -> Any:
        self.fence.check("GET", path, {**(query or {}), "watch": True})
        with self.lock:
            self.watch_paths.append(path)
            self.watch_queries.append(dict(query or {}))
            script = self.watch_scripts.pop(0) if self.watch_scripts else FakeStream([], end=False)
        if isinstance(script, BaseException):
            raise script
        return script

    def writes(self) -> list[tuple[str, str, Any]]:
        """The calls that change something (not GET)."""
        return [c for c in self.calls if c[0] != "GET"]
