"""hack/gen_crd.py: OpenAPI v3 definitions made into a structural CRD schema (docs/architecture.md
section 6.1). The committed CRD itself is checked against the pinned release by
tests/integration/test_crd_fuzz.py."""

from __future__ import annotations

import re

import pytest

from testsupport.paths import load_hack_script

gen_crd = load_hack_script("gen_crd")

REF = "#/components/schemas/"
DEFS = {
    "io.k8s.api.core.v1.Port": {"type": "object", "required": ["containerPort"], "properties": {
        "containerPort": {"type": "integer", "format": "int32", "default": 0, "description": "x"},
        "protocol": {"type": "string", "default": "TCP"}}},
    "io.k8s.api.core.v1.Thing": {"type": "object", "description": "dropped", "properties": {
        "ports": {"type": "array", "items": {"$ref": REF + "io.k8s.api.core.v1.Port"},
                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                  "x-kubernetes-patch-strategy": "merge"},
        "limits": {"type": "object", "additionalProperties": {
            "$ref": REF + "io.k8s.apimachinery.pkg.api.resource.Quantity"}},
        "port": {"allOf": [{"$ref": REF + "io.k8s.apimachinery.pkg.util.intstr.IntOrString"}], "default": {}},
        "meta": {"allOf": [{"$ref": REF + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
        "big": {"type": "integer", "format": "int64"}}},
    "io.k8s.api.core.v1.Loop": {"type": "object", "properties": {"me": {"$ref": REF + "io.k8s.api.core.v1.Loop"}}},
    "io.k8s.api.core.v1.BadKey": {"type": "object", "properties": {"xs": {
        "type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}},
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"]}}},
}


def test_definitions_become_structural():
    out = gen_crd.Generator(DEFS).definition("io.k8s.api.core.v1.Thing")
    text = repr(out)
    assert "$ref" not in text and "description" not in text and "patch-strategy" not in text
    ports = out["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    port = ports["items"]["properties"]
    assert port["protocol"]["default"] == "TCP", "a list-map key keeps its default"
    assert "default" not in port["containerPort"], "other defaults are dropped"
    assert (port["containerPort"]["minimum"], port["containerPort"]["maximum"]) == (-(2**31), 2**31 - 1)
    assert out["properties"]["limits"]["additionalProperties"]["x-kubernetes-int-or-string"] is True
    assert out["properties"]["port"]["maximum"] == 2**31 - 1
    assert set(out["properties"]["meta"]["properties"]) == {
        "name", "generateName", "namespace", "labels", "annotations", "finalizers"}
    assert "minimum" not in out["properties"]["big"]


def test_recursion_and_unkeyed_list_maps_are_refused():
    with pytest.raises(ValueError, match="recursive"):
        gen_crd.Generator(DEFS).definition("io.k8s.api.core.v1.Loop")
    with pytest.raises(ValueError, match="neither required nor defaulted"):
        gen_crd.Generator(DEFS).definition("io.k8s.api.core.v1.BadKey")


@pytest.mark.parametrize("q", ["1", "500m", "1.5", ".5", "5.", "+1", "-1", "1Ki", "2Gi", "1E", "1Ei", "1e3",
                               "1E-3", "1e+999", "1k", "0"])
def test_quantity_pattern_accepts_what_go_parses(q):
    assert re.match(gen_crd.QUANTITY_PATTERN, q)


@pytest.mark.parametrize("q", ["lots", "", " 1", "1 ", "1e1.5", "1e1000", "1e-100000000", "1KiB", "0x10", "1K",
                               "1.0.0", "1e"])
def test_quantity_pattern_refuses_what_go_refuses_or_hangs_on(q):
    assert not re.match(gen_crd.QUANTITY_PATTERN, q)
