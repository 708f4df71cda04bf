"""Hypothesis strategies for MPIJobs drawn from the CRD's own openAPIV3Schema (manifests/crd/), so
the generators cover what the CRD admits: every optional field present or absent (a missing Worker
included), enums, integer bounds, int-or-string. Pod templates, which the CRD keeps open
(x-kubernetes-preserve-unknown-fields), come from `pod_templates`: the fields the operator reads or
the API server checks, valid and not, plus arbitrary extra keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crd" / "kubeflow.org_mpijobs.yaml"
INT32 = 2**31 - 1
INT64 = 2**63 - 1


def crd_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    return version["schema"]["openAPIV3Schema"]


small_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
names = st.sampled_from(["c", "worker", "launcher", "a-b", "wörker", "Worker", "x" * 63, "y" * 64, "", "a_b"])
label_keys = st.sampled_from(["a", "example.com/b", "Ex.com/c", "-a", "ä", "k" * 64, "a/b/c",
                              "sim.mpijob-operator.dev/run-for"])
label_values = st.sampled_from(["", "v", "1s", "wért", "v" * 63, "v" * 64, "a b", "-x"])
quantities = st.sampled_from(["1", "500m", "1Gi", "1e3", ".5", "lots", "-1", "1GB", "", "0x10"]) | st.integers(-1, 64) \
    | st.floats(0, 8, allow_nan=False)
volume_names = st.sampled_from(["data", "cache", "ssh-auth", "mpi-job-config", "Bad_Name", "data"])
env_names = st.sampled_from(["A", "A=B", "_x.y-z", "1A", "", "OMPI_MCA_orte_default_hostfile", "é"])
garbage = st.recursive(st.none() | st.booleans() | st.integers(-3, 100) | small_text,
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(small_text, inner, max_size=3),
                       max_leaves=6)


def _optional(d: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional=d)


def _mostly(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """`good` seven times in eight: a valid MPIJob stays common enough to reach the planner's depths."""
    return st.sampled_from([True] * 7 + [False]).flatmap(lambda ok: good if ok else bad)


good_name = st.sampled_from(["c", "worker", "launcher", "a-b", "x" * 63])
good_quantity = st.sampled_from(["1", "500m", "1Gi", "1e3", ".5"]) | st.integers(0, 64)
good_volume = st.sampled_from(["data", "cache"])
good_env = st.sampled_from(["A", "_x.y-z", "OMPI_MCA_orte_default_hostfile"])

containers = st.fixed_dictionaries({"name": _mostly(good_name, names),
                                    "image": _mostly(st.just("mpioperator/mpi-pi:openmpi"), garbage)}, optional={
    "command": st.lists(small_text, max_size=2) | garbage, "args": st.lists(small_text, max_size=2),
    "env": st.lists(st.fixed_dictionaries({"name": _mostly(good_env, env_names)}, optional={"value": small_text}),
                    max_size=3),
    "volumeMounts": st.lists(st.fixed_dictionaries({"name": _mostly(st.just("ssh-auth"), volume_names),
                                                    "mountPath": _mostly(st.just("/d"), st.just(""))}), max_size=2),
    "resources": _mostly(_optional({
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "x/y"]), _mostly(good_quantity, quantities),
                                    max_size=2),
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), _mostly(good_quantity, quantities),
                                  max_size=2)}), garbage),
})
pod_specs = st.fixed_dictionaries({"containers": _mostly(
    st.lists(containers, min_size=1, max_size=3, unique_by=lambda c: c["name"]), st.lists(containers, max_size=3)
    | garbage)},
                                  optional={
    "initContainers": st.lists(containers, max_size=2) | garbage,
    "volumes": st.lists(st.fixed_dictionaries({"name": _mostly(good_volume, volume_names), "emptyDir": st.just({})}),
                        max_size=2, unique_by=lambda v: v["name"]) | garbage,
    "hostNetwork": st.booleans(), "nodeSelector": st.dictionaries(small_text, small_text, max_size=2) | garbage,
    "dnsConfig": _optional({"searches": st.lists(small_text, max_size=2) | garbage}) | garbage,
    "restartPolicy": st.sampled_from(["Never", "Always"]),
})
pod_templates = st.fixed_dictionaries({"spec": _mostly(pod_specs, garbage)}, optional={
    "metadata": _mostly(_optional({
        "labels": st.dictionaries(_mostly(st.just("a"), label_keys), _mostly(st.just("v"), label_values), max_size=3),
        "annotations": _mostly(st.dictionaries(label_keys, label_values, max_size=3),
                               st.just({"big": "x" * (256 * 1024)}) | garbage),
        "name": small_text}), garbage),
})

# metadata is an open object in the CRD: what the API server would fill in, mostly valid names.
mpijob_metadata = st.fixed_dictionaries({
    "name": _mostly(st.sampled_from(["pi", "a", "job-1", "n" * 54]), st.sampled_from(["Pi", "1pi", "x" * 60])
                    | small_text),
    "namespace": st.sampled_from(["ns", "a-much-longer-namespace-name"]),
    "uid": st.just("uid-1"), "generation": st.integers(1, 5)})


def _integers(schema: dict) -> st.SearchStrategy[int]:
    """What the API server admits: the schema's bounds, else its format's (int64 up to 2^63-1, which
    the API server enforces; issue 36: an int64 deadline once crashed every reconcile)."""
    top = INT64 if schema.get("format") == "int64" else INT32
    lo = schema.get("minimum", -top - 1)
    hi = schema.get("maximum", top)
    # mostly small values near the lower bound, sometimes the very top, sometimes anything allowed
    tops = [v for v in (hi, hi - 1, hi // 10**9 + 1) if lo <= v <= hi]  # + Go's Duration in seconds, wrapped
    return st.integers(lo, min(hi, lo + 8)) | st.sampled_from(tops) | st.integers(lo, hi)


# Times as anyone with status access may write them: the API server admits any RFC 3339 time, from
# year 1 to year 9999.
EDGE_TIMES = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2025-01-01T12:00:00Z", "2024-12-31T23:59:59Z"]
times = st.sampled_from(EDGE_TIMES) | st.datetimes().map(lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"))


# What the CRD's CEL rules (x-kubernetes-validations) add to its structural schema, by path: a
# required Launcher with replicas 1. The rules on names are left to the metadata strategy above.
CEL_REQUIRED = {"spec.mpiReplicaSpecs": {"Launcher"}}
CEL_VALUES = {"spec.mpiReplicaSpecs.Launcher.replicas": st.just(1)}
# Fields that are optional to the schema but needed by validation, or whose numbers and times reach
# arithmetic (issue 36: an int64 deadline, a startTime in year 9999): present seven times in eight.
MOSTLY_PRESENT = {"template", "Worker", "runPolicy", "activeDeadlineSeconds", "startTime"}


def _object(schema: dict, path: str) -> st.SearchStrategy[dict]:
    props = schema["properties"]
    required = set(schema.get("required") or []) | CEL_REQUIRED.get(path, set())
    fields = {k: from_schema(v, f"{path}.{k}" if path else k) for k, v in props.items()}
    fixed = st.fixed_dictionaries({k: v for k, v in fields.items() if k in required},
                                  optional={k: v for k, v in fields.items() if k not in required})
    mostly = [k for k in props if k in MOSTLY_PRESENT and k not in required]
    if not mostly:
        return fixed
    full = st.fixed_dictionaries({k: v for k, v in fields.items() if k in required or k in mostly},
                                 optional={k: v for k, v in fields.items() if k not in required and k not in mostly})
    return _mostly(full, fixed)


def from_schema(schema: dict, path: str = "") -> st.SearchStrategy[Any]:
    """Values the schema admits (with CEL_REQUIRED/CEL_VALUES; other CEL rules are left for
    validation to catch)."""
    name = path.rsplit(".", 1)[-1]
    if path in CEL_VALUES:
        return CEL_VALUES[path]
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return pod_templates if name == "template" else garbage
    if name == "template" and schema.get("properties"):
        # The full PodTemplateSpec schema (manifests/crd): templates a user would write most of the
        # time, and anything that schema admits now and then.
        return _mostly(pod_templates, _object(schema, path))
    if schema.get("x-kubernetes-int-or-string") or "anyOf" in schema:
        return st.integers(-1, 10**6) | small_text
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    typ = schema.get("type")
    if typ == "object":
        if name == "metadata":
            return mpijob_metadata
        if schema.get("properties"):
            return _object(schema, path)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return st.dictionaries(small_text, from_schema(extra, path + ".*"), max_size=3)
        return garbage
    if typ == "integer":
        return _integers(schema)
    if typ == "boolean":
        return st.booleans()
    if typ == "string" and schema.get("format") == "date-time":
        return times
    if typ == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 20), 20)) \
            | st.sampled_from(["/root/.ssh", "/home/mpiuser/.ssh", "kubeflow.org/mpi-operator", "other/x"])
    if typ == "array":
        return st.lists(from_schema(schema.get("items") or {}, path + "[]"), max_size=3)
    return garbage


def mpijobs(with_status: bool = False) -> st.SearchStrategy[dict]:
    """MPIJobs as submitted; `with_status`: also a status the schema admits (written by anyone with
    status access: times at the edges of the calendar, any condition)."""
    schema = crd_schema()
    props = schema["properties"]
    fields = {"apiVersion": st.just("kubeflow.org/v2beta1"), "kind": st.just("MPIJob"),
              "metadata": mpijob_metadata, "spec": from_schema(props["spec"], "spec")}
    if with_status:
        fields["status"] = from_schema(props["status"], "status")
    return st.fixed_dictionaries(fields)
