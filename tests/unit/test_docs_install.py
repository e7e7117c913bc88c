"""The install the docs give is this project's (issue 29): every clone and git-URL install in
the README and the docs names pyproject.toml's repository URL, the Install page names every
extra and every console script, and the licence the metadata states is the LICENSE file.
(tests/packaging builds and installs what these pages say.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
# `git clone URL` and `git+URL`, the URL up to a quote, space or the end of the line.
GIT_URL = re.compile(r"(?:git clone |git\+)(https?://[^\s'\"`@]+)")


def test_every_clone_and_git_url_is_the_repository() -> None:
    repository = PROJECT["urls"]["Repository"]
    found = {page.relative_to(REPO).as_posix(): GIT_URL.findall(page.read_text())
             for page in PAGES}
    named = {page: urls for page, urls in found.items() if urls}
    assert {"README.md", "docs/install.md", "docs/index.md", "docs/tutorial-local.md",
            "docs/tutorial-kind.md"} <= set(named), named
    assert {url for urls in named.values() for url in urls} == {repository}, named


def test_the_install_page_names_every_extra_and_command_and_is_in_the_nav() -> None:
    page = (REPO / "docs" / "install.md").read_text()
    for extra in PROJECT["optional-dependencies"]:
        assert f"| `{extra}` |" in page, extra
    for script in PROJECT["scripts"]:
        assert f"`{script}`" in page, script
    assert "install.md" in (REPO / "mkdocs.yml").read_text()
    assert "(docs/install.md)" in (REPO / "README.md").read_text()


def test_the_license_is_the_apache_license_the_metadata_states() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text
