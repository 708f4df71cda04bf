"""A refused child in the plan (refusal.py): permanent -> Failed/ChildRefused until the spec changes,
transient -> Blocked while it lasts; one Warning Event per transition, naming the MPIJob field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconcilers import refusal as rf
from reconcilers import status as rst
from reconcilers.plan import plan
from reconcilers.types import Config, Inputs, Observed, is_permanent
from tests.unit.sim import NOW, KeyGen, apply_plan, at, mpijob

DUP = rf.Refusal(422, "Invalid", 'Job.batch "pi-launcher" is invalid: spec.template.spec.containers[1].name: '
                 'Duplicate value: "c"', "Job", "pi-launcher", 1,
                 (rf.Cause("spec.template.spec.containers[1].name", 'Duplicate value: "c"'),))
QUOTA = rf.Refusal(403, "Forbidden", 'pods "x" is forbidden: exceeded quota: q', "Job", "pi-worker", 1)
TOO_LARGE = rf.Refusal(413, "RequestEntityTooLarge", "the request is too large", "ConfigMap", "pi-config", 1)


@pytest.mark.parametrize(("kind", "name", "field", "want"), [
    ("Job", "pi-launcher", "spec.template.spec.containers[0].name",
     "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].name"),
    ("Job", "pi-worker", "spec.template.metadata.labels", "spec.mpiReplicaSpecs.Worker.template.metadata.labels"),
    ("StatefulSet", "pi-worker", "spec.template.spec.volumes[1].name",
     "spec.mpiReplicaSpecs.Worker.template.spec.volumes[1].name"),
    ("Job", "pi-worker", "spec.parallelism", "spec.mpiReplicaSpecs.Worker"),
    ("ConfigMap", "pi-config", "data", "spec.mpiReplicaSpecs.Worker.replicas"),
    ("ConfigMap", "pi-config", "", "spec.mpiReplicaSpecs.Worker.replicas"),
    ("Service", "pi", "metadata.name", "spec"),
])
def test_the_child_field_is_mapped_to_the_mpijob_field(kind, name, field, want):
    assert rf.mpijob_field(kind, name, field) == want


@pytest.mark.parametrize(("body", "want"), [
    (None, ()),
    ({"details": {"causes": [{"field": "a", "message": "m"}, "junk", {"reason": "FieldValueInvalid"}]}},
     (rf.Cause("a", "m"),)),
    ({"details": {"causes": "junk"}}, ()),
    ({"details": {"causes": [{"message": "only a message"}]}}, (rf.Cause("", "only a message"),)),
])
def test_causes_of_a_status_body(body, want):
    assert rf.causes_of(body) == want


@pytest.mark.parametrize(("code", "permanent"), [
    (400, True), (413, True), (422, True), (403, False), (404, False), (409, False), (429, False), (500, False),
    (503, False)])
def test_which_refusals_are_permanent(code, permanent):
    assert is_permanent(code) is permanent


def run(job, obs=None, refusal=None, now=NOW):
    return plan(Inputs(job, obs or Observed(), Config(), now, KeyGen(), refusal))


def cond(status, ctype):
    return rst.get_condition(status or {}, ctype)


def test_a_permanent_refusal_fails_the_mpijob_once_and_clears_with_a_new_generation():
    job = mpijob()
    job["metadata"]["generation"] = 1
    p = run(job, refusal=DUP)
    assert not p.creates and not p.patches
    failed = cond(p.status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "ChildRefused")
    assert "Duplicate value" in failed["message"]
    assert "spec.mpiReplicaSpecs.Launcher.template.spec.containers[1].name" in failed["message"]
    warnings = [e for e in p.events if e.type == "Warning"]
    assert len(warnings) == 1 and "Duplicate value" in warnings[0].message
    job2, obs = apply_plan(job, Observed(), p)
    again = run(job2, obs, refusal=DUP, now=at(30))
    assert again.writes == 0 and again.events == []  # per transition, not per retry
    # the spec edited: the controller drops the refusal; the plan clears Failed and creates again
    job2["metadata"]["generation"] = 2
    fixed = run(job2, obs, refusal=None, now=at(60))
    assert cond(fixed.status, "Failed") is None and "completionTime" not in fixed.status
    assert fixed.creates


def test_a_transient_refusal_shows_blocked_while_it_lasts_and_clears_when_it_passes():
    job = mpijob()
    p = run(job, refusal=QUOTA)
    assert p.creates  # still retried
    blocked = cond(p.status, "Blocked")
    assert (blocked["status"], blocked["reason"]) == ("True", "ChildRefused")
    assert "exceeded quota" in blocked["message"]
    assert [e.reason for e in p.events if e.type == "Warning"] == ["ChildRefused"]
    job2, obs = apply_plan(job, Observed(), replace(p, creates=[]))  # the creates were refused
    again = run(job2, obs, refusal=QUOTA, now=at(5))
    assert [e for e in again.events if e.type == "Warning"] == []
    assert again.status is None or cond(again.status, "Blocked")["status"] == "True"
    passed = run(job2, obs, refusal=None, now=at(10))
    assert cond(passed.status, "Blocked") is None
    assert cond(passed.status, "Failed") is None


def test_a_too_large_config_map_names_the_worker_count():
    p = run(mpijob(), refusal=TOO_LARGE)
    assert "fix spec.mpiReplicaSpecs.Worker.replicas" in cond(p.status, "Failed")["message"]


def test_the_same_refusal_is_recognised():
    assert rf.same(DUP, replace(DUP, generation=2))
    assert not rf.same(DUP, QUOTA) and not rf.same(None, DUP)


def quota(used: int) -> str:
    return (f'pods "pi-worker-0" is forbidden: exceeded quota: q, requested: pods=1, used: pods={used}, '
            "limited: pods=4")


# (case, the refusal met again, the same as QUOTA_AT_3?) A refusal is what was refused and why (kind,
# name, code, reason), not its wording: a quota's message carries the pods used, which move as other
# pods come and go (issue 36 item 8).
QUOTA_AT_3 = rf.Refusal(403, "Forbidden", quota(3), "Job", "pi-worker", 1)
REFUSAL_REASON = [
    ("the pods used moved", replace(QUOTA_AT_3, message=quota(2)), True),
    ("another server's wording", replace(QUOTA_AT_3, message="exceeded quota"), True),
    ("another generation", replace(QUOTA_AT_3, generation=2), True),
    ("another child", replace(QUOTA_AT_3, kind="Job", name="pi-launcher"), False),
    ("another kind", replace(QUOTA_AT_3, kind="StatefulSet"), False),
    ("another code", replace(QUOTA_AT_3, code=429, reason="TooManyRequests"), False),
    ("another reason, same code", replace(QUOTA_AT_3, reason="Unauthorized"), False),
]


@pytest.mark.parametrize(("case", "again", "same"), REFUSAL_REASON, ids=[c[0] for c in REFUSAL_REASON])
def test_refusal_reason_same_compares_what_the_refusal_is(case, again, same):
    assert rf.same(QUOTA_AT_3, again) is same
    assert rf.same(again, QUOTA_AT_3) is same


def test_a_finished_mpijob_is_not_blocked():
    job = mpijob()
    p = run(job, refusal=QUOTA)
    job2, obs = apply_plan(job, Observed(), replace(p, creates=[]))
    job2["status"]["conditions"].append({"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded",
                                         "message": "done", "lastTransitionTime": "2025-01-01T12:00:00Z"})
    done = run(job2, obs, refusal=QUOTA, now=at(5))
    assert cond(done.status, "Blocked") is None
