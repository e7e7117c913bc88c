"""Generated and recorded docs are current: the configuration reference (generated from
the settings model) and the tutorial output the tutorial page shows."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from dispatch_kubeflow import settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference",
                                                  DOCS / "gen_config_reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_page_is_the_generated_one() -> None:
    committed = (DOCS / "reference" / "configuration.md").read_text()
    assert committed == _generator().render(), (
        "docs/reference/configuration.md is out of date: run python docs/gen_config_reference.py")


def test_every_key_of_the_model_is_on_the_page() -> None:
    page = _generator().render()
    for model in (settings.Settings, settings.ClusterSettings, settings.ProbeRuntimeSettings,
                  settings.KueueSettings, settings.TimeoutSettings):
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in page, name


def test_go_durations() -> None:
    from datetime import timedelta

    go = _generator().go_duration
    assert go(timedelta(seconds=10)) == "10s"
    assert go(timedelta(minutes=3)) == "3m"
    assert go(timedelta(hours=1, minutes=30)) == "1h30m"
    assert go(timedelta(milliseconds=1500)) == "1.5s"


def test_recorded_tutorial_output_is_what_the_seed_shows() -> None:
    """The output docs/tutorial-local.md includes is a real run's, in the seed's shape."""
    from tests.cluster.test_tutorial import assert_seed_output

    assert_seed_output((DOCS.parent / "examples" / "tutorial-output.txt").read_text())


def _reason_fragments() -> set[str]:
    """The fixed parts of every string in the preflight's code (docstrings left out)."""
    import ast

    from dispatch_kubeflow import preflight

    parts: set[str] = set()
    for path in sorted(Path(preflight.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            values = node.values if isinstance(node, ast.JoinedStr) else [node]
            for v in values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    text = v.value.strip(" ,;:()")
                    if len(text.split()) >= 3:
                        parts.add(text)
    # The fresh Lease's "held by X, renewed Ns ago (duration Ds)" is never part of a reason.
    parts.discard("s ago (duration")
    return parts


def test_preflight_page_has_every_reason() -> None:
    page = (DOCS / "preflight.md").read_text()
    missing = sorted(p for p in _reason_fragments() if p not in page)
    assert not missing, f"docs/preflight.md lacks these reasons of the preflight: {missing}"


def test_readme_example_is_examples_service() -> None:
    """The README's example is the runnable examples/service.py, verbatim."""
    code = (DOCS.parent / "examples" / "service.py").read_text()
    assert f"```python\n{code}```" in (DOCS.parent / "README.md").read_text()
