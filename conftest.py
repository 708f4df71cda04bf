"""Root conftest: the local-cluster fixtures (tests/cluster_fixtures.py) serve tests/ and e2e/ alike,
the cached builds some tests need run in the background while the others run
(testsupport/builds.py), and `make test`'s two phases (hack/test.sh): the tests side by side in
pytest-xdist workers, each module whole on one worker, then the `exclusive` ones alone
(docs/development.md, "make test: two phases")."""

from __future__ import annotations

import os
import sys

import pytest

from testsupport import builds, group_times, order
from testsupport import kubectl as kubectl_support
from testsupport.order import GROUPS
from testsupport.paths import CLUSTER_DIR, ROOT

pytest_plugins = ["tests.cluster_fixtures"]
BUILDS_LOG = builds.LOG
_PROC = pytest.StashKey()  # the background builds' process
_UNITS: dict[str, group_times.Unit] = {}  # where this run's time went, per scheduling unit (controller)
EXCLUSIVE = "exclusive"
PHASES = ("all", "concurrent", EXCLUSIVE)
# The builds cached when the session starts (builds.cached): the controller finds them once and hands
# them to its workers (pytest_configure_node), whose orders must be the same (xdist checks it).
_CACHED = pytest.StashKey()
CACHED_INPUT = "cached_builds"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--phase", choices=PHASES, default="all",
                     help="all: every test (the default); concurrent: all but the `exclusive` ones (make test's "
                          "first phase, under pytest-xdist); exclusive: only those (its second phase, serial)")


def _worker() -> str | None:
    """This process's pytest-xdist worker id (gw0, gw1...), or None: the controller, or no xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER")


_needs = builds.item_needs


def _cached(config: pytest.Config) -> frozenset[str]:
    """The builds already cached: a worker's are its controller's; a controller or a serial run reads
    the stamps once, before any build of this session (gw0 starts them after collecting)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return frozenset(workerinput[CACHED_INPUT])
    if _CACHED not in config.stash:
        config.stash[_CACHED] = frozenset(builds.cached(builds.NAMES))
    return config.stash[_CACHED]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput[CACHED_INPUT] = sorted(_cached(node.config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("phase")
    if phase != "all":
        chosen = [(i.get_closest_marker(EXCLUSIVE) is not None) == (phase == EXCLUSIVE) for i in items]
        dropped = [i for i, keep in zip(items, chosen, strict=True) if not keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i, keep in zip(items, chosen, strict=True) if keep]
    # Stable. Under pytest-xdist, the order of the units handed to the workers (testsupport/order.py):
    # the GROUPS first, then by the builds they wait for (a test waits for its build,
    # pytest_runtest_protocol; a cached one is no wait), then the longest units first. A serial run
    # only puts the tests that wait for a build after the others.
    cached = _cached(config)
    if _worker() is None:
        items.sort(key=lambda item: builds.rank(_needs(item), cached))
    else:
        items.sort(key=lambda item: order.key(item.nodeid, _needs(item), cached))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's loadscope scheduling with order.group() as the scope: a module's tests on one worker, in
    their order, its module-scoped fixtures (a Kueue, a second scheduler, a Deployment) made once, as
    in a serial run; the modules of one GROUPS entry one after another on one worker. (Its
    `xdist_group` marker cannot do it under pytest 9: xdist 3.8 renames the item through `_nodeid`,
    which pytest 9 no longer reads, and the marker is silently ignored.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return order.group(nodeid)

    return ModuleGroups(config, log)


def _pid_file(config: pytest.Config) -> object:
    """Where the worker that starts the background builds writes its process id, for the controller
    to stop it at the end: one file per run (xdist's testrunuid)."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID") or config.getoption("testrunuid", None)
    return ROOT / "build" / f"test-builds.{uid}.pid" if uid else None


def pytest_configure(config: pytest.Config) -> None:
    # The controller names the run, so that it finds the file its worker gw0 writes (_pid_file).
    if _worker() is None and config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None) \
            and not config.getoption("testrunuid", None):
        config.option.testrunuid = os.urandom(8).hex()


def _early_pid() -> int | None:
    """The background builds hack/test.sh started before the cluster (builds.start_early), if they
    still run: they belong to hack/test.sh, which stops them; this session only hurries them."""
    try:
        pid = int(os.environ.get(builds.EARLY_PID_ENV, ""))
    except ValueError:
        return None
    return pid if builds.is_builds(pid) else None


def pytest_collection_finish(session: pytest.Session) -> None:
    # Every worker collects the same tests: only gw0 (or a run without xdist) starts the builds, unless
    # hack/test.sh's still run (a test that waits builds what they have not reached: pytest_runtest_protocol).
    if session.config.option.collectonly or _worker() not in (None, "gw0") or _early_pid() is not None:
        return
    names = builds.needed([_needs(item) for item in session.items])
    if names:
        print(f"\n[builds] in the background, for the tests at the end: {', '.join(names)} (log: {BUILDS_LOG})",
              file=sys.stderr if _worker() else sys.stdout)
    proc = builds.start(names, BUILDS_LOG)
    session.config.stash[_PROC] = proc
    pid_file = _pid_file(session.config)
    if proc is not None and _worker() is not None and pid_file is not None:
        pid_file.write_text(str(proc.pid))


_READY: set[str] = set()  # the builds this process saw done


def _builds_pid(config: pytest.Config) -> int | None:
    """The background builds' process: hack/test.sh's, started here, or by worker gw0 (its pid file)."""
    early = _early_pid()
    if early is not None:
        return early
    proc = config.stash.get(_PROC, None)
    if proc is not None:
        return proc.pid
    pid_file = _pid_file(config)
    try:
        return int(pid_file.read_text()) if pid_file is not None else None
    except (OSError, ValueError):
        return None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Before a test that needs a build, and outside its timeout (pytest-timeout's hook runs inside
    this one): the build done. Workers side by side reach such a test sooner than a serial run, maybe
    while the background process still compiles (a cold cache): the test would then wait for it
    inside its 600 s. Each build script waits for the background's lock, then finds its cache; a
    cache hit takes under a second, once per process and build."""
    want = [name for name in builds.needed([_needs(item)]) if name not in _READY]
    if want:
        BUILDS_LOG.parent.mkdir(parents=True, exist_ok=True)
        builds.hurry(_builds_pid(item.config))
        with BUILDS_LOG.open("a") as log:
            print(f"[builds] {item.nodeid} waits for: {', '.join(want)}", file=log, flush=True)
            builds.run(want, out=log)
        _READY.update(want)
    yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _worker() is not None:
        # to the controller (pytest_testnodedown): this worker's kubectl calls
        getattr(session.config, "workeroutput", {})["kubectl"] = dict(kubectl_support.SPENT)
        return  # the builds outlive the worker that started them: the controller stops them
    builds.stop(session.config.stash.get(_PROC, None))
    pid_file = _pid_file(session.config)
    if pid_file is not None and pid_file.exists():
        builds.stop_pid(int(pid_file.read_text()))
        pid_file.unlink()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The controller (or a run without xdist) sees every worker's reports: it keeps the times.
    if _worker() is None:
        node = getattr(report, "node", None)  # the xdist worker that ran it
        group_times.add(_UNITS, order.group(report.nodeid), report.when, report.duration, report.start, report.stop,
                        node.gateway.id if node is not None else "")


def _unit_kind(unit: str) -> str:
    """What docs/development.md's table sums a unit under: its GROUPS entry, else its directory."""
    return f"group {unit}" if unit in GROUPS else unit.rsplit("/", 1)[0]


_KUBECTL = {"calls": 0, "cpu_s": 0.0, "reads": 0, "read_cpu_s": 0.0}  # the workers' reads, summed by the controller
_CPU_AT_START = group_times.machine_cpu()  # read once, when pytest loads this file
_PIDS = CLUSTER_DIR / "pids"  # the cluster's processes (hack/cluster-up.sh)
_CLUSTER_CPU_AT_START = group_times.process_cpu(_PIDS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    for key, value in getattr(node, "workeroutput", {}).get("kubectl", {}).items():
        _KUBECTL[key] = _KUBECTL.get(key, 0) + value


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _worker() is not None or not _UNITS:
        return
    terminalreporter.section("where the time went, per scheduling unit (testsupport/order.py GROUPS)")
    for line in [*group_times.table(_UNITS), "", *group_times.by_kind(_UNITS, _unit_kind)]:
        terminalreporter.write_line(line)
    spent = _KUBECTL if _KUBECTL["calls"] or _KUBECTL["reads"] else kubectl_support.SPENT  # workers, or this process
    busy, total = (now - then for now, then in zip(group_times.machine_cpu(), _CPU_AT_START, strict=True))
    terminalreporter.write_line(
        f"\nkubectl: {spent['calls']} calls, {spent['cpu_s']:.0f} CPU seconds; reads in the tests' processes "
        f"instead: {spent['reads']}, {spent['read_cpu_s']:.0f} CPU seconds; the machine: "
        f"{busy:.0f} of {total:.0f} CPU seconds busy (every process, the cluster's included)")
    spent = group_times.cpu_spent(_CLUSTER_CPU_AT_START, group_times.process_cpu(_PIDS))
    if spent:
        terminalreporter.write_line(
            f"of which the cluster's processes: {sum(s for _, s in spent):.0f} CPU seconds ("
            + ", ".join(f"{name} {s:.0f}" for name, s in spent) + ")")
