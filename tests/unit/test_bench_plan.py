"""`make bench`'s planner benchmark plays an MPIJob to its steady state before it times the zero-write
plan. A child kind it does not file under its Observed slot (the NetworkPolicy, issue 37, was filed
as the workers) keeps the plan writing, and `make bench` stopped at its first step."""

from __future__ import annotations

import pytest

from bench import bench_plan
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs


@pytest.mark.parametrize("backend", bench_plan.BACKENDS)
@pytest.mark.parametrize("workers", [1, 64])
def test_bench_plan_reaches_a_steady_state_of_zero_writes(backend, workers):
    job, obs = bench_plan.steady_state(bench_plan.mpijob(workers), backend, workers)
    assert obs.network_policy is not None and obs.workers["kind"] != "NetworkPolicy"
    p = plan(Inputs(job, obs, Config(worker_backend=backend), bench_plan.NOW, lambda: bench_plan.KEY))
    assert p.writes == 0
