#!/usr/bin/env python3
"""Writes deploy/mpijob-operator.yaml (`make install-manifest`): the whole install in one file, as
upstream ships deploy/v2beta1/mpi-operator.yaml, so that one command installs the operator:

    kubectl apply --server-side -f deploy/mpijob-operator.yaml

It is manifests/kustomization.yaml rendered: the CRD, the namespace, ServiceAccount and RBAC, the
admission policies, the Deployment with its Service, PDB and metrics NetworkPolicy, with the
kustomization's labels and image. Rendered here rather than by `kubectl kustomize`, so that
`make install-manifest` and its check (tests/unit/test_install_manifest.py) need no cluster
binaries; tests/integration/test_manifests.py checks that kustomize renders the same objects. Only
the kustomize fields manifests/ uses are read (resources, labels, images); any other field stops
the generator, so that a change to manifests/ never goes missing from the file unnoticed.

--check: exit 1 if the committed file is not what this would write. --image: the operator's image
(default: the kustomization's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
OUT = ROOT / "deploy" / "mpijob-operator.yaml"
HEADER = """\
# mpijob-operator: the CRD, RBAC, admission policies and the operator's Deployment, in one file.
#   kubectl apply --server-side -f deploy/mpijob-operator.yaml
# Generated from manifests/ by hack/gen_install.py (make install-manifest); do not edit: change
# manifests/ and regenerate (tests/unit/test_install_manifest.py fails until you do).
"""
KNOWN = {"apiVersion", "kind", "resources", "labels", "images"}
# Applied in this order, as kustomize's legacy order does: what others need first (a namespace
# before what lives in it, the CRD before anything could use it), webhooks and policies last.
FIRST = ["Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
         "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret",
         "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume", "PersistentVolumeClaim",
         "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget"]
LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]


def _rank(obj: dict) -> int:
    kind = obj.get("kind", "")
    if kind in FIRST:
        return FIRST.index(kind)
    if kind in LAST:
        return len(FIRST) + 1 + LAST.index(kind)
    return len(FIRST)


# libyaml's loader where present (the CRD is large); what it loads is the same either way. The
# dumper stays Python's: its output is the file, which must not depend on the machine.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d]


def render(directory: Path) -> list[dict]:
    """The objects of the kustomization in `directory`, its own labels and images applied."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = sorted(set(k) - KNOWN)
    if unknown:
        raise SystemExit(f"{directory / 'kustomization.yaml'}: {', '.join(unknown)} not rendered by {__file__}; "
                         "teach it, or keep manifests/ to resources, labels and images")
    objs: list[dict] = []
    for res in k.get("resources") or []:
        path = directory / res
        objs += render(path) if path.is_dir() else _docs(path)
    for entry in k.get("labels") or []:
        if entry.get("includeSelectors") or entry.get("includeTemplates") or set(entry) - {"pairs", "includeSelectors"}:
            raise SystemExit(f"{directory}: labels {entry} beyond metadata.labels are not rendered here")
        for obj in objs:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(entry["pairs"])
    for image in k.get("images") or []:
        for obj in objs:
            _set_image(obj, image)
    return objs


def _split(ref: str) -> tuple[str, str | None]:
    """An image reference's name and tag (None when it has none); a digest is kept in the name."""
    name, sep, tag = ref.rpartition(":")
    return (name, tag) if sep and "/" not in tag else (ref, None)


def _containers(obj: dict) -> list[dict]:
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]


def _set_image(obj: dict, image: dict) -> None:
    """kustomize's `images` entry: the containers whose image is `name` get newName and/or newTag."""
    for c in _containers(obj):
        name, tag = _split(c.get("image", ""))
        if name == image["name"]:
            name, tag = image.get("newName", name), image.get("newTag", tag)
            c["image"] = f"{name}:{tag}" if tag else name


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line strings (CEL expressions, descriptions) as literal blocks: readable, and diffable.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, _str)


def install(image: str | None = None) -> str:
    objs = sorted(render(MANIFESTS), key=_rank)  # stable: the kustomization's order within a kind
    if image:
        for c in (c for o in objs if o["kind"] == "Deployment" for c in _containers(o)):
            c["image"] = image
    body = "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=1 << 16) for o in objs)
    return HEADER + "---\n" + body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed file differs")
    ap.add_argument("--image", help="the operator's image (repository:tag)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    text = install(args.image)
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            print(f"{args.out} is not what manifests/ render: run make install-manifest", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} ({text.count(chr(10) + '---' + chr(10))} objects)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
