"""admission.faults: test-only crashes that do nothing unless the command line names them."""

from __future__ import annotations

import os
import signal

import pytest

from admission import cli
from admission.faults import KNOWN, Faults


def test_nothing_happens_unless_the_fault_is_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    Faults().kill_if("kill-after-rebind", "here", {})
    injected = Faults(["kill-after-raise", "no-fence"])
    assert "no-fence" in injected
    assert "no-gate-lift" not in injected
    injected.kill_if("kill-after-rebind", "here", {})
    assert kills == []
    injected.kill_if("kill-after-raise", "here", {})
    assert kills == [(os.getpid(), signal.SIGKILL)]


def test_a_stop_happens_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kills: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append(sig))
    faults = Faults(["stop-before-ready"])
    for _ in range(3):
        faults.stop_once("stop-before-ready", "here", {})
    assert kills == [signal.SIGSTOP]


def test_faults_come_from_the_command_line_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCH_ADMISSION_FAULT", "kill-after-raise")  # the old way: ignored
    p = cli.parser()
    assert cli.config_from(p.parse_args([])).faults == ()
    ns = p.parse_args(["--fault", "no-fence", "--fault", "kill-after-rebind"])
    assert cli.config_from(ns).faults == ("no-fence", "kill-after-rebind")
    assert "--fault" not in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args(["--fault", "kill-everything"])
    with pytest.raises(ValueError, match="unknown faults"):
        Faults(["kill-everything"])
    assert "no-gate-lift" in KNOWN
