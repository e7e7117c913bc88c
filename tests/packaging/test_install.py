"""Install as written (issue 29): build the sdist and the wheel with the build backend that
pyproject.toml names, install each into a fresh venv with no extra and with each extra the
console scripts need (and the checkout and git-URL forms that docs/install.md gives), and
run every console script's ``--help`` from the installed venv, away from the checkout.

A script whose extra is installed prints its help and exits 0; a script whose extra is
missing prints one line naming the extra to install and exits 2. (The admission extra's kopf
brings click and pyyaml, so with it alone kubectl-dispatch runs too: the test asks the venv
which extras' modules it has, and the base install has neither.) The LICENSE file ships in
both archives and the metadata carries the licence and the project URLs.

Needs the package index (as ``make venv`` does): each venv resolves its dependencies the
way a user's ``pip install`` does. About 75 s on two busy cores with a warm pip cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
VERSION = PROJECT["version"]
# Which extra each console script needs (None: the base install is enough).
NEEDS = {"kubectl-dispatch": "cli", "dispatch-admission": "admission",
         "dispatch-conformance": None}
INSTALL_TIMEOUT = 600


@dataclass(frozen=True)
class Dists:
    src: Path  # a copy of the checkout's files (tracked and new, not ignored), a git repo
    sdist: Path
    wheel: Path


def _run(args: Sequence[str | Path], *, cwd: Path | None = None,
         env: dict[str, str] | None = None,
         timeout: float = INSTALL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def _clean_env() -> dict[str, str]:
    """The environment without anything that would point an installed script back at the
    checkout or at another venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _venv(path: Path) -> Path:
    """A fresh venv from the base interpreter; pip is this venv's, pointed at it."""
    _run([sys.executable, "-m", "venv", "--without-pip", path])
    return path / "bin" / "python"


def _pip_install(python: Path, *requirements: str, cwd: Path) -> None:
    # No byte-compiling: it proves nothing here and is most of an install's time.
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile",
          *requirements], cwd=cwd, env=_clean_env())


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    top = tmp_path_factory.mktemp("packaging")
    src = top / "src"
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                  cwd=REPO).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((REPO / name).read_bytes())
    # A repository of its own, so that the git-URL form installs from it as from the remote.
    git = ["git", "-c", "user.name=packaging test", "-c", "user.email=test@invalid"]
    _run([*git, "init", "-q"], cwd=src)
    _run([*git, "add", "-A"], cwd=src)
    _run([*git, "commit", "-q", "-m", "snapshot"], cwd=src)
    # The build backend pyproject.toml names, at the versions it asks for (as an isolated
    # build would install), and the reference frontend: sdist first, the wheel from it.
    builder = _venv(top / "build-venv")
    _pip_install(builder, *PYPROJECT["build-system"]["requires"], "build", cwd=top)
    _run([builder, "-m", "build", "--no-isolation", "--outdir", top / "dist", src], cwd=top)
    sdist, = (top / "dist").glob("*.tar.gz")
    wheel, = (top / "dist").glob("*.whl")
    return Dists(src, sdist, wheel)


def test_the_license_and_urls_ship_in_both_archives(dists: Dists) -> None:
    license_text = (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in license_text

    with zipfile.ZipFile(dists.wheel) as whl:
        names = whl.namelist()
        info = f"dispatch_kubeflow-{VERSION}.dist-info"
        assert whl.read(f"{info}/licenses/LICENSE") == license_text
        metadata = HeaderParser().parsestr(whl.read(f"{info}/METADATA").decode())
        assert "dispatch_kubeflow/py.typed" in names
        assert "admission/py.typed" in names
        assert not [n for n in names if n.startswith(("tests/", "bench/", "chaos/", "docs/"))]
    with tarfile.open(dists.sdist) as sdist:
        member = sdist.extractfile(f"dispatch_kubeflow-{VERSION}/LICENSE")
        assert member is not None
        assert member.read() == license_text

    assert metadata["License-Expression"] == PROJECT["license"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert urls == PROJECT["urls"]
    assert set(metadata.get_all("Provides-Extra") or []) == set(PROJECT["optional-dependencies"])


def test_the_scripts_are_the_ones_this_test_knows() -> None:
    assert set(PROJECT["scripts"]) == set(NEEDS)
    assert {e for e in NEEDS.values() if e} <= set(PROJECT["optional-dependencies"])


# (what is installed, the extras): each archive bare and with each extra a script needs;
# the docs' checkout and git-URL forms once each.
CASES = [
    ("wheel", ()), ("wheel", ("cli",)), ("wheel", ("admission",)),
    ("sdist", ()), ("sdist", ("cli",)), ("sdist", ("admission",)),
    ("checkout", ("cli",)), ("git", ("admission",)),
]


@pytest.mark.parametrize(("form", "extras"), CASES,
                         ids=[f"{f}[{','.join(e)}]" for f, e in CASES])
def test_each_console_script_from_a_fresh_venv(
        dists: Dists, form: str, extras: tuple[str, ...], tmp_path: Path) -> None:
    tag = f"[{','.join(extras)}]" if extras else ""
    requirement = {
        "wheel": f"dispatch-kubeflow{tag} @ {dists.wheel.as_uri()}",
        "sdist": f"dispatch-kubeflow{tag} @ {dists.sdist.as_uri()}",
        "checkout": f"{dists.src}{tag}",  # pip install '.[cli]' in the checkout
        "git": f"dispatch-kubeflow{tag} @ git+{dists.src.as_uri()}",
    }[form]
    python = _venv(tmp_path / "venv")
    _pip_install(python, requirement, cwd=tmp_path)
    env = _clean_env()

    # The installed copy is the one that runs, with its licence, not the checkout's.
    where = _run([python, "-c",
                  "import importlib.metadata as m, dispatch_kubeflow, admission\n"
                  "print(dispatch_kubeflow.__file__)\nprint(admission.__file__)\n"
                  "print(*[f for f in m.files('dispatch-kubeflow') if f.name == 'LICENSE'])"],
                 cwd=tmp_path, env=env).stdout.splitlines()
    assert all(line.startswith(str(tmp_path / "venv")) for line in where[:2]), where
    assert where[2].endswith("licenses/LICENSE"), where

    # Which extras' modules the venv has: kopf (the admission extra) brings click and
    # pyyaml, so the admission extra alone gives kubectl-dispatch what it needs.
    present = _run([python, "-c",
                    "from dispatch_kubeflow.core import extras\n"
                    "from importlib.util import find_spec\n"
                    "for extra in ('cli', 'admission'):\n"
                    "    if all(map(find_spec, getattr(extras, extra.upper()))): print(extra)"],
                   cwd=tmp_path, env=env).stdout.split()
    assert set(extras) <= set(present), present
    if not extras:
        assert present == []  # the base install has neither

    for script, extra in NEEDS.items():
        done = subprocess.run([tmp_path / "venv" / "bin" / script, "--help"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        if extra is None or extra in present:
            assert done.returncode == 0, (script, done.stdout, done.stderr)
            assert done.stdout.lower().startswith("usage:"), (script, done.stdout)
            assert done.stderr == "", (script, done.stderr)
        else:
            assert done.returncode == 2, (script, done.returncode, done.stdout, done.stderr)
            assert done.stdout == ""
            assert done.stderr.count("\n") == 1, (script, done.stderr)
            assert done.stderr.startswith(f"{script}: needs the '{extra}' extra"), done.stderr
            assert done.stderr.endswith(f"pip install 'dispatch-kubeflow[{extra}]'\n")
