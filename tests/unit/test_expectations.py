"""controller.expectations: a reconcile waits until the cache shows the operator's own writes."""

from __future__ import annotations

import pytest

from controller.expectations import Expectations, rv_at_least

KEY = ("jobs", "ns", "pi-launcher")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def obj(rv: str, uid: str = "u1", deleting: bool = False) -> dict:
    meta = {"resourceVersion": rv, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def exp(clock) -> Expectations:
    return Expectations(ttl=60, clock=clock)


@pytest.mark.parametrize("seen,written,ok", [
    ("10", "10", True), ("11", "10", True), ("9", "10", False), (None, "10", False), ("abc", "10", True),
    ("100", "99", True), ("99", "100", False),  # compared as integers, not as strings
    ("5", "opaque-rv", True), ("", "10", False), ("0", "0", True),
])
def test_rv_at_least(seen, written, ok):
    assert rv_at_least(seen, written) is ok


def test_nothing_expected_is_satisfied(exp):
    assert exp.satisfied("ns/pi") and exp.pending("ns/pi") == []


@pytest.mark.parametrize("cached,done", [
    (None, False), (obj("41"), False), (obj("42"), True), (obj("43"), True),
])
def test_written_object_waits_for_its_resource_version(exp, cached, done):
    exp.expect_object("ns/pi", KEY, "42")
    exp.observe("ns/pi", KEY, cached)
    assert exp.satisfied("ns/pi") is done


def test_non_integer_resource_versions_count_as_seen(exp):
    """Another storage's opaque rvs cannot be ordered: the first object seen satisfies the write."""
    exp.expect_object("ns/pi", KEY, "c2VlbiBpdA==")
    exp.observe("ns/pi", KEY, obj("b3RoZXI="))
    assert exp.satisfied("ns/pi")


@pytest.mark.parametrize("written", ["42", "opaque"])
def test_a_written_object_is_not_satisfied_by_its_deletion(exp, written):
    exp.expect_object("ns/pi", KEY, written)
    exp.observe("ns/pi", KEY, None)
    assert not exp.satisfied("ns/pi") and exp.pending("ns/pi") == [KEY]


@pytest.mark.parametrize(("written", "cache_rv", "done"), [
    ("42", "42", True),  # deleted right after our patch (e2e test_drift_is_repaired): the cache is past it
    ("42", "57", True),
    ("42", "41", False),  # the cache not yet at our write: the delete of an earlier object of that name
    ("42", "", False),  # the informer has not listed yet
    ("42", None, False),  # nothing known of the cache's progress
    ("opaque", "other", True),  # another storage's rvs cannot be ordered: counted as seen, as above
])
def test_a_written_object_gone_from_a_cache_past_the_write_is_observed(exp, written, cache_rv, done):
    """The cache no longer holds what we wrote: seen once its informer reached our write's
    resourceVersion (so the next pass repairs the delete at once, not after the ttl)."""
    exp.expect_object("ns/pi", KEY, written, quiet=True)
    exp.observe("ns/pi", KEY, None, cache_rv)
    assert exp.satisfied("ns/pi") is done


def test_an_object_without_a_resource_version_is_older_than_any_write(exp):
    exp.expect_object("ns/pi", KEY, "42")
    exp.observe("ns/pi", KEY, {"metadata": {"uid": "u1"}})
    assert not exp.satisfied("ns/pi")


@pytest.mark.parametrize("cached,done", [
    (obj("5"), False), (None, True), (obj("6", deleting=True), True), (obj("7", uid="u2"), True),
])
def test_deleted_object_waits_until_gone_deleting_or_replaced(exp, cached, done):
    exp.expect_gone("ns/pi", KEY, uid="u1")
    exp.observe("ns/pi", KEY, cached)
    assert exp.satisfied("ns/pi") is done


@pytest.mark.parametrize("cached,done", [
    (obj("5"), False), (obj("6", uid="u2"), False), (None, True), (obj("7", deleting=True), True),
])
def test_gone_without_a_uid_is_only_gone_or_deleting(exp, cached, done):
    exp.expect_gone("ns/pi", KEY)
    exp.observe("ns/pi", KEY, cached)
    assert exp.satisfied("ns/pi") is done


def test_an_observation_of_another_key_changes_nothing(exp):
    exp.expect_gone("ns/pi", KEY, uid="u1")
    exp.observe("ns/pi", ("jobs", "ns", "pi-worker"), None)
    exp.observe("ns/other", KEY, None)
    assert not exp.satisfied("ns/pi")


def test_every_pending_write_must_be_seen(exp):
    other = ("configmaps", "ns", "pi-config")
    exp.expect_object("ns/pi", KEY, "42")
    exp.expect_object("ns/pi", other, "43")
    exp.observe("ns/pi", KEY, obj("42"))
    assert not exp.satisfied("ns/pi") and exp.pending("ns/pi") == [other]
    exp.observe("ns/pi", other, obj("43"))
    assert exp.satisfied("ns/pi")


def test_owners_are_independent(exp):
    exp.expect_object("ns/a", KEY, "42")
    assert exp.satisfied("ns/b") and not exp.satisfied("ns/a")


def test_expired_expectations_give_way_to_the_cache(exp, clock):
    exp.expect_object("ns/pi", KEY, "42")
    clock.t += 59
    assert not exp.satisfied("ns/pi")
    clock.t += 2
    assert exp.satisfied("ns/pi") and exp.pending("ns/pi") == []


def test_ttl_counts_from_the_latest_expectation(exp, clock):
    exp.expect_object("ns/pi", KEY, "42")
    clock.t += 50
    exp.expect_object("ns/pi", ("configmaps", "ns", "pi-config"), "43")
    clock.t += 20  # the first is 70 s old, the second 20 s: still waiting for the second
    assert not exp.satisfied("ns/pi")
    clock.t += 41
    assert exp.satisfied("ns/pi")


def test_a_new_expectation_for_the_same_key_replaces_the_old(exp, clock):
    exp.expect_object("ns/pi", KEY, "42")
    exp.expect_gone("ns/pi", KEY, uid="u1")
    exp.observe("ns/pi", KEY, obj("50"))  # newer, but the delete is what is awaited now
    assert not exp.satisfied("ns/pi")
    exp.observe("ns/pi", KEY, None)
    assert exp.satisfied("ns/pi")


def test_forget(exp):
    exp.expect_object("ns/pi", KEY, "42")
    exp.expect_object("ns/other", KEY, "42")
    exp.forget("ns/pi")
    assert exp.satisfied("ns/pi") and exp.pending("ns/pi") == []
    assert not exp.satisfied("ns/other"), "forget drops one owner's expectations only"
    exp.forget("ns/never-seen")  # harmless


def test_observing_an_unexpected_object_is_harmless(exp):
    exp.observe("ns/pi", KEY, obj("1"))
    assert exp.satisfied("ns/pi")


# -- echo: an event that only shows our own write -----------------------------------------------------

MJ = ("mpijobs", "ns", "pi")


@pytest.mark.parametrize("event_rv,echo", [
    ("42", True),   # exactly what our write returned
    ("43", False),  # a later change: news, whoever made it
    ("41", False),  # an older state (a relist, a late event): not our write
    (None, False), ("", False),
])
def test_an_echo_is_the_exact_resource_version_written(exp, event_rv, echo):
    exp.expect_object("ns/pi", MJ, "42", quiet=True)
    assert exp.echo("ns/pi", MJ, event_rv) is echo
    assert exp.satisfied("ns/pi") is echo  # the echo counts as observed; nothing else does here


def test_nothing_written_is_no_echo(exp):
    assert not exp.echo("ns/pi", MJ, "42")
    exp.expect_object("ns/pi", KEY, "42")  # a create: its event is news (a plan may wait for the object)
    assert not exp.echo("ns/pi", KEY, "42")
    assert not exp.satisfied("ns/pi"), "left for the reconcile's own look at the cache"
    exp.expect_gone("ns/pi", MJ)
    assert not exp.echo("ns/pi", MJ, "42")  # a delete expected: any object seen is news


def test_an_echo_for_a_reconcile_put_off_enqueues(exp):
    """A reconcile that waited for the cache (deferred) must run once its writes show, even when
    the event that shows the last of them is an echo."""
    exp.expect_object("ns/pi", MJ, "42", quiet=True)
    exp.deferred("ns/pi")
    assert not exp.echo("ns/pi", MJ, "42")
    assert exp.satisfied("ns/pi")
    exp.expect_object("ns/pi", MJ, "43", quiet=True)
    assert exp.echo("ns/pi", MJ, "43")  # the mark went with the write it waited for


def test_an_echo_with_other_writes_pending(exp):
    exp.expect_object("ns/pi", MJ, "42", quiet=True)
    exp.expect_object("ns/pi", KEY, "40")
    assert exp.echo("ns/pi", MJ, "42")  # the child's own event, when it comes, enqueues
    assert exp.pending("ns/pi") == [KEY]
    exp.deferred("ns/pi")
    exp.expect_object("ns/pi", MJ, "44", quiet=True)
    assert not exp.echo("ns/pi", MJ, "44")  # a reconcile waits: enqueue, whatever else is pending


def test_satisfied_and_forget_clear_the_mark(exp):
    exp.deferred("ns/pi")
    assert exp.satisfied("ns/pi")  # nothing pending: the waiting reconcile runs now
    exp.expect_object("ns/pi", MJ, "42", quiet=True)
    assert exp.echo("ns/pi", MJ, "42")
    exp.deferred("ns/pi")
    exp.forget("ns/pi")
    exp.expect_object("ns/pi", MJ, "45", quiet=True)
    assert exp.echo("ns/pi", MJ, "45")


def test_echoes_of_owners_are_independent(exp):
    exp.expect_object("ns/a", MJ, "42", quiet=True)
    exp.deferred("ns/b")
    assert exp.echo("ns/a", MJ, "42")
    assert not exp.echo("ns/b", MJ, "42")
