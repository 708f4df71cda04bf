"""The import rules of docs/architecture.md section 2, kept by a test: which of the operator's
packages may import which, and that the pure planner does no I/O and reads no clock."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from testsupport.paths import ROOT

STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# Package -> the non-standard top-level modules it may import (itself included).
ALLOWED = {
    "reconcilers": {"reconcilers"},
    "client": {"client", "reconcilers", "kubernetes", "urllib3", "prometheus_client", "orjson"},
    "informers": {"informers", "client", "urllib3", "prometheus_client"},
    "controller": {"controller", "client", "informers", "reconcilers", "structlog", "tenacity", "cryptography",
                   "prometheus_client", "urllib3"},
}
# The standard library modules that do I/O, start threads or read a clock: never in the planner.
IO_MODULES = {"os", "sys", "io", "time", "socket", "ssl", "subprocess", "threading", "urllib", "http", "pathlib",
              "logging", "random", "uuid", "shutil", "tempfile", "select", "signal", "asyncio", "multiprocessing",
              "concurrent", "queue", "glob", "fileinput", "sqlite3", "secrets"}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter"}


def imports(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, at any depth (function-local imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_its_layer_may(package):
    bad = {f"{p.relative_to(ROOT)}: {m}" for p in files(package) for m in imports(p) - STDLIB - ALLOWED[package]}
    assert not bad, f"imports outside the rules of docs/architecture.md section 2: {sorted(bad)}"


def test_nothing_imports_the_controller_but_the_controller():
    for package in ("reconcilers", "client", "informers"):
        bad = [str(p.relative_to(ROOT)) for p in files(package) if "controller" in imports(p)]
        assert not bad, f"{package} must not import controller: {bad}"


def test_the_planner_does_no_io_and_reads_no_clock():
    bad = {f"{p.relative_to(ROOT)}: {m}" for p in files("reconcilers") for m in imports(p) & IO_MODULES}
    assert not bad, f"reconcilers/ is pure (time is an argument): {sorted(bad)}"
    calls = []
    for p in files("reconcilers"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCK_CALLS:
                calls.append(f"{p.relative_to(ROOT)}:{node.lineno} .{node.func.attr}()")
    assert not calls, f"reconcilers/ reads no clock (Inputs.now is the time): {calls}"


@pytest.mark.parametrize("rule, source, bad", [
    ("reconcilers", "import os\n", {"os"}),
    ("reconcilers", "def f():\n    from client import rest\n", {"client"}),
    ("informers", "from controller.executor import Executor\n", {"controller"}),
    ("client", "from informers.store import Store\n", {"informers"}),
    ("client", "from controller import metrics\n", {"controller"}),
])
def test_the_rules_catch_a_bad_import(tmp_path, rule, source, bad):
    path = tmp_path / "m.py"
    path.write_text(source)
    found = imports(path)
    assert (found - STDLIB - ALLOWED[rule]) | (found & IO_MODULES if rule == "reconcilers" else set()) == bad
