#!/usr/bin/env python3
"""Make the local cluster's container images as Docker archives, with no registry.

    mkimage.py busybox OUT.tar   # localhost/dispatch-busybox:kind from Debian's busybox-static
    mkimage.py pause OUT.tar BIN # localhost/pause:dispatch from a static pause binary

The archives are what `ctr images import` reads. Timestamps are fixed so the same inputs
give the same image.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile

BUSYBOX_REF = "localhost/dispatch-busybox:kind"
PAUSE_REF = "localhost/pause:dispatch"


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, *, mode: int = 0o755,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.mode = mode
    info.type = kind
    info.linkname = link
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def busybox_layer() -> bytes:
    binary = open("/bin/busybox", "rb").read()
    applets = subprocess.run(["/bin/busybox", "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev", "var", "root"):
            _add(tar, d, mode=0o1777 if d == "tmp" else 0o755, kind=tarfile.DIRTYPE)
        _add(tar, "bin/busybox", binary)
        for a in sorted(set(applets) - {"busybox"}):
            _add(tar, f"bin/{a}", kind=tarfile.LNKTYPE, link="bin/busybox")
        _add(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n", mode=0o644)
        _add(tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", mode=0o644)
    return buf.getvalue()


def pause_layer(binary_path: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "pause", open(binary_path, "rb").read())
    return buf.getvalue()


def archive(out: str, ref: str, layer: bytes, entrypoint: list[str], cmd: list[str]) -> None:
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": entrypoint or None, "Cmd": cmd or None,
                   "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "dispatch-kubeflow mkimage.py"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref],
                            "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, config_name, config, mode=0o644)
        _add(tar, "layer.tar", layer, mode=0o644)
        _add(tar, "manifest.json", manifest, mode=0o644)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("busybox", "pause"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "busybox":
        archive(argv[2], BUSYBOX_REF, busybox_layer(), [], ["/bin/sh"])
    else:
        archive(argv[2], PAUSE_REF, pause_layer(argv[3]), ["/pause"], [])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
