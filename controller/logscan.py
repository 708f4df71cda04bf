"""Scans a launcher's log as it streams, whole lines at a time, keeping none of it: memory stays
constant (a chunk and one partial line) whatever the log's size (docs/architecture.md section 9.1).
What a line means is reconcilers/failure/evidence.py's (`first_cut_short`); this module only cuts
the stream into whole lines and counts the bytes and the time against the read's bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# A line longer than this is judged by its first bytes: every line looked for is a short one of
# Open MPI's runtime, and a launcher that prints megabytes without a newline must not grow memory.
MAX_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Scanned:
    """What a scan found: `found` the first line matched (None: none); `read` the bytes scanned;
    `bound` which bound stopped it before the log's end ("bytes", "time"), or None (it reached the end)."""

    found: str | None
    read: int
    bound: str | None = None


def scan(chunks: Iterable[bytes], match: Callable[[str], str | None], limit: int,
         deadline: float | None = None, clock: Callable[[], float] = time.monotonic) -> Scanned:
    """Scans the first `limit` bytes of `chunks` for the first whole line `match` answers; stops at
    the first match, at `limit` bytes (bound "bytes", when the stream holds more) or once `clock()`
    passes `deadline` (bound "time"). A line split across chunks is joined before it is matched."""
    partial = bytearray()  # the start of a line whose end has not come yet
    read = 0
    for chunk in chunks:
        if not chunk:
            continue
        bounded = read + len(chunk) > limit
        chunk = chunk[:limit - read] if bounded else chunk
        read += len(chunk)
        cut = chunk.rfind(b"\n")
        if cut >= 0:  # the whole lines of this chunk, the partial one before them first
            found = match((bytes(partial) + chunk[:cut + 1]).decode("utf-8", "replace"))
            if found is not None:
                return Scanned(found, read)
            partial.clear()
        _keep(partial, chunk[cut + 1:])
        if bounded:
            return Scanned(_last(partial, match), read, "bytes")
        if deadline is not None and clock() > deadline:
            return Scanned(_last(partial, match), read, "time")
    return Scanned(_last(partial, match), read)


def _keep(partial: bytearray, more: bytes) -> None:
    """Adds `more` to the line being assembled, up to MAX_LINE_BYTES (the rest of a longer line is dropped)."""
    room = MAX_LINE_BYTES - len(partial)
    if room > 0:
        partial += more[:room]


def _last(partial: bytearray, match: Callable[[str], str | None]) -> str | None:
    """The line the stream ended on without a newline (or cut at a bound), matched too."""
    return match(partial.decode("utf-8", "replace")) if partial else None
