"""Seeded generator of MPIJobs for the CRD fuzz test (tests/integration/test_crd_fuzz.py).

Each MPIJob is a valid one (the shape of e2e/support.py's `mpijob()`) with one to three mutations,
each at a path drawn from the CRD's own schema (most inside one of the pod templates): a random
property at every level, down to a leaf or a random depth. What is put there is drawn from
values Go clients disagree with the schema about: the wrong JSON type, int32 and int64 bounds,
quantities of every shape (`lots`, `1e1.5`, a 20-digit exponent, `.5`, `1Ki`), unknown fields.
Intermediate objects get their required fields, so a refusal is about the mutation.

Pure and deterministic: the same seed gives the same MPIJobs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from testsupport import builders

Path = tuple[str | int, ...]

QUANTITIES = [
    "1", "10m", "1.5", ".5", "5.", "+1", "-1", "1Ki", "1Mi", "2Gi", "1E", "1Ei", "1e3", "1E-3", "1e+3",
    "1e18", "1e999", "1e-999", "1e1000", "1e-100000000", "1e999999999999999999",
    "1e9999999999999999999", "1e1.5", "1e", "lots", "", " 1", "1 ", "0x10",
    "1_000", "1KiB", "1k", "1K", "1.0.0", "∞", "NaN", "1m2", "12345678901234567890123", "-0", "+.5e-3",
]
STRINGS = ["", "x", "Never", "TCP", "a b", "true", "1", "ünï", "x" * 300]
INTS = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**53, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
FLOATS = [1.5, -0.0, 1e30, 1e300, 0.1]


@dataclass
class Case:
    """One generated MPIJob and the paths its mutations touched (for the refusal message check)."""

    index: int
    body: dict
    paths: list[Path] = field(default_factory=list)
    strict: bool = True  # fieldValidation=Strict (kubectl's default) or Ignore (unknown fields pruned)


def base_mpijob(name: str) -> dict:
    return builders.mpijob(name, run_policy={"cleanPodPolicy": "Running"})


def _is_quantity(schema: dict) -> bool:
    return schema.get("x-kubernetes-int-or-string") is True and "pattern" in schema


def _kind(schema: dict) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "quantity" if _is_quantity(schema) else "intorstring"
    return schema.get("type") or "any"


class Fuzzer:
    def __init__(self, crd_schema: dict, seed: int) -> None:
        self.root = crd_schema  # the openAPIV3Schema of the served version
        self.rng = random.Random(seed)

    # -- values -----------------------------------------------------------------------------------

    def minimal(self, schema: dict, depth: int = 0) -> Any:
        """A smallest valid value: required properties only."""
        kind = _kind(schema)
        if kind == "object":
            if "properties" not in schema:
                return {}
            return {k: self.minimal(schema["properties"][k], depth + 1)
                    for k in schema.get("required", []) if depth < 12}
        if kind == "array":
            return []
        if kind == "string":
            return "x"
        if kind == "integer":
            return max(1, schema.get("minimum", 1))
        if kind == "boolean":
            return True
        if kind in ("quantity", "intorstring"):
            return "1"
        return "x"

    def wrong_or_edge(self, schema: dict) -> Any:
        """A value for a field of this schema: often the wrong type, often an edge of the right one."""
        r = self.rng
        kind = _kind(schema)
        roll = r.random()
        if kind == "quantity" and roll < 0.7:
            return r.choice([*QUANTITIES, *r.sample(INTS, 3), *FLOATS[:2]])
        if kind == "intorstring" and roll < 0.6:
            return r.choice([*INTS, "http", "", 8080, "8080"])
        if kind == "integer" and roll < 0.6:
            return r.choice([*INTS, *FLOATS, "1"])
        if kind == "string" and roll < 0.4:
            return r.choice(STRINGS)
        if kind == "boolean" and roll < 0.3:
            return r.choice([True, False, "true", 1])
        return self.any_value()

    def any_value(self, depth: int = 0) -> Any:
        r = self.rng
        choice = r.randrange(9 if depth < 2 else 6)
        if choice == 0:
            return None
        if choice == 1:
            return r.choice(STRINGS + QUANTITIES[:5])
        if choice == 2:
            return r.choice(INTS)
        if choice == 3:
            return r.choice(FLOATS)
        if choice == 4:
            return r.choice([True, False])
        if choice == 5:
            return r.choice([[], {}])
        if choice == 6:
            return [self.any_value(depth + 1) for _ in range(r.randint(1, 2))]
        return {r.choice(["x", "name", "cpu", "value", "Bogus"]): self.any_value(depth + 1)
                for _ in range(r.randint(1, 2))}

    # -- paths ------------------------------------------------------------------------------------

    def random_path(self) -> tuple[Path, dict]:
        """A path below `spec`, chosen one schema level at a time, and the schema found there."""
        r = self.rng
        path: Path = ("spec",)
        schema = self.root["properties"]["spec"]
        if r.random() < 0.85:  # most of the schema, and all that Go clients decode with k8s.io/api, is there
            rtype = r.choice(["Launcher", "Worker"])
            path = ("spec", "mpiReplicaSpecs", rtype, "template")
            schema = schema["properties"]["mpiReplicaSpecs"]["properties"][rtype]["properties"]["template"]
        while True:
            kind = _kind(schema)
            stop = len(path) > 2 and r.random() < (0.05 if len(path) < 7 else 0.2)
            if kind == "object" and "properties" in schema and not stop:
                key = r.choice(sorted(schema["properties"]))
                path, schema = (*path, key), schema["properties"][key]
            elif kind == "object" and "additionalProperties" in schema and not stop:
                key = r.choice(["cpu", "memory", "nvidia.com/gpu", "a", "kubernetes.io/os"])
                path, schema = (*path, key), schema["additionalProperties"]
            elif kind == "array" and "items" in schema and not stop:
                path, schema = (*path, 0), schema["items"]
            else:
                return path, schema

    def set_path(self, obj: dict, path: Path, value: Any) -> None:
        """obj[path] = value, creating what is missing on the way (lists of one item, objects with
        their required fields, as the schema says)."""
        node: Any = obj
        schema = self.root
        for i, part in enumerate(path):
            last = i == len(path) - 1
            if isinstance(part, int):
                schema = schema.get("items", {})
                if not isinstance(node, list):
                    return  # an earlier mutation put something else here
                if not node:
                    node.append(self.minimal(schema))
                if last:
                    node[0] = value
                    return
                node = node[0]
                continue
            schema = (schema.get("properties") or {}).get(part) or schema.get("additionalProperties") or {}
            if not isinstance(node, dict):
                return
            if last:
                node[part] = value
                return
            if not isinstance(node.get(part), dict | list):
                node[part] = [] if _kind(schema) == "array" else self.minimal(schema)
            node = node[part]

    # -- cases ------------------------------------------------------------------------------------

    def mutate(self, body: dict) -> Path:
        r = self.rng
        path, schema = self.random_path()
        if r.random() < 0.15 and _kind(schema) == "object":
            path = (*path, r.choice(["bogusField", "Name", "nodeselector"]))
            value = self.any_value()
        else:
            value = self.wrong_or_edge(schema)
        self.set_path(body, path, value)
        return path

    def case(self, index: int) -> Case:
        body = base_mpijob(f"fuzz-{index}")
        c = Case(index, body, strict=self.rng.random() < 0.7)
        for _ in range(self.rng.choice([1, 1, 2, 3])):
            c.paths.append(self.mutate(body))
        return c

    def cases(self, count: int) -> list[Case]:
        return [self.case(i) for i in range(count)]


def path_forms(path: Path) -> list[str]:
    """How the API server may write a path in its messages: `a.b[0].c`, and map keys as `.k` or `[k]`."""
    dotted, bracketed = "", ""
    for part in path:
        if isinstance(part, int):
            dotted += f"[{part}]"
            bracketed += f"[{part}]"
        else:
            dotted += f".{part}" if dotted else part
            bracketed += f"[{part}]" if "/" in part or "." in part else (f".{part}" if bracketed else part)
    return [dotted, bracketed]


def names_the_field(message: str, path: Path) -> bool:
    """True when the message names the mutated field, or an object on its way that is at least inside
    the pod template (or, outside templates, the field's parent)."""
    shortest = path.index("template") + 2 if "template" in path else max(2, len(path) - 1)
    for n in range(len(path), min(shortest, len(path)) - 1, -1):
        if any(form in message for form in path_forms(path[:n])):
            return True
    # A rule of the whole object (it reads metadata.name) that fails to evaluate, e.g. on `replicas: -0.0`
    # (an integer to the schema, a float to CEL), is reported at the root (`<nil>`); its message must
    # still say which field.
    leaf = next((p for p in reversed(path) if isinstance(p, str)), "")
    return "<nil>: " in message and leaf in message
