"""Micro-benchmark of the launcher log scan (controller/logscan.py, docs/architecture.md section 9.1):
MiB scanned per CPU second and the peak memory the scan allocates, over a log as large as the scan's
bound (LOG_SCAN_LIMIT_BYTES, 64 MiB) of short lines (a training's per-step output), of long lines,
and of one line with no newline at all. No I/O: the chunks are made in memory, 64 KiB each, as the
client hands them over.

    python -m bench.bench_logscan       # a table, then the JSON
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from collections.abc import Iterator

from controller import logscan
from reconcilers.failure import evidence

CHUNK = 64 * 1024
PRRTE = b"PRTE has lost communication with a remote daemon.\n"
LOGS = {
    "short lines (27 B)": b"".join(b"rank %d step %06d loss 0.12\n" % (i % 4, i) for i in range(2500)),
    "long lines (1 KiB)": (b"eval: " + b"x" * 1017 + b"\n") * 64,
    "no newline": b"y" * CHUNK,
}


def _stream(pattern: bytes, size: int) -> Iterator[bytes]:
    """`size` bytes of `pattern` in CHUNK-sized chunks (one object each time: only the scan allocates),
    then PRRTE's line, which the scan reaches only at the end."""
    chunk = (pattern * (CHUNK // len(pattern) + 1))[:CHUNK]
    for _ in range(size // CHUNK):
        yield chunk
    yield b"\n" + PRRTE


def run(size: int | None = None) -> dict:
    size = size or evidence.LOG_SCAN_LIMIT_BYTES
    results = []
    for name, pattern in LOGS.items():
        t0 = time.process_time()
        got = logscan.scan(_stream(pattern, size), evidence.first_cut_short, size + 2 * CHUNK)
        cpu = time.process_time() - t0
        tracemalloc.start()
        logscan.scan(_stream(pattern, size), evidence.first_cut_short, size + 2 * CHUNK)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert got.found is not None, got
        results.append({"log": name, "mib": round(got.read / 2**20, 1), "cpu_s": round(cpu, 3),
                        "mib_per_cpu_s": round(got.read / 2**20 / max(cpu, 1e-6)),
                        "peak_kib": round(peak / 1024)})
    return {"benchmark": "logscan", "python": sys.version.split()[0], "results": results}


def main() -> None:
    out = run()
    print(f"{'log':<22}{'MiB':>6}{'CPU s':>8}{'MiB/CPU s':>11}{'peak KiB':>10}")
    for r in out["results"]:
        print(f"{r['log']:<22}{r['mib']:>6}{r['cpu_s']:>8}{r['mib_per_cpu_s']:>11}{r['peak_kib']:>10}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
