"""The API reference (docs/reference/api.md): every public name is on the page under the path
users import, every object it renders has a Google-style docstring (Args for every
parameter, Returns for every value, attributes documented) with no Sphinx role, and
docs/check_rendered.py, which ``make docs`` runs on the built page, finds a role left in
rendered HTML."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import dispatch_kubeflow
import dispatch_kubeflow.errors
import dispatch_kubeflow.testing
from tests.conftest import REPO, load_script

PAGE = REPO / "docs" / "reference" / "api.md"
ROLE = re.compile(r":(?:py:)?(?:meth|class|mod|func|attr|data|exc|obj|const):`")


check_rendered = load_script(REPO / "docs" / "check_rendered.py", "check_rendered")


# --- the check make docs runs ----------------------------------------------------------------

def test_a_role_in_rendered_html_is_found() -> None:
    page = ("<p>Open one with\n"
            "<p>Use :meth:<code>connect</code> or :py:class:<code>~x.Backend</code>, see\n"
            ":mod:`dispatch_kubeflow.state`.</p>\n")
    found = check_rendered.find_roles(page)
    assert [f.line for f in found] == [2, 2, 3]
    assert "meth:connect" in found[0].text
    assert ":mod:`dispatch_kubeflow.state`" in found[2].text


def test_no_role_no_finding() -> None:
    page = ("<p>At 10:30:00, <code>key: value</code>, a :meth without its colon, "
            "<a href=\"#x\">dispatch_kubeflow.Backend.wait</a>, class: Backend.</p>")
    assert check_rendered.find_roles(page) == []


def test_an_entity_encoded_role_is_found() -> None:
    assert len(check_rendered.find_roles("<p>&#58;func&#58;<code>f</code></p>")) == 1


def test_main_names_file_line_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    bad = tmp_path / "index.html"
    bad.write_text("<html>\n<p>See :attr:<code>Backend.kube</code>.</p>\n</html>\n")
    good = tmp_path / "good.html"
    good.write_text("<p>See <code>Backend.kube</code>.</p>\n")
    assert check_rendered.main([str(good)]) == 0
    assert check_rendered.main([str(good), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err
    assert ":attr:Backend.kube" in err


# --- the page ------------------------------------------------------------------------------

def blocks() -> list[tuple[str, dict[str, Any]]]:
    """The page's ``::: path`` blocks with their options."""
    out: list[tuple[str, dict[str, Any]]] = []
    lines = PAGE.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("::: "):
            continue
        body = []
        for more in lines[i + 1:]:
            if not more.startswith("    "):
                break
            body.append(more[4:])
        options = (yaml.safe_load("\n".join(body)) or {}).get("options", {}) if body else {}
        out.append((line[4:].strip(), options))
    return out


def test_every_public_name_is_on_the_page_by_its_public_path() -> None:
    paths = {path for path, _ in blocks()}
    for name in dispatch_kubeflow.__all__:
        assert f"dispatch_kubeflow.{name}" in paths, name
    for name in dispatch_kubeflow.errors.__all__:
        assert f"dispatch_kubeflow.{name}" in paths or \
            f"dispatch_kubeflow.errors.{name}" in paths, name
    for name in dispatch_kubeflow.testing.__all__:
        assert f"dispatch_kubeflow.testing.{name}" in paths, name
    for path in paths:  # no heading names a defining module when a public path exists
        module, _, name = path.rpartition(".")
        if name in dispatch_kubeflow.__all__:
            assert module == "dispatch_kubeflow", path


def _documented(parent: Any) -> set[str]:
    """The names a docstring's Attributes (or Parameters) section documents."""
    names: set[str] = set()
    if parent.docstring is None:
        return names
    for section in parent.docstring.parsed:
        if section.kind.value in ("attributes", "parameters", "other parameters"):
            names.update(item.name.lstrip("*") for item in section.value)
    return names


def _rendered(griffe: Any) -> list[tuple[str, Any, set[str]]]:
    """Each object the page renders: its path, the object, and the names its parent's
    docstring documents (for a member)."""
    package = griffe.load("dispatch_kubeflow", search_paths=[str(REPO)],
                          docstring_parser="google", resolve_aliases=True,
                          resolve_external=False)
    out: list[tuple[str, Any, set[str]]] = []
    for path, options in blocks():
        obj = package[path.removeprefix("dispatch_kubeflow.")]
        target = obj.final_target if obj.is_alias else obj
        out.append((path, target, set()))
        if not target.is_class or options.get("members") is False:
            continue
        wanted = options.get("members")
        inherited = set(options.get("inherited_members") or ())
        documented = _documented(target)
        for name, member in target.all_members.items():
            if name.startswith("_") or (wanted is not None and name not in wanted):
                continue
            if name not in target.members and name not in inherited:
                continue
            member = member.final_target if member.is_alias else member
            out.append((f"{path}.{name}", member, documented))
    return out


def test_every_rendered_object_has_a_google_docstring() -> None:
    griffe = pytest.importorskip("griffe")
    problems: list[str] = []
    for path, obj, documented in _rendered(griffe):
        if obj.docstring is None:
            if obj.is_attribute and path.rpartition(".")[2] in documented:
                continue
            problems.append(f"{path}: no docstring")
            continue
        if ROLE.search(obj.docstring.value):
            problems.append(f"{path}: a Sphinx role in its docstring")
        if not obj.is_function or "property" in obj.labels:
            continue
        sections = {s.kind.value: s for s in obj.docstring.parsed}
        args = {p.name.lstrip("*") for p in sections["parameters"].value} \
            if "parameters" in sections else set()
        for param in obj.parameters:
            if param.name not in ("self", "cls") and param.name not in args:
                problems.append(f"{path}: parameter {param.name} not in Args")
        returns = str(obj.returns) if obj.returns is not None else "None"
        if returns != "None" and "returns" not in sections and "yields" not in sections:
            problems.append(f"{path}: returns {returns}, no Returns section")
    assert not problems, "\n".join(problems)


def test_the_backends_calls_say_what_they_raise() -> None:
    griffe = pytest.importorskip("griffe")
    calls = {"connect", "start", "open", "inspect", "wait", "hold", "release", "jobs",
             "events", "stop_job", "find", "output"}
    rendered = {path: obj for path, obj, _ in _rendered(griffe)}
    for call in calls:
        obj = rendered[f"dispatch_kubeflow.Backend.{call}"]
        kinds = {s.kind.value for s in obj.docstring.parsed}
        assert "raises" in kinds, call
