"""Where the operator's CPU goes during a benchmark run: py-spy samples the thread of the operator
process that holds the GIL (`py-spy record --gil --format raw`: one line per distinct stack,
`frame;frame;... count`), which is the Python CPU time: a thread blocked on a socket or a lock holds
no GIL and is not counted, as a wall-clock sample of every thread would count it. (C code that lets
the GIL go, TLS encryption for one, is not seen either: a few per cent.) This module sums the samples

- by what the innermost frame does (a category: JSON decode, deep copies, logging, TLS, ...), the
  self time; and
- by the project's own modules anywhere on the stack, the time spent in or under each.

    prof = Profiler(pid, Path("op.raw")); ...; prof.stop(); summarize(Path("op.raw"))
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::(?P<line>\d+))?\)$")

# innermost frame's file (a suffix or a package directory) -> category; the first match counts
CATEGORIES = (
    ("json decode", ("json/decoder.py", "json/__init__.py:loads", "json/scanner.py")),
    ("json encode", ("json/encoder.py",)),
    ("deep copy", ("copy.py",)),
    ("logging (structlog)", ("structlog/",)),
    ("logging (stdlib)", ("logging/",)),
    ("hashing", ("hashlib.py", "hmac.py")),
    ("TLS and sockets", ("ssl.py", "socket.py", "selectors.py")),
    ("HTTP (urllib3, http.client)", ("urllib3/", "http/client.py", "email/")),
    ("kubernetes client", ("kubernetes/",)),
    ("prometheus client", ("prometheus_client/",)),
    ("YAML", ("yaml/",)),
    ("threading and queues", ("threading.py", "queue.py")),
)
PROJECT = ("controller/", "informers/", "reconcilers/")


def py_spy() -> str | None:
    """py-spy from the virtualenv beside this interpreter, or PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Profiler:
    """`py-spy record` on a running process until stop(); the raw stacks in `out`."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        exe = py_spy()
        if exe is None:
            raise RuntimeError("py-spy not found: make venv installs it (the test extra)")
        self.out = out
        self._log = open(out.with_suffix(".log"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "-o", str(out),
                                      "--rate", str(rate), "--nonblocking", "--gil"], stdout=self._log,
                                     stderr=subprocess.STDOUT)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self.proc.wait(60)
        finally:
            self._log.close()


def parse_frame(frame: str) -> tuple[str, str]:
    """'Thread.run (threading.py:982)' -> ('Thread.run', 'threading.py')."""
    m = _FRAME.match(frame.strip())
    return (m["func"], m["file"]) if m else (frame, "")


def category(func: str, file: str) -> str:
    for name, patterns in CATEGORIES:
        for pat in patterns:
            path, _, fn = pat.partition(":")
            if (path in file or file.endswith(path)) and (not fn or fn == func):
                return name
    mod = project_module(file)
    if mod:
        return "own code: " + mod
    return "other: " + (file.rsplit("/", 2)[-2] if "/" in file else file or func)


def project_module(file: str) -> str | None:
    for pkg in PROJECT:
        i = file.find(pkg)
        if i >= 0:
            return file[i:].removesuffix(".py").replace("/", ".")
    return None


def summarize(raw: Path, top: int = 12) -> dict:
    """{'samples': n, 'self': [(category, share)...], 'inclusive': [(module, share)...]} (shares of all
    samples, largest first)."""
    self_time: Counter = Counter()
    inclusive: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [parse_frame(f) for f in stack.split(";")]
        self_time[category(*frames[-1])] += n
        for mod in {m for _, f in frames if (m := project_module(f))}:
            inclusive[mod] += n
    share = lambda c: [(k, round(v / total, 3)) for k, v in c.most_common(top)] if total else []  # noqa: E731
    return {"samples": total, "self": share(self_time), "inclusive": share(inclusive)}


def render(summary: dict, title: str) -> str:
    lines = [f"{title}: {summary['samples']} samples of the thread holding the GIL"]
    lines.append("  self time, by what the innermost frame does:")
    lines += [f"    {v * 100:5.1f} %  {k}" for k, v in summary["self"]]
    lines.append("  time in or under the project's modules:")
    lines += [f"    {v * 100:5.1f} %  {k}" for k, v in summary["inclusive"]]
    return "\n".join(lines)
