"""The controller's image is packed by deploy/local/mkimage.py (``rootfs``) and configured from
deploy/admission/Dockerfile's final stage: the packing is deterministic and keeps modes, links
and owners; the image runs as the Dockerfile says (User, Entrypoint, Env).

The helpers here (an independent reading of the Dockerfile, an archive reader) serve the
cluster test of the real image too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shlex
import stat
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MKIMAGE = REPO / "deploy/local/mkimage.py"
DOCKERFILE = REPO / "deploy/admission/Dockerfile"
REF = "localhost/dispatch-admission:kind"


@dataclass
class Stage:
    """What a Dockerfile's final stage sets, read line by line."""

    user: str | None = None
    entrypoint: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)


def dockerfile_final_stage(path: Path = DOCKERFILE) -> Stage:
    stage = Stage()
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, args = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stage = Stage()
        elif word == "USER":
            stage.user = args.strip()
        elif word == "ENTRYPOINT":
            stage.entrypoint = json.loads(args)
        elif word == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                stage.env[key] = value
    return stage


@dataclass
class Archive:
    """A Docker archive as `ctr images import` reads it."""

    manifest: list[dict[str, Any]]
    config: dict[str, Any]
    layer_digest: str
    members: list[tarfile.TarInfo]  # the outer archive's

    @property
    def env(self) -> dict[str, str]:
        return dict(e.split("=", 1) for e in self.config["config"]["Env"])


def read_archive(path: Path, layer_to: Path | None = None) -> Archive:
    """Read the archive's manifest and config; hash the layer (copy it to layer_to if given)."""
    with tarfile.open(path) as tar:
        members = tar.getmembers()

        def read(name: str) -> bytes:
            f = tar.extractfile(name)
            assert f is not None, name
            return f.read()

        manifest = json.loads(read("manifest.json"))
        config = json.loads(read(manifest[0]["Config"]))
        layer = tar.extractfile(manifest[0]["Layers"][0])
        assert layer is not None
        sha = hashlib.sha256()
        with open(layer_to or os.devnull, "wb") as out:
            while chunk := layer.read(1 << 20):
                sha.update(chunk)
                out.write(chunk)
    return Archive(manifest, config, "sha256:" + sha.hexdigest(), members)


def check_config_matches_dockerfile(archive: Archive) -> None:
    """The comparison both tests make: User, Entrypoint and the Dockerfile's Env."""
    want = dockerfile_final_stage()
    cfg = archive.config["config"]
    assert want.user == "65532:65532"  # the Deployment's runAsUser/runAsGroup
    assert cfg["User"] == want.user
    assert want.entrypoint == ["/venv/bin/dispatch-admission"]
    assert cfg["Entrypoint"] == want.entrypoint
    assert {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}.items() <= want.env.items()
    assert want.env.items() <= archive.env.items()
    assert archive.env["PATH"].split(":")[0] == "/venv/bin"
    assert archive.config["rootfs"]["diff_ids"] == [archive.layer_digest]
    assert archive.manifest[0]["RepoTags"] == [REF]


def _mkimage() -> ModuleType:
    name = "_dispatch_mkimage"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MKIMAGE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Ran:
    returncode: int
    stderr: str


def _main(*args: str, own_process: bool = False) -> Ran:
    """mkimage.py with ``args``: by default its ``main`` in this process (the same code
    without an interpreter's start, ~0.2 s a call); ``own_process`` runs the script itself."""
    if own_process:
        done = subprocess.run([sys.executable, str(MKIMAGE), *args], capture_output=True,
                              text=True, check=False)
        return Ran(done.returncode, done.stderr)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = _mkimage().main(["mkimage.py", *args])
    return Ran(code, err.getvalue())


def _pack(rootfs: Path, out: Path, *extra: str, own_process: bool = False) -> Ran:
    return _main("rootfs", str(out), str(rootfs), REF, "--dockerfile", str(DOCKERFILE),
                 "--env", "PATH=/venv/bin:/usr/bin:/bin", *extra, own_process=own_process)


LONG = "site-packages/" + "a-very-long-directory-name-" * 5 + "/module.py"  # over 100 bytes


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """A tiny root filesystem: modes, symlinks, a hard link, a long path and a fifo."""
    root = tmp_path / "rootfs"
    (root / "venv/bin").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "secret").mkdir()
    (root / "usr/bin/python3.11").write_bytes(b"\x7fELF not really")
    (root / "usr/bin/python3").symlink_to("python3.11")
    (root / "venv/bin/python3").symlink_to("/usr/bin/python3")
    (root / "venv/bin/dispatch-admission").write_text("#!/venv/bin/python3\n")
    (root / "venv/bin/dispatch-admission-link").hardlink_to(root / "venv/bin/dispatch-admission")
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / LONG).parent.mkdir(parents=True)
    (root / LONG).write_text("x = 1\n")
    os.mkfifo(root / "fifo")
    os.chmod(root / "usr/bin/python3.11", 0o755)
    os.chmod(root / "venv/bin/dispatch-admission", 0o4755)
    os.chmod(root / "etc/passwd", 0o644)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "secret", 0o700)
    return root


def _layer(archive: Path, tmp_path: Path) -> tuple[Archive, dict[str, tarfile.TarInfo], list[str]]:
    layer = tmp_path / f"{archive.stem}.layer.tar"
    a = read_archive(archive, layer)
    with tarfile.open(layer) as tar:
        members = tar.getmembers()
    return a, {m.name: m for m in members}, [m.name for m in members]


def test_rootfs_packing_is_deterministic(rootfs: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.tar", tmp_path / "two.tar"
    # The first in a process of its own: the packing depends on nothing of the process
    # (hash seeds, dict order), nor on timestamps.
    assert _pack(rootfs, one, own_process=True).returncode == 0
    os.utime(rootfs / "etc/passwd", (1_700_000_000, 1_700_000_000))
    os.utime(rootfs / "venv/bin", (1_700_000_000, 1_700_000_000))
    result = _pack(rootfs, two)
    assert result.returncode == 0, result.stderr
    assert one.read_bytes() == two.read_bytes()
    assert "1 device nodes, fifos or sockets left out" in result.stderr
    assert not list(tmp_path.glob("*.tmp"))


def test_rootfs_layer_keeps_modes_links_and_owners(rootfs: Path, tmp_path: Path) -> None:
    out = tmp_path / "image.tar"
    assert _pack(rootfs, out).returncode == 0
    archive, m, names = _layer(out, tmp_path)
    assert all(t.mtime == 0 for t in archive.members)
    assert all(t.mtime == 0 for t in m.values())
    # Parents first, each directory's entries in byte order.
    assert names == sorted(names, key=lambda n: [os.fsencode(p) for p in n.split("/")])
    assert "fifo" not in m
    assert stat.S_IMODE(m["venv/bin/dispatch-admission"].mode) == 0o4755
    assert stat.S_IMODE(m["usr/bin/python3.11"].mode) == 0o755
    assert stat.S_IMODE(m["etc/passwd"].mode) == 0o644
    assert m["tmp"].isdir()
    assert stat.S_IMODE(m["tmp"].mode) == 0o1777
    assert stat.S_IMODE(m["secret"].mode) == 0o700
    assert m["usr/bin/python3"].issym()
    assert m["usr/bin/python3"].linkname == "python3.11"
    assert m["venv/bin/python3"].linkname == "/usr/bin/python3"
    # A hard link is a link to the first name, which holds the data.
    assert m["venv/bin/dispatch-admission"].isfile()
    link = m["venv/bin/dispatch-admission-link"]
    assert link.islnk()
    assert link.linkname == "venv/bin/dispatch-admission"
    assert m[LONG].size == len("x = 1\n")
    assert {(t.uid, t.gid) for t in m.values()} == {(os.getuid(), os.getgid())}
    assert {(t.uname, t.gname) for t in m.values()} == {("", "")}


def test_rootfs_config_comes_from_the_dockerfile(rootfs: Path, tmp_path: Path) -> None:
    out = tmp_path / "image.tar"
    assert _pack(rootfs, out).returncode == 0
    archive = read_archive(out)
    check_config_matches_dockerfile(archive)
    cfg = archive.config["config"]
    assert cfg["Env"][0] == "PATH=/venv/bin:/usr/bin:/bin"  # the base image's, then the ENV's
    assert cfg["WorkingDir"] == "/"
    assert cfg["Cmd"] is None


def test_explicit_flags_override_the_dockerfile(rootfs: Path, tmp_path: Path) -> None:
    out = tmp_path / "image.tar"
    result = _pack(rootfs, out, "--user", "1000:1000", "--entrypoint", '["/bin/true"]')
    assert result.returncode == 0, result.stderr
    cfg = read_archive(out).config["config"]
    assert (cfg["User"], cfg["Entrypoint"]) == ("1000:1000", ["/bin/true"])


def test_rootfs_refuses_bad_input(rootfs: Path, tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM scratch\nEXPOSE 8443\nENTRYPOINT [\"/x\"]\n")
    result = _main("rootfs", str(tmp_path / "o.tar"), str(rootfs), REF, "--dockerfile", str(bad))
    assert result.returncode == 2
    assert "EXPOSE 8443" in result.stderr
    result = _pack(tmp_path / "missing", tmp_path / "o.tar")
    assert result.returncode == 2
    assert "is not a directory" in result.stderr
    assert not list(tmp_path.glob("o.tar*"))


def test_dockerfile_reading() -> None:
    mk = _mkimage()
    cfg = mk.dockerfile_config(
        'ARG V=1\nFROM python:3.11 AS build\nENV A=1 \\\n    B="two words"\nCMD ["x"]\n'
        "FROM build AS mid\nENV LEGACY some value\nWORKDIR /app\nWORKDIR sub\n"
        "# a comment\nFROM mid\nENV PATH=/venv/bin:$PATH C=${A}x\nUSER 65532:65532\n"
        'ENTRYPOINT ["/e"]\nCOPY --from=build /venv /venv\nRUN true\n',
        {"PATH": "/usr/bin"})
    assert cfg.env == {"PATH": "/venv/bin:/usr/bin", "A": "1", "B": "two words",
                       "LEGACY": "some value", "C": "1x"}
    assert cfg.workdir == "/app/sub"
    assert cfg.user == "65532:65532"
    assert cfg.entrypoint == ["/e"]
    assert cfg.cmd is None  # a new ENTRYPOINT drops the inherited CMD, as Docker does
    shell = mk.dockerfile_config("FROM x\nENTRYPOINT exec run --flag\n")
    assert shell.entrypoint == ["/bin/sh", "-c", "exec run --flag"]
    real = mk.dockerfile_config(DOCKERFILE.read_text(), {"PATH": "/bin"})
    stage = dockerfile_final_stage()
    assert (real.user, real.entrypoint) == (stage.user, stage.entrypoint)
    assert real.env == {"PATH": "/bin", **stage.env}
    with pytest.raises(ValueError, match="HEALTHCHECK"):
        mk.dockerfile_config("FROM x\nHEALTHCHECK CMD true\n")
    with pytest.raises(ValueError, match="no FROM"):
        mk.dockerfile_config("# empty\n")


def test_pause_archive_keeps_its_config(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF")
    out = tmp_path / "pause.tar"
    assert _main("pause", str(out), str(binary)).returncode == 0
    archive = read_archive(out)
    assert archive.manifest[0]["RepoTags"] == ["localhost/pause:dispatch"]
    assert archive.config["config"] == {"Entrypoint": ["/pause"], "Cmd": None,
                                        "Env": ["PATH=/bin"], "WorkingDir": "/"}
    assert [m.name for m in archive.members][1:] == ["layer.tar", "manifest.json"]
    with tarfile.open(fileobj=io.BytesIO(out.read_bytes())) as tar:
        assert all(m.mtime == 0 for m in tar.getmembers())
