"""testsupport/builds.py: which background builds a selection of tests needs, and where each test goes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from testsupport import builds


@pytest.mark.parametrize("markers,want", [
    ([], []),
    ([()], []),
    ([("prometheus",), ("kueue",)], ["kueue", "prometheus"]),  # in build order, not in test order
    ([("operator-image", "prometheus"), ("kueue",), ("kueue",)], ["kueue", "operator-image", "prometheus"]),
])
def test_needed_is_every_named_build_once_in_build_order(markers, want):
    assert builds.needed(markers) == want


def test_an_unknown_build_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown builds \['kueu'\]; known: \['decodecheck'"):
        builds.needed([("kueu",)])


@pytest.mark.parametrize("names,rank", [
    ((), 0),
    (("decodecheck",), 1),
    (("prometheus", "operator-image"), len(builds.BUILDS)),  # after the last build it needs
])
def test_rank_puts_a_test_after_the_last_build_it_needs(names, rank):
    assert builds.rank(names) == rank


def test_every_build_script_exists_and_is_executable():
    for b in builds.BUILDS:
        script = builds.ROOT / b.argv[0]
        assert script.is_file() and script.stat().st_mode & 0o111, script


def test_nothing_to_build_starts_no_process(tmp_path):
    assert builds.start([], tmp_path / "log") is None
    builds.stop(None)  # and stopping nothing is a no-op


def test_stop_pid_ends_the_builds_a_worker_started_and_nothing_else():
    """Under pytest-xdist, worker gw0 starts the background builds and the controller stops them by
    their process id (conftest.py): the builds' process group ends, a process that is not the
    builds' (an id taken since) is left alone."""
    import subprocess
    import sys

    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    ours = subprocess.Popen([*sleeper, "testsupport.builds"], start_new_session=True)
    other = subprocess.Popen(sleeper, start_new_session=True)
    try:
        builds.stop_pid(ours.pid)
        assert ours.wait(timeout=30) != 0
        builds.stop_pid(other.pid)
        assert other.poll() is None, "a process that is not the builds' was stopped"
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_hurry_gives_the_builds_and_their_children_normal_priority_and_nothing_else():
    """A test that waits for a build raises the background builds (started at `nice -n 19`) to normal
    priority, with the processes they started (a compiler): with every core busy they would
    otherwise get almost no CPU. A process that is not the builds' keeps its priority."""
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); " \
            "time.sleep(120)"
    ours = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", child, "testsupport.builds"],
                            start_new_session=True)
    other = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "import time; time.sleep(120)"],
                             start_new_session=True)
    try:
        group = lambda: [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == ours.pid]  # noqa: E731
        deadline = time.monotonic() + 10
        while len(group()) < 2:  # the builds' process and the one it started
            assert time.monotonic() < deadline, group()
            time.sleep(0.05)
        builds.hurry(ours.pid)
        builds.hurry(other.pid)
        builds.hurry(None)
        want = 0 if os.geteuid() == 0 else 19  # lowering a niceness needs root
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in group()} == {want}
        assert os.getpriority(os.PRIO_PROCESS, other.pid) == 19
    finally:
        for p in (ours, other):
            os.killpg(p.pid, 9)
            p.wait()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
