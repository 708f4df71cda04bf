"""plan() over MPIJobs drawn from the CRD's schema (crd_strategy.py): it never raises, refuses with
InvalidSpec or plans children that converge. `make fuzz` runs it with FUZZ_EXAMPLES examples."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from reconcilers import status as rst
from reconcilers.plan import managed_by_us, plan
from reconcilers.types import Config, Inputs, Observed
from reconcilers.validation import validate
from tests.unit.crd_strategy import mpijobs
from tests.unit.sim import BACKENDS, NOW, KeyGen, apply_plan

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def plan_of(job, backend, observed=None):
    return plan(Inputs(job, observed or Observed(), Config(worker_backend=backend), NOW, KeyGen()))


@FUZZ
@given(job=mpijobs(), backend=st.sampled_from(BACKENDS))
def test_plan_of_any_admitted_mpijob_never_raises_and_converges(job, backend):
    errors = validate(job)
    p = plan_of(job, backend)
    if not managed_by_us(job, Config().controller_name):
        assert p.writes == 0 and not p.events  # another controller's MPIJob
        return
    if errors:
        assert not p.creates and not p.patches and not p.deletes
        assert rst.get_condition(p.status, "Failed")["reason"] == "InvalidSpec"
        return
    kinds = [c.obj["kind"] for c in p.creates]
    assert kinds.count("Job") <= 2 and "ConfigMap" in kinds, kinds
    job2, obs = apply_plan(job, Observed(), p)
    assert plan_of(job2, backend, obs).writes == 0


def test_the_generator_reaches_an_mpijob_without_a_worker_spec():
    """The crash of issue #14 part 2: the generator must produce it, and plan() must handle it.
    `find` searches until it meets one (its draws depend on the process's hash seed, so a fixed
    number of examples could miss it by chance) and fails if thousands of draws never do."""

    def no_worker(job) -> bool:
        specs = job["spec"]["mpiReplicaSpecs"]
        return "Launcher" in specs and "Worker" not in specs and not validate(job)

    job = find(mpijobs(), no_worker, settings=settings(
        max_examples=5000, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]))
    for backend in BACKENDS:
        assert plan_of(job, backend).creates


@FUZZ
@given(job=mpijobs(with_status=True), backend=st.sampled_from(BACKENDS))
def test_deadline_overflow_plan_of_any_admitted_mpijob_and_status_never_raises(job, backend):
    """A status as anyone with status access may write it (startTime, completionTime from year 1 to
    9999, any condition) beside any spec the CRD admits (int64 deadlines): plan() answers, and a
    second plan of what it wrote raises nothing either."""
    p = plan_of(job, backend)
    if p.status is not None:
        job = {**job, "status": p.status}
        assert rst.get_condition(p.status, "Created") or rst.get_condition(p.status, "Failed")
    plan_of(job, backend)
