"""The Kubeflow MPI Operator's command line, accepted with its meaning (docs/architecture.md,
"Compatibility"), so this operator's image runs in upstream's Deployment unchanged:

- Go's flag package takes `-flag` and `--flag` alike: single-dash long flags are read as double-dash.
- upstream flags map onto ours: `--kubeConfig` (= `--kubeconfig`), `--master`, `--lock-namespace`
  (upstream always elects a leader: leader election on, Lease in that namespace), `--monitoring-port`
  (`/metrics` on that port; 0 disables, as upstream), `--controller-queue-rate-limit` and
  `--controller-queue-burst` (= `--queue-qps`, `--queue-burst`), `--version`; `--namespace`,
  `--threadiness`, `--kube-api-qps`, `--kube-api-burst`, `--cluster-domain` have the same names;
  `$KUBEFLOW_NAMESPACE` is the default namespace, as upstream.
- klog's flags: `-v=N` with N >= 4 means `--log-level=debug`; the others (`-alsologtostderr`,
  `-logtostderr`, `-log_dir`, ...) have no counterpart (logs go to stderr always) and are accepted
  and ignored; the operator logs once which.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

# klog's flags (k8s.io/klog/v2 InitFlags): name -> takes a value (False: a Go bool flag).
KLOG_FLAGS: dict[str, bool] = {
    "alsologtostderr": False, "logtostderr": False, "add_dir_header": False, "one_output": False,
    "skip_headers": False, "skip_log_headers": False, "log_dir": True, "log_file": True,
    "log_file_max_size": True, "stderrthreshold": True, "vmodule": True, "log_backtrace_at": True,
}
KLOG_DEBUG_VERBOSITY = 4  # klog's convention: V(4) and up is debug output
_SINGLE_DASH_LONG = re.compile(r"^-[A-Za-z][A-Za-z0-9_-]+(=.*)?$")


def normalize_argv(argv: list[str]) -> list[str]:
    """`-alsologtostderr` -> `--alsologtostderr`, `-v=4` -> `--v=4` (Go's flag syntax); nothing after
    `--`, and `-h` stays help."""
    out: list[str] = []
    rest = False
    for arg in argv:
        if rest or arg == "--":
            rest = True
        elif _SINGLE_DASH_LONG.match(arg) or arg == "-v" or arg.startswith("-v="):
            arg = "-" + arg
        out.append(arg)
    return out


def _go_bool(text: str) -> bool:
    """A Go bool flag's value (strconv.ParseBool)."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"want a boolean, got {text!r}")


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"want a port 0-65535, got {value}")
    return value


def add_flags(p: argparse.ArgumentParser) -> None:
    """The upstream flags that are not aliases of ours (those are added where ours are)."""
    up = p.add_argument_group("Kubeflow MPI Operator flags (accepted with their upstream meaning)")
    up.add_argument("--master", default="", help="the API server's address; overrides the kubeconfig's")
    up.add_argument("--lock-namespace", dest="upstream_lock_namespace", default=None,
                    help="upstream: the namespace of the leader election lock; turns leader election on")
    up.add_argument("--monitoring-port", dest="upstream_monitoring_port", type=_port, default=None,
                    help="upstream: serve /metrics on this port (0: off); overrides --metrics-bind-address")
    up.add_argument("--version", dest="show_version", action="store_true", help="print the version and exit")
    up.add_argument("--v", dest="upstream_v", type=int, default=None, help="klog verbosity: 4 and up is debug")
    for name, takes_value in KLOG_FLAGS.items():
        if takes_value:
            up.add_argument(f"--{name}", dest=f"klog_{name}", default=None, help=argparse.SUPPRESS)
        else:
            up.add_argument(f"--{name}", dest=f"klog_{name}", nargs="?", const="true", type=_go_bool,
                            default=None, help=argparse.SUPPRESS)


def overrides(a: argparse.Namespace) -> dict[str, Any]:
    """What the upstream flags given mean for our Options (only the ones given)."""
    out: dict[str, Any] = {}
    if a.upstream_lock_namespace is not None:
        out["leader_elect"] = True
        out["leader_election_namespace"] = a.upstream_lock_namespace
    if a.upstream_monitoring_port is not None:
        out["metrics_bind_address"] = f":{a.upstream_monitoring_port}" if a.upstream_monitoring_port else "0"
    if a.upstream_v is not None and a.upstream_v >= KLOG_DEBUG_VERBOSITY:
        out["log_level"] = "debug"
    out["ignored_flags"] = tuple(f"--{name}" for name in KLOG_FLAGS if getattr(a, f"klog_{name}") is not None)
    return out
