"""testsupport/builds.py: which background builds a selection of tests needs, and where each test goes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


@pytest.mark.parametrize("names,cached,rank", [
    (("kueue",), {"kueue"}, 0),  # a cached build holds nothing back
    (("kueue",), {"prometheus"}, builds.NAMES.index("kueue") + 1),
    (("operator-image", "prometheus"), {"prometheus"}, builds.NAMES.index("operator-image") + 1),
    (("operator-image", "prometheus"), set(builds.NAMES), 0),
])
def test_rank_ignores_the_cached_builds(names, cached, rank):
    assert builds.rank(names, cached) == rank


def _checkout(root: Path) -> Path:
    """A checkout's hack/ as far as the stamps see it: a few files, the builds' scripts among them."""
    for name, text in {"build-kueue.sh": "#!/bin/sh\nexit 0\n", "versions.sh": "KUEUE_VERSION=0.19.2\n",
                       "lib/common.sh": "cache=~/.cache\n"}.items():
        (root / "hack" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "hack" / name).write_text(text)
    (root / "hack" / "build-kueue.sh").chmod(0o755)
    return root


@pytest.mark.parametrize("change,want", [
    (lambda root, stamps: None, {"kueue"}),
    (lambda root, stamps: (root / "hack" / "versions.sh").write_text("KUEUE_VERSION=0.20.0\n"), set()),
    (lambda root, stamps: (root / "hack" / "lib" / "new.sh").write_text(""), set()),  # a file added
    (lambda root, stamps: (root / "hack" / "versions.sh").rename(root / "hack" / "lib" / "versions.sh"), set()),
    (lambda root, stamps: shutil.rmtree(stamps), set()),  # the cache emptied
    (lambda root, stamps: (stamps / "kueue").write_text(builds.fingerprint("prometheus", root)), set()),
    (lambda root, stamps: (root / "hack" / "__pycache__").mkdir(), {"kueue"}),  # not an input
], ids=["unchanged", "a file changed", "a file added", "a file moved", "no stamp", "another build's stamp",
        "a __pycache__"])
def test_a_stamped_build_is_cached_until_its_inputs_change(tmp_path, change, want):
    root, stamps = _checkout(tmp_path / "checkout"), tmp_path / "cache" / "builds-done"
    builds.record("kueue", True, root, stamps)
    change(root, stamps)
    assert builds.cached(["kueue", "prometheus"], root, stamps) == want  # prometheus: never stamped


@pytest.mark.parametrize("exit_code,want", [(0, {"kueue"}), (1, set())])
def test_run_stamps_a_build_that_succeeded_and_forgets_one_that_failed(tmp_path, exit_code, want):
    root, stamps = _checkout(tmp_path / "checkout"), tmp_path / "cache" / "builds-done"
    builds.record("kueue", True, root, stamps)  # an earlier build's stamp
    (root / "hack" / "build-kueue.sh").write_text(f"#!/bin/sh\nexit {exit_code}\n")
    with (tmp_path / "log").open("w") as log:
        assert builds.run(["kueue"], out=log, root=root, stamps=stamps) == exit_code
    assert builds.cached(["kueue"], root, stamps) == want


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
        groups = os.geteuid() == 0 and Path(f"/proc/{ours.pid}/autogroup").exists()
        if groups:  # each in a session of its own at the lowest priority, as the builds make theirs
            for p in (ours, other):
                builds._autogroup_nice(p.pid, 19)
            assert _autogroup(ours.pid) != _autogroup(other.pid) and _autogroup(other.pid).endswith(" nice 19")
        builds.hurry(ours.pid)
        builds.hurry(other.pid)
        builds.hurry(None)
        want = 0 if os.geteuid() == 0 else 19  # lowering a niceness needs root
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in group()} == {want}
        assert os.getpriority(os.PRIO_PROCESS, other.pid) == 19
        if groups:
            assert _autogroup(ours.pid).endswith(" nice 0"), _autogroup(ours.pid)
            assert _autogroup(other.pid).endswith(" nice 19"), _autogroup(other.pid)
    finally:
        for p in (ours, other):
            os.killpg(p.pid, 9)
            p.wait()


def _autogroup(pid: int) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().strip()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_needed_by_collects_the_selected_tests_and_names_their_builds_in_build_order():
    """hack/test.sh starts these before the cluster (start_early): what the selection needs, no more.
    In a process of its own, as hack/test.sh runs it (a pytest session inside this one would share
    its modules)."""
    select = "test_admitted_on_its_flavor_runs_to_succeeded or test_decodecheck_refuses_what_go_refuses"
    r = subprocess.run([sys.executable, "-c", "import sys; from testsupport import builds; "
                        "print(builds.needed_by(sys.argv[1:]))", "-k", select],
                       cwd=builds.ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "['decodecheck', 'kueue']"
