#!/usr/bin/env python3
"""make_image.py ROOTFS OUT.tar REF

Writes an OCI image archive (image-layout: oci-layout, index.json, blobs)
of one layer, ROOTFS as a gzipped tar, for `ctr image import`; index.json
names the manifest REF (org.opencontainers.image.ref.name, the tag) and
io.containerd.image.name. No registry, no network.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def blob(blobs, data, media_type):
    d = hashlib.sha256(data).hexdigest()
    blobs[d] = data
    return {"mediaType": media_type, "digest": "sha256:" + d, "size": len(data)}


def main():
    rootfs, out, ref = sys.argv[1], sys.argv[2], sys.argv[3]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name in sorted(os.listdir(rootfs)):
            t.add(os.path.join(rootfs, name), arcname=name)
    layer_tar = raw.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    blobs = {}
    layer = blob(blobs, gzip.compress(layer_tar, mtime=0),
                 "application/vnd.oci.image.layer.v1.tar+gzip")
    config = blob(blobs, json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = blob(blobs, json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config, "layers": [layer],
    }).encode(), "application/vnd.oci.image.manifest.v1+json")
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
    manifest["annotations"] = {"io.containerd.image.name": ref,
                               "org.opencontainers.image.ref.name": tag}
    index = {"schemaVersion": 2, "manifests": [manifest]}
    with tarfile.open(out, "w") as t:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for d, data in blobs.items():
            add("blobs/sha256/" + d, data)


if __name__ == "__main__":
    main()
