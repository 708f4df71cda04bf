"""The cached builds some tests need beyond the local cluster (Kueue, the gang scheduler, the MPI
images, Prometheus...), run in the background while the tests that need none of them run.

A test module names what it needs with `pytestmark = pytest.mark.builds("kueue", ...)`. At the
start of a session (conftest.py), the tests are put in the order of BUILDS (those that need nothing
first, stable otherwise), and one background process builds what the selected tests need, one
build after another, in that order, at the lowest CPU priority: the tests, which mostly wait on the
cluster, keep their share of the 2 cores, and the compilers take what is left. A test's fixture
asks for its build as it always did (hack/build-kueue.sh, hack/images/build.sh...); each script holds
a lock on its cache (`build_lock`, hack/lib/common.sh), so the fixture waits for the background
build and then finds the cache. On a warm cache every build is a cache hit of a second or less.
docs/development.md, "make test on a fresh machine", has the figures.

Each build done here leaves a stamp in the cache (`builds-done/<name>`, a fingerprint of its inputs),
so that the next session knows which builds are cached before it orders its tests (`cached`,
testsupport/order.py): a cached build holds no test back.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from testsupport.paths import CACHE, ROOT

MARKER = "builds"


@dataclass(frozen=True)
class Build:
    name: str
    argv: tuple[str, ...]
    needs_root: bool = False  # debootstrap and chroot: skipped elsewhere, as `make mpi-images` does


# The order the background process builds them in, and so the order of the tests that need them:
# the builds whose tests take longest come first (the real node's MPI images, then Kueue: the tests of
# testsupport/order.py's GROUPS, which start first and wait for them), so that the last build to
# finish is followed by the shortest tests. decodecheck leads: 34 s cold.
BUILDS: tuple[Build, ...] = (
    Build("decodecheck", ("hack/build-decodecheck.sh",)),
    Build("mpi-images", ("hack/images/build.sh", "mpis"), needs_root=True),
    Build("kueue", ("hack/build-kueue.sh",)),
    # the Kubeflow MPI Operator v0.8.2 (e2e/test_takeover.py upgrades from it): 19 CPU s cold (its tools module)
    Build("mpi-operator-go", ("hack/build-mpi-operator-go.sh",)),
    Build("scheduler-plugins", ("hack/build-scheduler-plugins.sh",)),
    Build("operator-image", ("hack/images/build.sh", "operator"), needs_root=True),
    Build("prometheus", ("hack/build-prometheus.sh",)),
)
NAMES = tuple(b.name for b in BUILDS)
_BY_NAME = {b.name: b for b in BUILDS}
LOG = ROOT / "build" / "test-builds.log"  # what the background builds print
STAMPS = CACHE / "builds-done"  # beside the builds' caches: emptying the cache forgets them too
EARLY_PID_ENV = "MPIJOB_EARLY_BUILDS_PID"  # hack/test.sh's background builds (start_early), for conftest.py


def needed(item_markers: list[tuple[str, ...]]) -> list[str]:
    """The builds the given tests' `builds` markers name, in BUILDS order; an unknown name is an error."""
    want = {name for names in item_markers for name in names}
    unknown = want - set(NAMES)
    if unknown:
        raise ValueError(f"pytest.mark.builds names unknown builds {sorted(unknown)}; known: {list(NAMES)}")
    return [n for n in NAMES if n in want]


def rank(names: tuple[str, ...], cached: frozenset[str] | set[str] = frozenset()) -> int:
    """Where a test goes: 0 if it needs no build but `cached` ones, else after the last build it
    needs (1-based) that is not cached (a cache hit takes a second: nothing to wait for)."""
    return max((NAMES.index(n) + 1 for n in names if n not in cached), default=0)


def tree_digest(root: Path = ROOT) -> str:
    """A digest of every file under hack/ (the scripts, versions.sh, the image definitions)."""
    digest = hashlib.sha256()
    files = sorted(p for p in (root / "hack").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fingerprint(name: str, root: Path = ROOT, tree: str | None = None) -> str:
    """The inputs of build `name`: every file under hack/ (`tree_digest`, given or computed) and its
    command line. Broader than what one build reads, so a change anywhere there makes every stamp
    stale; and narrower than what a script keys its cache on (a mirror variable, the compiler's
    version), so a stamp may outlive its cache. Either way only the order of the tests changes, never
    what runs: each test's fixture still asks its script for its build."""
    tree = tree if tree is not None else tree_digest(root)
    return hashlib.sha256(f"{tree}\0{chr(0).join(_BY_NAME[name].argv)}".encode()).hexdigest()


def record(name: str, done: bool, root: Path = ROOT, stamps: Path = STAMPS) -> None:
    """After build `name`: its stamp (its fingerprint) if it succeeded, else none."""
    stamp = stamps / name
    if not done:
        stamp.unlink(missing_ok=True)
        return
    stamps.mkdir(parents=True, exist_ok=True)
    partial = stamp.with_name(f".{name}.{os.getpid()}")  # renamed when whole: a reader never sees half
    partial.write_text(fingerprint(name, root) + "\n")
    partial.replace(stamp)


def cached(names: list[str] | tuple[str, ...], root: Path = ROOT, stamps: Path = STAMPS) -> set[str]:
    """The builds among `names` done here before with today's inputs (their stamp, `record`)."""
    def stamp(name: str) -> str:
        try:
            return (stamps / name).read_text().strip()
        except OSError:
            return ""
    tree = tree_digest(root)  # once for all the names: hack/ is read once per call
    return {name for name in names if stamp(name) == fingerprint(name, root, tree)}


def start(names: list[str], log_path: Path) -> subprocess.Popen | None:
    """The background process that builds `names` one after another, at the lowest CPU priority."""
    if not names:
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        # A session of its own, so that stop() reaches the compilers the scripts start, too.
        return subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "testsupport.builds", *names],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop(proc: subprocess.Popen | None) -> None:
    """Ends the background builds if they still run (the tests that needed them did not run: -x, ^C).
    A build stopped half-way leaves no cache entry: each script writes its output under a temporary
    name and renames it when done."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (ended, not yet reaped by its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def is_builds(pid: int) -> bool:
    """The process still runs and is still the builds' (not a process that took its id since)."""
    try:
        return b"testsupport.builds" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def hurry(pid: int | None) -> None:
    """A test waits for a build: the background builds (process group `pid`, start()) run at normal
    priority from now on. They start at the lowest to take only the CPU the tests leave; once the
    tests keep every core busy (make test's workers, docs/development.md) that is almost none, and the
    test would wait for idle time that never comes. Lowering a process's niceness needs root, as the
    MPI images' build does; elsewhere the builds keep their priority."""
    if pid is not None and is_builds(pid):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PGRP, pid, 0)
        _autogroup_nice(pid, 0)


def _autogroup_nice(pid: int | str, nice: int) -> None:
    """The niceness of the autogroup (the session) process `pid` is in. Where the kernel groups each
    session's processes (/proc/sys/kernel/sched_autogroup_enabled, on by default), the CPU is shared
    between sessions first and a process's own niceness counts only inside its session: the builds'
    session of their own (start()) took half the cores from the tests and the cluster's builds
    whatever their `nice -n 19`. Set as root only, for the same reason as hurry(): lowering it back
    needs root. Without autogroups the file does not exist and nothing changes."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def stop_pid(pid: int) -> None:
    """stop() for a process known by its id only: the one a pytest-xdist worker started (conftest.py),
    if that process still runs and is still the builds' (not a process that took its id since)."""
    if not is_builds(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's waited-for children so far: a build's cost on
    a CPU-bound machine, which its wall time beside the tests does not tell."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(names: list[str], out: TextIO | None = None, root: Path = ROOT, stamps: Path = STAMPS) -> int:
    """Builds `names` in BUILDS order, each to its cache, and stamps each one done (`record`); prints
    one line per build (to `out`, else stdout). The exit status is that of the first build that
    failed (the rest still run: their tests may pass)."""
    status = 0
    for name in needed([tuple(names)]):
        b = _BY_NAME[name]
        if b.needs_root and os.geteuid() != 0:
            print(f"[builds] {name}: skipped (needs root, as the real node does)", file=out, flush=True)
            continue
        t0, cpu0 = time.monotonic(), _children_cpu()
        # PIP_PYTHON: the operator image's wheel is built by this venv's pip, as `make image` does.
        r = subprocess.run([str(root / b.argv[0]), *b.argv[1:]], cwd=root, stdout=subprocess.DEVNULL, stderr=out,
                           env={**os.environ, "PIP_PYTHON": sys.executable})
        record(name, r.returncode == 0, root, stamps)
        print(f"[builds] {name}: exit {r.returncode} after {time.monotonic() - t0:.0f}s, "
              f"{_children_cpu() - cpu0:.0f} CPU s", file=out, flush=True)
        status = status or r.returncode
    return status


def item_needs(item) -> tuple[str, ...]:
    """The builds a collected test names in its `builds` markers."""
    return tuple(name for mark in item.iter_markers(MARKER) for name in mark.args)


class _Needs:
    """A pytest plugin that keeps what the collected tests need (needed_by)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def pytest_collection_finish(self, session) -> None:
        self.names = needed([item_needs(item) for item in session.items])


def needed_by(pytest_args: list[str]) -> list[str]:
    """The builds the tests that `pytest tests e2e <pytest_args>` selects need, found by collecting
    them (conftest.py starts nothing on --collect-only)."""
    import io

    import pytest

    plugin = _Needs()
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(["tests", "e2e", "-qq", "--collect-only", "-p", "no:cacheprovider", *pytest_args],
                    plugins=[plugin])
    return plugin.names


def start_early(pytest_args: list[str]) -> int:
    """make test, before it brings the local cluster up (hack/test.sh): the background builds of what
    the selected tests need and is not cached, started now, beside the cluster's own Go builds, so
    that the tests that wait for them find them done sooner (docs/development.md, "Where the time
    goes": in a cold run, the MPI images, Kueue and the Go operator were done before the first test).
    Returns their process id, 0 if there is nothing to build; conftest.py then uses this process
    instead of starting one."""
    names = [n for n in needed_by(pytest_args) if n not in cached(NAMES)]
    proc = start(names, LOG)
    if proc is not None:
        print(f"[builds] before the cluster, in the background: {', '.join(names)}", file=sys.stderr)
    return proc.pid if proc is not None else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--early"]:
        print(start_early(sys.argv[2:]))
        sys.exit(0)
    if os.geteuid() == 0:
        _autogroup_nice("self", 19)  # the lowest priority start() asks for, across sessions too
    sys.exit(run(sys.argv[1:] or list(NAMES)))
