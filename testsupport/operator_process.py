"""The operator as a separate process (`python -m controller`) for one namespace of the local
cluster, its output in a log file: what the e2e tests, the benchmarks and the demo each run.
`Operator` is the e2e tests' preset: debug logs and leader election on a Lease of its own.

    op = OperatorProcess(kubeconfig, "job", "ns", Path("op.log"), extra=("--leader-elect",))
    op.wait_ready(); op.metric("mpi_operator_jobs_successful_total"); op.stop()
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path

from testsupport.net import free_port
from testsupport.paths import ROOT

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> list[Sample]:
    """Prometheus text format -> (name, labels, value) samples."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def sum_by(samples: Iterable[Sample], name: str, label: str) -> dict[str, float]:
    """The values of `name` summed per value of `label`."""
    out: dict[str, float] = {}
    for n, labels, value in samples:
        if n == name:
            key = labels.get(label, "")
            out[key] = out.get(key, 0.0) + value
    return out


def proc_stats(pid: int) -> dict:
    """CPU seconds (user+system) and memory of a process, from /proc (psutil is not a dependency)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value
    kib = lambda key: int(status[key].split()[0])  # noqa: E731
    # fields[0] is the state (field 3 of stat): utime and stime are fields 14 and 15
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / CLK_TCK,
            "rss_mib": round(kib("VmRSS") / 1024, 1), "hwm_mib": round(kib("VmHWM") / 1024, 1)}


class LoggedProcess:
    """A child process whose output goes to one log file: started, checked, measured, stopped, and
    its log's tail for error messages. `what` names it in those messages."""

    what = "the process"

    def _start(self, args: list[str], log_path: Path, **popen) -> None:
        self.args, self.log_path = args, log_path
        self._log = open(log_path, "a")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, **popen)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.what} exited with {self.proc.returncode}; log {self.log_path}:\n{self.tail()}")

    def stats(self) -> dict:
        return proc_stats(self.proc.pid)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode

    def tail(self, n: int = 30) -> str:
        with contextlib.suppress(ValueError):
            self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


class OperatorProcess(LoggedProcess):
    """`python -m controller` for one namespace with /metrics and the probes on free local ports."""

    what = "the operator"

    def __init__(self, kubeconfig: str, backend: str, namespace: str, log_path: Path,
                 extra: Iterable[str] = (), root: Path = ROOT) -> None:
        """`root`: the checkout whose operator runs (`make bench`'s BENCH_OPERATOR_ROOT: an older one)."""
        self.metrics_port, self.health_port = free_port(), free_port()
        args = [sys.executable, "-m", "controller", f"--kubeconfig={kubeconfig}",
                f"--worker-backend={backend}", f"--namespace={namespace}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}", *extra]
        # Only the kubeconfig given counts; POD_NAME is the leader election identity.
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "POD_NAMESPACE")}
        env.update(PYTHONUNBUFFERED="1", POD_NAME=f"op-{uuid.uuid4().hex[:6]}")
        self._start(args, log_path, cwd=root, env=env)

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        """(status, body) of a GET on the operator; status 0 when it does not answer."""
        port = port or (self.metrics_port if path == "/metrics" else self.health_port)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_ready(self, timeout: float = 90) -> float:
        """Seconds until /readyz answered 200 (caches synced)."""
        t0 = time.monotonic()
        while self.get("/readyz")[0] != 200:
            self.check_alive()
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"the operator not ready after {timeout}s; log {self.log_path}:\n{self.tail()}")
            time.sleep(0.1)
        return time.monotonic() - t0

    def metrics(self) -> list[Sample]:
        code, text = self.get("/metrics")
        if code != 200:
            raise RuntimeError(f"operator /metrics answered {code}: {text[:200]}")
        return parse_metrics(text)

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        return sum(v for n, ls, v in self.metrics() if n == name and labels.items() <= ls.items())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


class Operator(OperatorProcess):
    """The operator for one test namespace: readable debug logs, leader election on a Lease of its
    own (or `lease`, to make replicas compete)."""

    def __init__(self, kubeconfig: str, backend: str, namespace: str, log_path: Path, extra: tuple = (),
                 lease: str | None = None) -> None:
        super().__init__(kubeconfig, backend, namespace, log_path, (
            "--log-format=console", "--log-level=debug", "--leader-elect",
            "--leader-election-namespace=mpi-operator", f"--leader-election-id={lease or 'e2e-' + namespace}",
            *extra))
