"""Every console script, with its extra missing, says which extra to install on one line
and exits 2 (a base install puts them all on PATH; issue 29)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from admission.scripts import dispatch_admission
from dispatch_kubeflow.scripts import kubectl_dispatch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("script", "missing", "extra"), [
    (kubectl_dispatch, "click", "cli"),
    (kubectl_dispatch, "yaml", "cli"),
    (dispatch_admission, "kopf", "admission"),
    (dispatch_admission, "cryptography", "admission"),
])
def test_a_missing_extra_is_one_line_and_exit_2(
        script: object, missing: str, extra: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    with pytest.raises(SystemExit) as exited:
        script()  # type: ignore[operator]
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"pip install 'dispatch-kubeflow[{extra}]'" in err
    assert missing in err


def test_the_console_scripts_are_these_entry_points() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {
        "dispatch-admission": "admission.scripts:dispatch_admission",
        "dispatch-conformance": "dispatch_kubeflow.conformance.__main__:main",
        "kubectl-dispatch": "dispatch_kubeflow.scripts:kubectl_dispatch",
    }


def test_with_the_extra_the_script_runs(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["kubectl-dispatch", "--help"])
    with pytest.raises(SystemExit) as exited:
        kubectl_dispatch()
    assert exited.value.code == 0
    assert "Usage" in capsys.readouterr().out
