"""admission.faults: test-only crashes that do nothing unless injected."""

from __future__ import annotations

import os
import signal

import pytest

from admission import faults


def test_nothing_happens_unless_the_fault_is_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.delenv(faults.FAULT_ENV, raising=False)
    faults.kill_if("kill-after-rebind", "here", {})
    monkeypatch.setenv(faults.FAULT_ENV, "kill-after-raise, no-fence")
    assert faults.faults() == {"kill-after-raise", "no-fence"}
    faults.kill_if("kill-after-rebind", "here", {})
    assert kills == []
    faults.kill_if("kill-after-raise", "here", {})
    assert kills == [(os.getpid(), signal.SIGKILL)]


def test_a_stop_happens_once(monkeypatch: pytest.MonkeyPatch) -> None:
    kills: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append(sig))
    monkeypatch.setattr(faults, "_stopped_once", False)
    monkeypatch.setenv(faults.FAULT_ENV, "stop-before-ready")
    for _ in range(3):
        faults.stop_once("stop-before-ready", "here", {})
    assert kills == [signal.SIGSTOP]
