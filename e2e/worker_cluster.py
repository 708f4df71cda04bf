"""The second local control plane (hack/worker-cluster-up.sh) as a MultiKueue worker cluster: its
own etcd, API server on 127.0.0.1:6444, controller manager, scheduler and kwok nodes, state in
.cluster-worker/. Started by the tests that need it when it is not already up, and stopped after
only if they started it (WORKER_CLUSTER_DIR: another directory; KEEP_WORKER_CLUSTER=1: leave it up)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import yaml

from testsupport.paths import ROOT

HACK = ROOT / "hack"
WORKER_CLUSTER_DIR = Path(os.environ.get("WORKER_CLUSTER_DIR", ROOT / ".cluster-worker"))


class WorkerCluster:
    def __init__(self, directory: Path = WORKER_CLUSTER_DIR) -> None:
        self.dir = directory
        self.kubeconfig = str(directory / "kubeconfig")
        self.started_here = False
        self.start_s = 0.0

    def env(self) -> dict[str, str]:
        return {**os.environ, "WORKER_CLUSTER_DIR": str(self.dir)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60):
        r = subprocess.run([str(self.dir / "bin" / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
                           input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"worker cluster: kubectl {' '.join(args)} failed: {r.stderr.strip()}")
        return r

    def healthy(self) -> bool:
        if not (Path(self.kubeconfig).exists() and (self.dir / "bin" / "kubectl").exists()):
            return False
        return self.kubectl("get", "--raw", "/readyz", check=False, timeout=20).returncode == 0

    def up(self) -> None:
        if self.healthy():
            return
        t0 = time.monotonic()
        r = subprocess.run([str(HACK / "worker-cluster-up.sh")], capture_output=True, text=True, timeout=900,
                           env=self.env())
        assert r.returncode == 0, f"hack/worker-cluster-up.sh failed:\n{r.stderr[-3000:]}"
        self.start_s = time.monotonic() - t0
        self.started_here = True

    def down(self) -> None:
        subprocess.run([str(HACK / "worker-cluster-down.sh")], capture_output=True, text=True, timeout=300,
                       env=self.env(), check=False)

    def rss_mib(self) -> dict[str, float]:
        """Resident memory of each of its processes (by PID file), MiB."""
        out = {}
        for f in sorted((self.dir / "pids").glob("*.pid")):
            status = Path(f"/proc/{f.read_text().strip()}/status")
            if status.exists():
                kib = next(int(line.split()[1]) for line in status.read_text().splitlines()
                           if line.startswith("VmRSS:"))
                out[f.stem] = round(kib / 1024, 1)
        return out

    def server(self) -> str:
        return yaml.safe_load(Path(self.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]

    def flat_kubeconfig(self, server: str) -> str:
        """Its admin kubeconfig with the certificates inline (MultiKueue refuses file paths), for
        `server` (a relay in front of its API server: the certificate names 127.0.0.1 only)."""
        r = self.kubectl("config", "view", "--raw", "--flatten", "--minify")
        config = yaml.safe_load(r.stdout)
        config["clusters"][0]["cluster"]["server"] = server
        return yaml.safe_dump(config)
