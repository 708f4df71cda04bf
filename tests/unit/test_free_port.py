"""testsupport/net.py free_port(): the ports it hands out, across every process on this machine (make
test's pytest-xdist workers), are never handed out twice while a process may still be about to bind
one. Before, each caller took what bind(0) gave: a port freed a moment ago, which the kernel may give
the next caller, in this process or another worker's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from testsupport.paths import ROOT

N = 300  # per process: with ~28,000 ephemeral ports, two bare bind(0) series of 300 meet almost surely


def _ports_of(n: int, env: dict[str, str]) -> subprocess.Popen:
    code = f"import json; from testsupport.net import free_port; print(json.dumps([free_port() for _ in range({n})]))"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)


def test_two_processes_are_never_handed_the_same_port(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # a registry of this test's own
    procs = [_ports_of(N, env), _ports_of(N, env)]
    a, b = (json.loads(p.communicate(timeout=120)[0]) for p in procs)
    assert len(set(a)) == len(a) and len(set(b)) == len(b), "one process was handed a port twice"
    assert not set(a) & set(b), f"handed to both processes: {sorted(set(a) & set(b))[:10]}"
