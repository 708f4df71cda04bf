#!/usr/bin/env python3
"""Packs filesystem layers into an OCI image layout tarball, with no registry and no Docker.

    oci_pack.py --out IMG.tar --name localhost/x:tag [--name localhost/x:latest] \
        --layer base.tar [--layer top.tar] --config '{"Cmd": ["/pause"], "User": "65535"}'

Each --layer is an uncompressed tar of a filesystem diff (bottom first); it is stored as is
(media type ...layer.v1.tar), so its digest is also its diff_id. The result holds oci-layout,
index.json and blobs/sha256/* (the OCI image layout), plus a Docker-style manifest.json, so it
loads with any of:
    ctr -n k8s.io images import IMG.tar          (containerd; names from io.containerd.image.name)
    kind load image-archive IMG.tar              (kind nodes run the same ctr import)
    docker load -i IMG.tar                       (uses manifest.json / RepoTags)
The output is deterministic: the same layers and config give the same bytes and digests.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
EPOCH = "1970-01-01T00:00:00Z"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def add_bytes(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = 0o644
    ti.mtime = 0
    tar.addfile(ti, io.BytesIO(data))


def add_dir(tar, name):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mode = 0o755
    ti.mtime = 0
    tar.addfile(ti)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", action="append", required=True, help="full image reference; repeatable")
    ap.add_argument("--layer", action="append", required=True, help="uncompressed layer tar, bottom first")
    ap.add_argument("--config", default="{}", help="JSON of the image config (Cmd, Entrypoint, Env, User, ...)")
    ap.add_argument("--created", default=EPOCH)
    args = ap.parse_args()

    layers = [(p, sha256_file(p), os.path.getsize(p)) for p in args.layer]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": args.created,
        "config": json.loads(args.config),
        "rootfs": {"type": "layers", "diff_ids": [d for _, d, _ in layers]},
        "history": [{"created": args.created, "created_by": "hack/images (" + os.path.basename(p) + ")"}
                    for p, _, _ in layers],
    }
    config_b = canonical(config)
    config_d = "sha256:" + hashlib.sha256(config_b).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": config_d, "size": len(config_b)},
        "layers": [{"mediaType": MT_LAYER, "digest": d, "size": s} for _, d, s in layers],
    }
    manifest_b = canonical(manifest)
    manifest_d = "sha256:" + hashlib.sha256(manifest_b).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "manifests": [
            {
                "mediaType": MT_MANIFEST,
                "digest": manifest_d,
                "size": len(manifest_b),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": (
                        name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
                    ),
                },
            }
            for name in args.name
        ],
    }
    docker_manifest = [{
        "Config": "blobs/sha256/" + config_d.split(":")[1],
        "RepoTags": args.name,
        "Layers": ["blobs/sha256/" + d.split(":")[1] for _, d, _ in layers],
    }]

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        add_bytes(tar, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add_bytes(tar, "index.json", canonical(index))
        add_bytes(tar, "manifest.json", canonical(docker_manifest))
        add_dir(tar, "blobs")
        add_dir(tar, "blobs/sha256")
        add_bytes(tar, "blobs/sha256/" + config_d.split(":")[1], config_b)
        add_bytes(tar, "blobs/sha256/" + manifest_d.split(":")[1], manifest_b)
        seen = set()
        for path, digest, size in layers:
            if digest in seen:
                continue
            seen.add(digest)
            ti = tarfile.TarInfo("blobs/sha256/" + digest.split(":")[1])
            ti.size = size
            ti.mode = 0o644
            ti.mtime = 0
            with open(path, "rb") as f:
                tar.addfile(ti, f)
    os.replace(tmp, args.out)
    print(json.dumps({"out": args.out, "manifest": manifest_d, "config": config_d, "names": args.name}),
          file=sys.stderr)


if __name__ == "__main__":
    main()
