"""docs/kubectl.md is what docs/capture_kubectl.py captured: the template's prose and
commands exactly, with output under every command."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def capture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("capture_kubectl", DOCS / "capture_kubectl.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("capture_kubectl", module)
    spec.loader.exec_module(module)
    return module


def fake_page(template: str, job: str = "01KQ7ZJ8C5T9W1XG8M2N3P4R5S", silent: str = "") -> str:
    ref = f"tutorial/dj-{job.lower()}-s1"
    out = []
    for line in template.splitlines():
        out.append(line.replace("{JOB}", job).replace("{REF}", ref))
        if line.startswith("$ kubectl dispatch ") and line != silent:
            out.append(f"some output naming dj-{job.lower()}-s1")
    return "\n".join(out) + "\n"


def test_the_page_is_the_capture() -> None:
    assert capture_module().check() == []


def test_the_check_notices_drift(tmp_path: Path) -> None:
    cap = capture_module()
    page = tmp_path / "kubectl.md"
    page.write_text(fake_page(cap.TEMPLATE))
    assert cap.check(page) == []
    page.write_text(fake_page(cap.TEMPLATE).replace("on call", "in charge"))
    assert "is not what the template" in cap.check(page)[0]
    page.write_text(fake_page(cap.TEMPLATE, silent="$ kubectl dispatch get -o yaml"))
    assert cap.check(page) == [f"{page}:{line_of(page, 'get -o yaml')}: the command printed "
                               "nothing: $ kubectl dispatch get -o yaml"]


def line_of(page: Path, text: str) -> int:
    return next(i for i, line in enumerate(page.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("directive", ["start", "wait running", "wait held", "sleep 3"])
def test_the_template_uses_known_directives(directive: str) -> None:
    assert f"<!-- capture: {directive} -->" in capture_module().TEMPLATE
