"""The scale benchmark's table: a ratio only between two phases that ran."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO


def load_scale(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # bench/ is scripts, not a package: load bench/scale.py by its path, with its directory
    # on the path as when it runs (it imports its siblings: phases.py, tables.py and the rest).
    monkeypatch.syspath_prepend(str(Path(REPO) / "bench"))
    path = Path(REPO) / "bench" / "scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_scale", module)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


def ratios(out: str) -> dict[str, str]:
    """Each row's label (its first 44 columns) and its ratio (the last column)."""
    return {line[2:46].strip(): line.split()[-1] for line in out.splitlines()
            if line.startswith("  ") and line[2:46].strip()}


def phase(scale: ModuleType, name: str, decisions: list[float], wall: float) -> Any:
    p = scale.Phase(name, 3)
    p.decisions_ms, p.wall_s = decisions, wall
    p.requests = {"start": 4.0, "stop": 12.0}
    p.stop_wall_s, p.stop_s = 3.0, [1.0, 2.0, 3.0]
    return p


def test_two_phases_that_ran_stand_as_ratios(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load_scale(monkeypatch)
    scale.table(phase(scale, "dispatch", [200, 400, 600], 10),
                phase(scale, "floor", [100, 200, 300], 10))
    rows = ratios(capsys.readouterr().out)
    assert rows["decision latency max, ms"] == "2.00x"
    assert rows["requests per job: whole lifecycle"] == "1.00x"


@pytest.mark.parametrize("missing", ["dispatch", "floor"])
def test_no_ratio_against_a_phase_not_run(missing: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load_scale(monkeypatch)
    ran = phase(scale, "ran", [100, 200, 300], 10)
    empty = scale.Phase(f"{missing} (not run)", 3)
    d, f = (empty, ran) if missing == "dispatch" else (ran, empty)
    d.watches, d.idle_watches = {"pods": 4}, {"pods": 2}
    ran.peak_rss, ran.cpu = {"kueue": 120.0}, {"kueue": 30.0}
    scale.table(d, f)
    out = capsys.readouterr().out
    rows = ratios(out)
    # What the phase that ran measured is shown, whichever column it is in.
    assert "peak RSS MB: kueue" in rows
    assert "CPU s: kueue" in rows
    judged = {k: v for k, v in rows.items() if not k.startswith("API server watches")}
    assert len(judged) > 15
    assert set(judged.values()) == {"-"}, judged
    # The watches compare one phase with itself (during the waits / before): still a ratio.
    assert rows["API server watches (waits/before): pods"] == "2.00x"


def test_the_api_servers_requests_are_counted_by_verb_and_resource_refusals_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    load_scale(monkeypatch)
    import apiserver  # bench/apiserver.py, on the path load_scale put there
    metrics = "\n".join([
        "# HELP apiserver_request_total Counter of apiserver requests",
        'apiserver_request_total{code="201",component="apiserver",group="kueue.x-k8s.io",'
        'resource="workloads",scope="resource",subresource="",verb="POST",version="v1beta2"} 6',
        'apiserver_request_total{code="409",component="apiserver",group="kueue.x-k8s.io",'
        'resource="workloads",scope="resource",subresource="",verb="POST",version="v1beta2"} 70',
        'apiserver_request_total{code="200",component="apiserver",group="",resource="pods",'
        'scope="namespace",subresource="status",verb="PATCH",version="v1"} 3',
        'apiserver_request_total{code="200",component="apiserver",group="",resource="pods",'
        'scope="namespace",subresource="status",verb="PATCH",version="v1"} 2.0',
        'apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 9',
    ])
    assert apiserver.parse_counts(metrics) == {
        "POST workloads": 6, "POST workloads 409": 70, "PATCH pods/status": 5}
