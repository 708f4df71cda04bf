"""reconcilers.diff.merge_patch: the RFC 7386 patch from one document to another; apply_merge_patch:
such a patch applied (reconcilers/news.py patch_echo), against the test simulator's own."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconcilers import diff
from reconcilers.diff import merge_patch
from tests.unit.sim import merge_patch as sim_merge_patch


@pytest.mark.parametrize("old,new,patch", [
    ({}, {}, {}),
    ({"a": 1}, {"a": 1}, {}),
    ({"a": 1}, {"a": 2}, {"a": 2}),
    ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
    ({"conditions": [{"type": "A"}]}, {"conditions": [{"type": "B"}]}, {"conditions": [{"type": "B"}]}),
    ({"replicaStatuses": {"Launcher": {"failed": 1, "active": 1}}},
     {"replicaStatuses": {"Launcher": {"active": 1}}},
     {"replicaStatuses": {"Launcher": {"failed": None}}}),
    ({"completionTime": "t"}, {"startTime": "s"}, {"completionTime": None, "startTime": "s"}),
])
def test_merge_patch_table(old, new, patch):
    assert merge_patch(old, new) == patch
    assert sim_merge_patch(old, patch) == new


# Values without nulls: RFC 7386 cannot express a null value, and statuses have none.
values = st.recursive(st.none().map(lambda _: 0) | st.booleans() | st.integers() | st.text(max_size=3),
                      lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=2), kids, max_size=3),
                      max_leaves=10)
docs = st.dictionaries(st.text(max_size=2), values, max_size=4)


@given(docs, docs)
def test_applying_the_patch_gives_the_new_document(old, new):
    assert sim_merge_patch(old, merge_patch(old, new)) == new


@given(docs, docs)
def test_apply_merge_patch_as_the_simulator_applies_it_leaving_the_target_alone(old, new):
    patch = merge_patch(old, new)
    before = copy.deepcopy(old)
    assert diff.apply_merge_patch(old, patch) == sim_merge_patch(old, patch) == new
    assert old == before


patch_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                            lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=2), kids,
                                                                                      max_size=3),
                            max_leaves=10)


@given(docs, st.dictionaries(st.text(max_size=2), patch_values, max_size=4))
def test_apply_merge_patch_of_any_patch(target, patch):
    """Any patch, nulls included (a null removes its key; a nested one a nested key)."""
    assert diff.apply_merge_patch(target, patch) == sim_merge_patch(target, patch)
