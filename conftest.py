"""Root conftest: the local-cluster fixtures (tests/cluster_fixtures.py) serve tests/ and e2e/ alike,
and the cached builds some tests need run in the background while the others run
(testsupport/builds.py)."""

from __future__ import annotations

import pytest

from testsupport import builds
from testsupport.paths import ROOT

pytest_plugins = ["tests.cluster_fixtures"]
BUILDS_LOG = ROOT / "build" / "test-builds.log"
_PROC = pytest.StashKey()  # the background builds' process


def _needs(item: pytest.Item) -> tuple[str, ...]:
    return tuple(name for mark in item.iter_markers(builds.MARKER) for name in mark.args)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable: the tests that need no build keep their order and come first.
    items.sort(key=lambda item: builds.rank(_needs(item)))


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    names = builds.needed([_needs(item) for item in session.items])
    if names:
        print(f"\n[builds] in the background, for the tests at the end: {', '.join(names)} (log: {BUILDS_LOG})")
    session.config.stash[_PROC] = builds.start(names, BUILDS_LOG)


def pytest_sessionfinish(session: pytest.Session) -> None:
    builds.stop(session.config.stash.get(_PROC, None))

