"""Two `make bench` results side by side, as a Markdown table: each operator case and figure, before
-> after (the JSON files bench/run.py writes; BENCH_OPERATOR_ROOT=<older checkout> makes the first).

    python -m bench.compare before.json after.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.bench_operator import _get

FIGURES = [
    ("MPIJobs Running/s", "running_per_s"),
    ("bound: writes/s / cluster writes", "bound_own_writes"),
    ("bound with the Go operator's writes", "bound_go_writes"),
    ("first create -> last Running (s)", "all_running_s"),
    ("writes per MPIJob, API server, Events incl.", "apiserver.writes_per_mpijob"),
    ("  patch MPIJob/status", "apiserver.writes_per_mpijob_by_verb_kind.patch MPIJob/status"),
    ("  patch ConfigMap", "apiserver.writes_per_mpijob_by_verb_kind.patch ConfigMap"),
    ("cluster writes per MPIJob, every client", "cluster_writes_per_mpijob"),
    ("steady-state writes in 20 s", "steady_writes_total"),
    ("operator CPU ms per MPIJob", "operator_cpu_ms_per_mpijob"),
    ("operator peak RSS (MiB)", "operator_peak_rss_mib"),
]


def _cell(r: dict, path: str) -> object:
    v = _get(r, path)
    if v is None:  # a breakdown key absent is none of that write; a bound absent is not known
        return 0 if "_by_" in path else "-"
    return v


def table(before: dict, after: dict) -> str:
    b = {r["label"]: r for r in before["operator"]["results"]}
    a = {r["label"]: r for r in after["operator"]["results"]}
    labels = [k for k in b if k in a]
    lines = ["| figure | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for name, path in FIGURES:
        cells = [f"{_cell(b[k], path)} -> {_cell(a[k], path)}" for k in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cb, ca = before["cluster"], after["cluster"]
    lines.append("")
    lines.append(f"Cluster without the operator: pods Running/s {cb['pod_creation']['running_per_s']} -> "
                 f"{ca['pod_creation']['running_per_s']}, sustained writes/s "
                 f"{cb['sustained_writes']['writes_per_s']} -> {ca['sustained_writes']['writes_per_s']}.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(json.loads(Path(sys.argv[1]).read_text()), json.loads(Path(sys.argv[2]).read_text())))
