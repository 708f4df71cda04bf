"""What the API server would refuse in a child, checked before any write (pure).

The CRD keeps the pod templates open (x-kubernetes-preserve-unknown-fields), so a template the
server refuses inside a Job or StatefulSet gets through admission of the MPIJob. These checks
mirror apimachinery's validation (k8s.io/apimachinery/pkg/util/validation and the core/v1 pod
validation) for what can be known from the MPIJob alone, and the ConfigMap's 1 MiB data limit,
which bounds the worker count (README, "What bad input gets").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from reconcilers import names

MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253
MAX_LABEL_VALUE = 63
MAX_ANNOTATIONS_BYTES = 256 * 1024  # TotalAnnotationSizeLimitB
MAX_CONFIG_MAP_BYTES = 1024 * 1024  # core/v1 MaxSecretSize, applied to a ConfigMap's data too

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# resource.Quantity: a signed decimal number, then a binary or decimal SI suffix or an exponent.
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
# The same, in parts: sign, integer digits, fraction digits, suffix.
_QUANTITY_PARTS = re.compile(r"^([+-]?)(?:([0-9]+)(?:\.([0-9]*))?|\.([0-9]+))"
                             r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
# The largest quantity Kubernetes represents: its consumers (scheduler, kubelet, quota) read a
# quantity as an int64 (Quantity.Value), and the API server caps a binary-suffixed value there. A
# request beyond it can never be met; refused here, before any arithmetic on it (a value like
# 1e9999999 would take minutes to expand, and the PodGroup sums requests).
MAX_QUANTITY = 2**63 - 1
# An exponent with more digits than this is out of any bound; never converted (int() of a long
# digit string is itself costly, and refused beyond 4300 digits).
_MAX_EXPONENT_DIGITS = 6
_SUFFIX_POW10 = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX_POW2 = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# Below 10^-30 a value rounds up to 1n on the API server; its exact size no longer matters.
_TINY_EXP10 = -30


def quantity_value(q: object) -> Decimal:
    """The value of a quantity (a string as in `500m`, `2Gi`, `1e3`, or a number), bounded: ValueError
    for what is not a quantity or exceeds MAX_QUANTITY. Work bounded by the text's length: the size
    is read off the digits and the exponent before anything is expanded."""
    if isinstance(q, bool) or not isinstance(q, int | float | str):
        raise ValueError(f"not a quantity: {q!r}")
    text = repr(q) if isinstance(q, float) else str(q)
    m = _QUANTITY_PARTS.match(text)
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    sign, suffix = m.group(1), m.group(5) or ""
    whole, frac = (m.group(2) or "").lstrip("0"), m.group(3) or m.group(4) or ""
    if not (whole + frac).strip("0"):
        return Decimal(0)
    exp10, pow2 = 0, 0
    if suffix in _SUFFIX_POW2:
        pow2 = _SUFFIX_POW2[suffix]
    elif suffix in _SUFFIX_POW10:
        exp10 = _SUFFIX_POW10[suffix]
    elif suffix:  # an exponent, e.g. e3 or E-2
        if len(suffix[1:].lstrip("+-").lstrip("0")) > _MAX_EXPONENT_DIGITS:
            if suffix[1:2] == "-":
                return Decimal(f"{sign}1e-30")  # vanishingly small: the API server rounds it up to 1n
            raise ValueError(f"{q!r} is larger than {MAX_QUANTITY}")
        exp10 = int(suffix[1:])
    # log10 of the value lies in [lead, lead + 1) before the binary suffix (2^10 < 10^3.011).
    lead = (len(whole) - 1 if whole else -(len(frac) - len(frac.lstrip("0"))) - 1) + exp10
    if lead + pow2 * 3 // 10 > 19:  # at least 10^20
        raise ValueError(f"{q!r} is larger than {MAX_QUANTITY}")
    if lead + 1 + (pow2 * 302 + 999) // 1000 < _TINY_EXP10:
        return Decimal(f"{sign}1e-30")
    value = Decimal(f"{sign}{whole or '0'}.{frac or '0'}").scaleb(exp10) * (2**pow2)
    if value > MAX_QUANTITY:
        raise ValueError(f"{q!r} is larger than {MAX_QUANTITY}")
    return value


def quantity_error(q: object) -> str | None:
    """What is wrong with a resource quantity of a container (requests, limits), or None."""
    if (isinstance(q, str) and q.strip().startswith("-")) or (isinstance(q, int | float) and not isinstance(
            q, bool) and q < 0):
        return f"{_short(q)} is a negative quantity; write e.g. 500m, 2, 1Gi or 512Mi"
    try:
        quantity_value(q)
    except ValueError as e:
        if "larger than" in str(e):
            return (f"{_short(q)} is larger than the largest quantity Kubernetes represents ({MAX_QUANTITY}, "
                    "2^63-1); no node can offer it: write e.g. 500m, 2, 1Gi or 512Mi")
        return f"{_short(q)} is not a quantity; write e.g. 500m, 2, 1Gi or 512Mi"
    return None


def _short(q: object) -> str:
    text = repr(q)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text) - 2} characters)"

AddError = Callable[[str, str], None]


def qualified_name_error(key: str) -> str | None:
    """apimachinery IsQualifiedName: [prefix/]name, prefix a DNS subdomain, name <= 63 characters."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "has an empty prefix before '/'"
    if prefix and (len(prefix) > MAX_DNS_SUBDOMAIN or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"prefix {prefix!r} must be a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if not name or len(name) > MAX_DNS_LABEL or not _QUALIFIED_NAME.match(name):
        return (f"name part {name!r} must be 1-63 ASCII letters, digits, '-', '_' or '.', starting and "
                "ending with a letter or digit")
    return None


def label_value_error(value: str) -> str | None:
    if len(value) > MAX_LABEL_VALUE or not _LABEL_VALUE.match(value):
        return ("must be at most 63 ASCII letters, digits, '-', '_' or '.', starting and ending with a "
                "letter or digit (or empty)")
    return None


def check_metadata(add: AddError, meta: dict, path: str) -> None:
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for k, v in labels.items():
            if not isinstance(k, str) or not isinstance(v, str):
                continue  # reported by the type check
            why = qualified_name_error(k)
            if why:
                add(f"{path}.labels", f"key {k!r} {why}")
            why = label_value_error(v)
            if why:
                add(f"{path}.labels", f"value {v!r} of {k!r} {why}")
    ann = meta.get("annotations")
    if isinstance(ann, dict):
        for k, v in ann.items():
            if not isinstance(k, str) or not isinstance(v, str):
                continue
            why = qualified_name_error(k.lower())
            if why:
                add(f"{path}.annotations", f"key {k!r} {why}")
        # the server counts the bytes of the Go strings (UTF-8), keys included
        size = sum(len(k.encode()) + len(v.encode()) for k, v in ann.items()
                   if isinstance(k, str) and isinstance(v, str))
        if size > MAX_ANNOTATIONS_BYTES:
            add(f"{path}.annotations", f"are {size} bytes in all, more than the API's limit of "
                f"{MAX_ANNOTATIONS_BYTES} (256 KiB); move the data to a ConfigMap or a volume")


def _dicts(v: Any) -> list[tuple[int, dict]]:
    return [(i, x) for i, x in enumerate(v) if isinstance(x, dict)] if isinstance(v, list) else []


def check_pod_spec(add: AddError, spec: dict, path: str, operator_volumes: tuple[str, ...]) -> None:
    """Container and volume rules of core/v1 pod validation that the operator's copy keeps."""
    volumes: set[str] = set(operator_volumes)
    for i, v in _dicts(spec.get("volumes")):
        name = v.get("name")
        vp = f"{path}.volumes[{i}].name"
        if not isinstance(name, str) or not _DNS1123_LABEL.match(name) or len(name) > MAX_DNS_LABEL:
            add(vp, f"{name!r} must be a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
        elif name in volumes and name not in operator_volumes:
            add(vp, f"duplicate volume {name!r}; give each volume its own name")
        if isinstance(name, str):
            volumes.add(name)
    seen: set[str] = set()
    for key in ("initContainers", "containers"):
        for i, ct in _dicts(spec.get(key)):
            _check_container(add, ct, f"{path}.{key}[{i}]", seen, volumes)


def _check_container(add: AddError, ct: dict, cp: str, seen: set[str], volumes: set[str]) -> None:
    name = ct.get("name")
    if isinstance(name, str) and name:
        if len(name) > MAX_DNS_LABEL or not _DNS1123_LABEL.match(name):
            add(f"{cp}.name", f"{name!r} must be a DNS-1123 label: lower-case ASCII letters, digits and '-', "
                "starting and ending with a letter or digit, at most 63 characters")
        elif name in seen:
            add(f"{cp}.name", f"duplicate container name {name!r} (containers and initContainers share names); "
                "rename one")
        seen.add(name)
    for j, e in _dicts(ct.get("env")):
        en = e.get("name")
        if isinstance(en, str) and not _ENV_NAME.match(en):
            add(f"{cp}.env[{j}].name", f"{en!r} is not a valid environment variable name: letters, digits, "
                "'_', '-' and '.', not starting with a digit ('=' is not allowed)")
    for j, m in _dicts(ct.get("volumeMounts")):
        mn = m.get("name")
        if isinstance(mn, str) and mn not in volumes:
            add(f"{cp}.volumeMounts[{j}].name", f"{mn!r} names no volume of the pod template; add it to "
                "spec.volumes or fix the name")
        if not isinstance(m.get("mountPath"), str) or not m.get("mountPath"):
            add(f"{cp}.volumeMounts[{j}].mountPath", "is required")
    _check_resources(add, ct.get("resources"), f"{cp}.resources")


def _check_resources(add: AddError, res: Any, path: str) -> None:
    if res is None:
        return
    if not isinstance(res, dict):
        add(path, f"must be an object with limits and requests, got {res!r}")
        return
    for key in ("limits", "requests"):
        m = res.get(key)
        if m is None:
            continue
        if not isinstance(m, dict):
            add(f"{path}.{key}", f"must map resource names to quantities, got {m!r}")
            continue
        for rname, q in m.items():
            why = quantity_error(q)
            if why:
                add(f"{path}.{key}.{rname}", why)


# -- the ConfigMap ---------------------------------------------------------------------------------


def _digits_sum(count: int) -> int:
    """Total number of decimal digits of 0, 1, ..., count-1."""
    total, lo, width = 0, 0, 1
    while lo < count:
        hi = min(count, 10 ** width)
        total += (hi - lo) * width
        lo, width = hi, width + 1
    return total


def config_map_bytes(job_name: str, namespace: str, cluster_domain: str, slots: int, impl: str,
                     launcher_as_worker: bool, workers: int) -> int:
    """Bytes of the ConfigMap's data (keys + values, as the server counts) with `workers` workers,
    all running (discover_hosts.sh at its longest): the same text desired.config_map writes."""
    suffix = names.pod_fqdn({"metadata": {"name": job_name, "namespace": namespace}}, "", cluster_domain)
    prefix = f"{job_name}-worker-"
    slot = f" slots={slots}" if impl == "OpenMPI" else f":{slots}"
    host_fixed = len(prefix) + len(suffix)  # per worker, without its index
    hostfile = workers * (host_fixed + len(slot) + 1) + _digits_sum(workers)
    discover = len("#!/bin/sh\n") + workers * (len("echo ") + host_fixed + 1) + _digits_sum(workers)
    if launcher_as_worker:
        launcher = len(f"{job_name}-launcher") + (0 if impl in names.HYDRA_IMPLEMENTATIONS else len(suffix))
        hostfile += launcher + len(slot) + 1
        discover += len("echo ") + launcher + 1
    return len("hostfile") + hostfile + len("discover_hosts.sh") + discover


def max_workers(fits: Callable[[int], bool], upper: int) -> int:
    """The largest w in [0, upper] with fits(w) (fits is monotone: true, then false)."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
