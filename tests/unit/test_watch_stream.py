"""client/rest.py WatchStream: watch events decoded line by line, whatever the chunk boundaries."""

from __future__ import annotations

import json

import pytest

from client.rest import WatchStream


class Response:
    """A urllib3 response that streams the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.closed = chunks, False

    def stream(self, amt: int, decode_content: bool = True):
        yield from self.chunks

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


EVENTS = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}, "data": "x" * (i * 37)}} for i in range(12)]
BODY = b"".join(json.dumps(e).encode() + b"\n" for e in EVENTS)


@pytest.mark.parametrize("size", [1, 7, 64, 300, 1000, len(BODY)])
def test_every_event_once_in_order(size: int) -> None:
    resp = Response([BODY[i:i + size] for i in range(0, len(BODY), size)])
    assert list(WatchStream(resp)) == EVENTS
    assert resp.closed


def test_blank_lines_skipped_and_a_last_line_without_newline_decoded() -> None:
    body = b"\n" + json.dumps(EVENTS[0]).encode() + b"\n\n" + json.dumps(EVENTS[1]).encode()
    assert list(WatchStream(Response([body[:5], body[5:]]))) == EVENTS[:2]
