#!/usr/bin/env python3
"""Make the local cluster's container images as Docker archives, with no registry.

    mkimage.py busybox OUT.tar   # localhost/dispatch-busybox:kind from Debian's busybox-static
    mkimage.py pause OUT.tar BIN # localhost/pause:dispatch from a static pause binary
    mkimage.py rootfs OUT.tar ROOTFS_DIR REF [--dockerfile FILE] [--env K=V]...
                      [--user U] [--entrypoint JSON] [--cmd JSON] [--workdir DIR]
                                 # REF from a root filesystem directory, as one layer

The archives are what `ctr images import` reads. Timestamps are fixed so the same inputs
give the same image.

rootfs packs every directory, regular file (hard links as links), and symlink under
ROOTFS_DIR with its mode and numeric owner, in byte order of the paths, every mtime 0; device
nodes, fifos and sockets are left out (the runtime mounts /dev). The image's configuration
starts from the --env entries (what a Dockerfile's base image would give, such as PATH), then
takes USER, ENV, ENTRYPOINT, CMD and WORKDIR of the --dockerfile's final stage (so an image
built from that Dockerfile and this one run the same way), then the explicit flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import posixpath
import re
import shlex
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from typing import BinaryIO

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
    with open("/bin/busybox", "rb") as f:
        binary = f.read()
    applets = subprocess.run(["/bin/busybox", "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev", "var", "root"):
            _add(tar, d, mode=0o1777 if d == "tmp" else 0o755, kind=tarfile.DIRTYPE)
        _add(tar, "bin/busybox", binary)
        for a in sorted(set(applets) - {"busybox"}):
            _add(tar, f"bin/{a}", kind=tarfile.LNKTYPE, link="bin/busybox")
        _add(tar, "etc/passwd",
             b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n", mode=0o644)
        _add(tar, "etc/group", b"root:x:0:\nnogroup:x:65534:\n", mode=0o644)
    return buf.getvalue()


def pause_layer(binary_path: str) -> bytes:
    with open(binary_path, "rb") as f:
        binary = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "pause", binary)
    return buf.getvalue()


def archive(out: str, ref: str, layer: bytes, entrypoint: list[str], cmd: list[str]) -> None:
    config: dict[str, object] = {"Entrypoint": entrypoint or None, "Cmd": cmd or None,
                                 "Env": ["PATH=/bin"], "WorkingDir": "/"}
    _archive(out, ref, config, "sha256:" + hashlib.sha256(layer).hexdigest(), len(layer),
             io.BytesIO(layer))


def _archive(out: str, ref: str, config_fields: dict[str, object], diff_id: str,
             layer_size: int, layer: BinaryIO) -> None:
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": config_fields,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z",
                     "created_by": "dispatch-kubeflow mkimage.py"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref],
                            "Layers": ["layer.tar"]}]).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, config_name, config, mode=0o644)
        info = tarfile.TarInfo("layer.tar")
        info.mtime, info.mode, info.size = 0, 0o644, layer_size
        tar.addfile(info, layer)
        _add(tar, "manifest.json", manifest, mode=0o644)


# --- rootfs: a directory as one layer, configured like a Dockerfile's final stage -------------

@dataclasses.dataclass
class ImageConfig:
    """The run-time part of an image's configuration."""

    env: dict[str, str] = dataclasses.field(default_factory=dict)
    user: str = ""
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    workdir: str = "/"
    # Instructions that change the configuration in ways this module does not model.
    unsupported: list[str] = dataclasses.field(default_factory=list)

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {"Entrypoint": self.entrypoint, "Cmd": self.cmd,
                                  "Env": [f"{k}={v}" for k, v in self.env.items()],
                                  "WorkingDir": self.workdir}
        if self.user:
            out["User"] = self.user
        return out


# Instructions that only put content into the image: the caller builds the content itself.
_CONTENT = {"COPY", "ADD", "RUN"}
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continued lines joined."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        yield _split(line)
    if pending:
        yield _split(pending)


def _split(line: str) -> tuple[str, str]:
    word, *rest = line.split(None, 1)
    return word.upper(), rest[0].strip() if rest else ""


def _expand(value: str, env: dict[str, str]) -> str:
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


def _command(args: str) -> list[str]:
    if args.startswith("["):
        value = json.loads(args)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"not a JSON list of strings: {args}")
        return value
    return ["/bin/sh", "-c", args]


def dockerfile_config(text: str, base_env: dict[str, str] | None = None) -> ImageConfig:
    """The configuration a Dockerfile's final stage gives, on a base image whose
    environment is base_env. Raises ValueError for configuration this does not model."""
    stages: dict[str, ImageConfig] = {}
    cfg: ImageConfig | None = None
    cmd_here = False
    for word, args in _instructions(text):
        if word == "FROM":
            parts = [w for w in args.split() if not w.startswith("--")]  # --platform=...
            parent = stages.get(parts[0].lower()) if parts else None  # FROM an earlier stage
            if parent is not None:
                cfg = dataclasses.replace(parent, env=dict(parent.env),
                                          unsupported=list(parent.unsupported))
            else:
                cfg = ImageConfig(env=dict(base_env or {}))
            cmd_here = False
            if len(parts) >= 3 and parts[1].upper() == "AS":
                stages[parts[2].lower()] = cfg
            continue
        if cfg is None:
            if word == "ARG":  # an ARG before FROM only parameterises FROM lines
                continue
            raise ValueError(f"{word} before the first FROM")
        if word == "ENV":
            old = dict(cfg.env)
            first = args.split(None, 1)
            if first and "=" not in first[0]:  # the legacy form: ENV KEY value with spaces
                cfg.env[first[0]] = _expand(first[1] if len(first) > 1 else "", old)
            else:
                for pair in shlex.split(args):
                    key, sep, value = pair.partition("=")
                    if not sep:
                        raise ValueError(f"ENV {args}: {pair} is not KEY=VALUE")
                    cfg.env[key] = _expand(value, old)
        elif word == "USER":
            cfg.user = _expand(args, cfg.env)
        elif word == "WORKDIR":
            cfg.workdir = posixpath.join(cfg.workdir, _expand(args, cfg.env))
        elif word == "ENTRYPOINT":
            cfg.entrypoint = _command(args)
            if not cmd_here:  # as Docker does: a new ENTRYPOINT drops the base's CMD
                cfg.cmd = None
        elif word == "CMD":
            cfg.cmd, cmd_here = _command(args), True
        elif word not in _CONTENT:
            cfg.unsupported.append(f"{word} {args}")
    if cfg is None:
        raise ValueError("no FROM in the Dockerfile")
    if cfg.unsupported:
        raise ValueError("the final stage has instructions mkimage.py does not model: "
                         + "; ".join(cfg.unsupported))
    return cfg


def _walk(path: str, rel: str) -> Iterator[tuple[str, str]]:
    """(name in the layer, path) under path: parents first, names in byte order."""
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: os.fsencode(e.name))
    for e in entries:
        name = f"{rel}/{e.name}" if rel else e.name
        yield name, e.path
        if e.is_dir(follow_symlinks=False):
            yield from _walk(e.path, name)


class _Hashing:
    """A write-only file that hashes and counts what passes through."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def write(self, b: bytes) -> int:
        self.sha.update(b)
        self.size += len(b)
        return self.f.write(b)

    def tell(self) -> int:
        return self.size


def rootfs_layer(root: str, out: BinaryIO) -> tuple[str, int, int, int]:
    """Write root's tree to out as a layer tar: (diff_id, size, entries, left out)."""
    dev = os.lstat(root).st_dev
    sink = _Hashing(out)
    seen: dict[tuple[int, int], str] = {}
    entries = skipped = 0
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.GNU_FORMAT) as tar:  # type: ignore[call-overload]
        for name, path in _walk(root, ""):
            st = os.lstat(path)
            if st.st_dev != dev:
                raise ValueError(f"{path} is on another filesystem (something still mounted?)")
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = 0, stat.S_IMODE(st.st_mode)
            info.uid, info.gid = st.st_uid, st.st_gid
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
            elif stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                first = seen.setdefault((st.st_dev, st.st_ino), name) if st.st_nlink > 1 else name
                if first != name:
                    info.type, info.linkname = tarfile.LNKTYPE, first
                else:
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                    entries += 1
                    continue
            else:
                skipped += 1
                continue
            tar.addfile(info)
            entries += 1
    return "sha256:" + sink.sha.hexdigest(), sink.size, entries, skipped


def _env_pair(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE")
    return key, val


def _json_list(value: str) -> list[str]:
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
        raise argparse.ArgumentTypeError(f"{value!r} is not a JSON list of strings")
    return parsed


def rootfs_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="mkimage.py rootfs",
                                description="Pack a root filesystem directory as an image.")
    p.add_argument("out")
    p.add_argument("rootfs")
    p.add_argument("ref")
    p.add_argument("--dockerfile", help="take USER/ENV/ENTRYPOINT/CMD/WORKDIR of its final stage")
    p.add_argument("--env", type=_env_pair, action="append", default=[],
                   help="KEY=VALUE the base image gives (before the Dockerfile's ENV)")
    p.add_argument("--user")
    p.add_argument("--entrypoint", type=_json_list)
    p.add_argument("--cmd", type=_json_list)
    p.add_argument("--workdir")
    a = p.parse_args(argv)
    base = dict(a.env)
    try:
        if a.dockerfile:
            with open(a.dockerfile) as f:
                cfg = dockerfile_config(f.read(), base)
        else:
            cfg = ImageConfig(env=base)
    except ValueError as exc:
        print(f"mkimage.py rootfs: {a.dockerfile}: {exc}", file=sys.stderr)
        return 2
    for field in ("user", "entrypoint", "cmd", "workdir"):
        if getattr(a, field) is not None:
            setattr(cfg, field, getattr(a, field))
    if not os.path.isdir(a.rootfs):
        print(f"mkimage.py rootfs: {a.rootfs} is not a directory", file=sys.stderr)
        return 2
    tmp = a.out + ".tmp"
    layer_path = a.out + ".layer.tmp"
    try:
        with open(layer_path, "w+b") as layer:
            diff_id, size, entries, skipped = rootfs_layer(a.rootfs, layer)
            layer.seek(0)
            _archive(tmp, a.ref, cfg.fields(), diff_id, size, layer)
        os.replace(tmp, a.out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        if os.path.exists(layer_path):
            os.unlink(layer_path)
    print(f"mkimage.py rootfs: {a.out}: {entries} entries ({skipped} device nodes, fifos or "
          f"sockets left out), layer {size / 1e6:.1f} MB, {diff_id}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "rootfs":
        return rootfs_main(argv[2:])
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
