"""Where make test's time went, per scheduling unit (a test module, or a GROUPS entry of
testsupport/order.py): how many tests, the sum of their own times (setup, call and teardown: what one worker
spent on the unit), and the span from its first test's start to its last test's end (when it ran
beside the others). Printed at the end of each phase, and summed per kind of test (the real node's
GROUPS, Kueue, the other e2e modules, integration, unit); docs/development.md's table is made from it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Unit:
    tests: int = 0
    busy: float = 0.0  # seconds: the sum of its tests' setup, call and teardown
    start: float | None = None  # epoch seconds of its first test's setup
    stop: float | None = None  # epoch seconds of its last test's teardown
    worker: str = ""


def add(units: dict[str, Unit], name: str, when: str, duration: float, start: float, stop: float,
        worker: str) -> None:
    unit = units.setdefault(name, Unit())
    unit.busy += duration
    unit.tests += when == "call"
    unit.start = start if unit.start is None else min(unit.start, start)
    unit.stop = stop if unit.stop is None else max(unit.stop, stop)
    unit.worker = unit.worker or worker


def table(units: dict[str, Unit], top: int = 25) -> list[str]:
    """The units by their end, latest first (the last to end is the critical path), then the rest
    summed in one line."""
    if not units:
        return []
    begin = min(u.start for u in units.values() if u.start is not None)
    ranked = sorted(units.items(), key=lambda kv: -(kv[1].stop or 0))
    lines = [f"{'unit':58} {'worker':6} {'tests':>5} {'busy s':>7} {'from s':>7} {'to s':>7}"]
    for name, u in ranked[:top]:
        lines.append(f"{name[:58]:58} {u.worker:6} {u.tests:5d} {u.busy:7.0f} "
                     f"{(u.start or begin) - begin:7.0f} {(u.stop or begin) - begin:7.0f}")
    rest = [u for _, u in ranked[top:]]
    if rest:
        lines.append(f"{f'({len(rest)} more units)':58} {'':6} {sum(u.tests for u in rest):5d} "
                     f"{sum(u.busy for u in rest):7.0f}")
    return lines


def by_kind(units: dict[str, Unit], kind: Callable[[str], str]) -> list[str]:
    """Per kind of unit (`kind` names it from the unit's name): units, tests, busy seconds, and the
    span from the first start to the last end among them."""
    kinds: dict[str, list[Unit]] = {}
    for name, unit in units.items():
        kinds.setdefault(kind(name), []).append(unit)
    if not kinds:
        return []
    begin = min(u.start for u in units.values() if u.start is not None)
    lines = [f"{'kind':24} {'units':>5} {'tests':>5} {'busy s':>7} {'from s':>7} {'to s':>7}"]
    for name, group in sorted(kinds.items(), key=lambda kv: -max(u.stop or 0 for u in kv[1])):
        starts = [u.start for u in group if u.start is not None]
        stops = [u.stop for u in group if u.stop is not None]
        lines.append(f"{name:24} {len(group):5d} {sum(u.tests for u in group):5d} {sum(u.busy for u in group):7.0f} "
                     f"{min(starts, default=begin) - begin:7.0f} {max(stops, default=begin) - begin:7.0f}")
    return lines


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds this machine has spent since boot, every core summed (/proc/stat's
    first line: user nice system idle iowait irq softirq steal, in clock ticks)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


def process_cpu(pids_dir: Path) -> dict[str, float]:
    """CPU seconds (user + system, its own, not its children's) of each process whose id hack/
    cluster-up.sh keeps in `pids_dir` (<name>.pid): where the machine's busy seconds go besides the
    tests. A process that ended, or a stale file, counts nothing."""
    hz = os.sysconf("SC_CLK_TCK")
    spent: dict[str, float] = {}
    for pid_file in sorted(pids_dir.glob("*.pid")):
        try:
            fields = Path(f"/proc/{int(pid_file.read_text())}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        spent[pid_file.stem] = (int(fields[11]) + int(fields[12])) / hz  # utime, stime (stat fields 14, 15)
    return spent


def cpu_spent(before: dict[str, float], after: dict[str, float]) -> list[tuple[str, float]]:
    """What each process spent between two `process_cpu` readings, most first; a process that started
    between them counts from zero, one that ended is left out."""
    spent = {name: now - before.get(name, 0.0) for name, now in after.items()}
    return sorted(spent.items(), key=lambda kv: -kv[1])
