"""Writes the MPIJob CRD: hack/crd/mpijobs.base.yaml with every `x-generate-from: <definition>` node
replaced by that definition of the pinned Kubernetes release's OpenAPI v3 document, made structural.

Run through hack/gen-crd.sh (`make crd`), which finds the OpenAPI document in the pinned
k8s.io/kubernetes module. Why not `x-kubernetes-preserve-unknown-fields` on the pod templates: the API
server then stores templates that no Go client can decode (a string `nodeSelector`, `cpu: lots`), and
one such MPIJob makes every informer of MPIJobs in the cluster fail to list (docs/architecture.md,
"Compatibility").

The rules of a structural schema (apiextensions.k8s.io/v1) this applies:
- no `$ref`: every reference is inlined (the pod template has no recursive type);
- IntOrString -> `x-kubernetes-int-or-string: true`, bounded to int32 like Go's intstr;
- Quantity -> int-or-string with a pattern that accepts only what resource.ParseQuantity parses (fast);
- Time -> a date-time string; ObjectMeta (of templates) -> the fields a template may set;
- int32 fields get int32 bounds (Go refuses to decode 2^31 into an int32);
- descriptions and defaults are dropped (size; the API server defaults pods itself), except the
  defaults of list-map keys, which a CRD requires (`ports[].protocol: TCP`);
- `x-kubernetes-patch-*` and `x-kubernetes-unions` have no meaning in a CRD and are dropped.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml

MARKER = "x-generate-from"
REF_PREFIX = "#/components/schemas/"
INT32 = (-(2**31), 2**31 - 1)

# What resource.ParseQuantity parses, quickly: the canonical regular expression of the Quantity
# type, but with an integer exponent of at most 3 digits. Go parses the exponent with
# strconv.ParseInt, so `1e1.5` and a 20-digit exponent fail in every Go client although the usual
# CRD pattern (controller-gen's) lets them through; and it truncates the exponent to int32, then
# computes with it: `1e-100000000` or `1e999999999999999999` keep a Go client busy for seconds to
# hours per object (the fuzz test found them). No real quantity needs an exponent beyond 999.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,3}))?$"
)

# The part of ObjectMeta a pod template may carry (what the Job and StatefulSet controllers copy to
# pods); the rest (uid, resourceVersion, timestamps, managedFields...) is set by the API server on
# real objects and is pruned here, so that no Go time parser ever sees a template's timestamp.
TEMPLATE_METADATA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}

SPECIAL: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "minimum": INT32[0],
        "maximum": INT32[1],
        "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": TEMPLATE_METADATA,
}

KEPT_EXTENSIONS = ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type")


class Generator:
    def __init__(self, definitions: dict[str, Any]) -> None:
        self.definitions = definitions

    def definition(self, name: str, stack: tuple[str, ...] = ()) -> dict[str, Any]:
        if name in SPECIAL:
            return copy.deepcopy(SPECIAL[name])
        if name in stack:
            raise ValueError(f"recursive definition {' -> '.join((*stack, name))}: a CRD cannot inline it")
        if name not in self.definitions:
            raise KeyError(f"{name} is not in the OpenAPI document")
        return self.schema(self.definitions[name], (*stack, name))

    def schema(self, node: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
        ref = _ref_of(node)
        if ref is not None:
            return self.definition(ref, stack)
        out: dict[str, Any] = {}
        for key in ("type", "format"):
            if key in node:
                out[key] = node[key]
        if node.get("type") == "integer" and node.get("format") == "int32":
            out["minimum"], out["maximum"] = INT32
        for key in ("minimum", "maximum", "pattern", "enum"):
            if key in node:
                out[key] = node[key]
        if "required" in node:
            out["required"] = list(node["required"])
        if "properties" in node:
            out["properties"] = {k: self.schema(v, stack) for k, v in node["properties"].items()}
        if isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = self.schema(node["additionalProperties"], stack)
        if "items" in node:
            out["items"] = self.schema(node["items"], stack)
        for key in KEPT_EXTENSIONS:
            if key in node:
                out[key] = copy.deepcopy(node[key])
        if out.get("x-kubernetes-list-type") == "map":
            self._default_map_keys(node, out, stack)
        return out

    def _default_map_keys(self, node: dict[str, Any], out: dict[str, Any], stack: tuple[str, ...]) -> None:
        """A CRD's list-map key must be required or defaulted: keep the OpenAPI default of each key."""
        item_ref = _ref_of(node["items"])
        raw = self.definitions[item_ref] if item_ref else node["items"]
        items = out["items"]
        for key in out.get("x-kubernetes-list-map-keys", []):
            if key in items.get("required", []):
                continue
            default = ((raw.get("properties") or {}).get(key) or {}).get("default")
            if default is None:
                raise ValueError(f"list-map key {key} of {stack[-1]} is neither required nor defaulted")
            items["properties"][key]["default"] = default


def _ref_of(node: dict[str, Any]) -> str | None:
    """The definition a node refers to: `$ref`, or the OpenAPI v3 form `allOf: [{$ref}]` (whose
    sibling `default`/`description` are dropped with the rest)."""
    ref = node.get("$ref")
    if ref is None and isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
        ref = node["allOf"][0].get("$ref")
    if ref is None:
        return None
    if not ref.startswith(REF_PREFIX):
        raise ValueError(f"unexpected $ref {ref}")
    return ref[len(REF_PREFIX):]


def expand(node: Any, gen: Generator) -> Any:
    """The base document with every marker node replaced (its own keys, e.g. description, win)."""
    if isinstance(node, list):
        return [expand(v, gen) for v in node]
    if not isinstance(node, dict):
        return node
    if MARKER in node:
        own = {k: v for k, v in node.items() if k != MARKER}
        return {**gen.definition(node[MARKER]), **own}
    return {k: expand(v, gen) for k, v in node.items()}


def render(base_text: str, openapi: dict[str, Any], source: str) -> str:
    header = [line for line in base_text.splitlines() if line.startswith("#")]
    header = [h for h in header if "Input of hack/gen-crd.sh" not in h and MARKER not in h
              and "Kubernetes release (hack/versions.sh)" not in h]
    doc = expand(yaml.safe_load(base_text), Generator(openapi["components"]["schemas"]))
    banner = [
        "# GENERATED by hack/gen-crd.sh (make crd) from hack/crd/mpijobs.base.yaml and",
        f"# {source}. Do not edit: edit the base and rerun.",
    ]
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=110)
    return "\n".join(banner + [h for h in header if h.strip() != "#"]) + "\n" + body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--openapi", required=True, type=Path, help="api__v1_openapi.json of the pinned release")
    p.add_argument("--source", required=True, help="where the OpenAPI document comes from (for the header)")
    p.add_argument("--base", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--check", action="store_true", help="fail if --out differs from what would be written")
    a = p.parse_args(argv)
    text = render(a.base.read_text(), json.loads(a.openapi.read_text()), a.source)
    if a.check:
        if not a.out.exists() or a.out.read_text() != text:
            print(f"{a.out} is stale: run make crd", file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(f"wrote {a.out} ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
