"""The controller's real image, from deploy/local/controller-image.sh: configured as
deploy/admission/Dockerfile's final stage says, holding the venv's dispatch-admission and a
python3 to run it, and reused from the cache on the next call.

Uses the cache's archive ($DISPATCH_CACHE/images, as deploy/local/lib.sh has it) when the
working tree's is there; builds one into a temporary directory otherwise (root, mmdebstrap and
network to Debian and PyPI; about a minute and a half, less when the cache has the base rootfs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_controller_image import check_config_matches_dockerfile, read_archive

pytestmark = [pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy/local/controller-image.sh"
CACHE = Path(os.environ.get("DISPATCH_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "dispatch-kubeflow")


def _run(out_dir: Path, *flags: str) -> str:
    result = subprocess.run([str(SCRIPT), *flags, str(out_dir)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working tree's image archive: the cache's, else one built here (removed after)."""
    cached = Path(_run(CACHE / "images", "--print-path"))
    if cached.is_file():
        yield cached
        return
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        pytest.skip("building the image needs root and mmdebstrap (deploy/local/deps.sh)")
    out_dir = tmp_path_factory.mktemp("images")
    for base in (CACHE / "images").glob("admission-base-*.tar"):
        # The cache's base rootfs, when its key is the current one, saves the mmdebstrap step.
        try:
            os.link(base, out_dir / base.name)
        except OSError:
            shutil.copy(base, out_dir / base.name)
    try:
        built = Path(_run(out_dir))
        assert built.parent == out_dir
        assert built.name == cached.name  # the same inputs, the same name
        yield built
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)  # some 300 MB


def test_image_config_is_the_dockerfiles(image: Path) -> None:
    check_config_matches_dockerfile(read_archive(image))


def _resolve(members: dict[str, tarfile.TarInfo], name: str) -> tarfile.TarInfo:
    """The member name leads to in the container: symlinks (also of parent directories) and
    hard links followed inside the layer."""
    parts: list[str] = []
    todo = name.split("/")
    hops = 0
    while todo:
        comp = todo.pop(0)
        if comp in ("", "."):
            continue
        if comp == "..":
            if parts:
                parts.pop()
            continue
        parts.append(comp)
        m = members.get("/".join(parts))
        assert m is not None, f"{name}: no {'/'.join(parts)} in the layer"
        if m.issym():
            hops += 1
            assert hops < 40, f"{name}: too many symlinks"
            parts = [] if m.linkname.startswith("/") else parts[:-1]
            todo = m.linkname.split("/") + todo
    m = members["/".join(parts)]
    return members[m.linkname] if m.islnk() else m


def test_layer_has_the_venv_entrypoint_and_python(image: Path, tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    read_archive(image, layer)
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar.getmembers()}
    entry = members["venv/bin/dispatch-admission"]
    assert entry.isfile()
    assert entry.mode & 0o111 == 0o111
    python = _resolve(members, "venv/bin/python3")
    assert python.isfile()
    assert python.name.startswith("usr/bin/python3")
    assert python.mode & 0o111 == 0o111
    assert python.size > 1_000_000  # the interpreter, not a script
    # Root's, so the container's user 65532 cannot change it; no pip in the read-only image;
    # no device nodes (the runtime mounts /dev).
    assert (entry.uid, entry.gid) == (0, 0)
    assert "venv/bin/pip" not in members
    assert not [m.name for m in members.values() if m.ischr() or m.isblk() or m.isfifo()]


def test_second_call_is_a_cache_hit(image: Path) -> None:
    start = time.monotonic()
    again = _run(image.parent)
    elapsed = time.monotonic() - start
    assert again == str(image)
    assert elapsed < 2, f"a cache hit took {elapsed:.1f}s"
