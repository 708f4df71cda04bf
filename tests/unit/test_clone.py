"""reconcilers/clone.py: a deep copy of JSON-shaped data, equal to copy.deepcopy's."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconcilers.clone import clone

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=40)


@given(JSON)
def test_equal_and_independent(obj: object) -> None:
    out = clone(obj)
    assert out == obj
    if isinstance(obj, dict | list) and obj:
        assert out is not obj
        (out.clear() if isinstance(out, dict) else out.pop())
        assert obj  # the original is untouched


def test_nested_containers_are_new_objects() -> None:
    obj = {"spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["a"]}]}}}}
    out = clone(obj)
    out["spec"]["template"]["spec"]["containers"][0]["args"].append("b")
    assert obj["spec"]["template"]["spec"]["containers"][0]["args"] == ["a"]


class Custom(dict):
    pass


@pytest.mark.parametrize("obj", [Custom(a=[1]), {"a": Custom(b=1)}, {"a": object()}])
def test_what_marshal_refuses_is_deep_copied(obj: object) -> None:
    out = clone(obj)
    assert type(out) is type(obj)
    assert out is not obj
    if isinstance(obj, Custom):
        assert out == copy.deepcopy(obj)
