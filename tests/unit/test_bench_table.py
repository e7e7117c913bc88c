"""The scale benchmark's table: a ratio only between two phases that ran."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
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


def watch_cells(out: str, label: str) -> list[str]:
    """The dispatch, floor and ratio cells of the row ``label``."""
    line = next(x for x in out.splitlines() if x[2:46].strip() == label)
    return line[46:].split()


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


def test_both_phases_watches_stand_side_by_side(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Both phases sample the API server alike since 2026-12-07 (only the dispatch phase's
    # waits did before): the watches are one row per kind, dispatch beside the floor.
    scale = load_scale(monkeypatch)
    d = phase(scale, "dispatch", [200, 400, 600], 10)
    f = phase(scale, "floor", [100, 200, 300], 10)
    d.watches, f.watches = {"pods": 6}, {"pods": 1003}
    d.idle_watches, f.idle_watches = {"pods": 5}, {"pods": 3}
    scale.table(d, f)
    out = capsys.readouterr().out
    assert watch_cells(out, "API server watches at peak: pods") == ["6", "1003", "0.01x"]
    assert watch_cells(out, "API server watches before: pods") == ["5", "3", "1.67x"]
    # A kind the phase that ran held no watch of is a 0, not a phase not run.
    assert watch_cells(out, "API server watches at peak: jobsets")[:2] == ["0", "0"]


@pytest.mark.parametrize("missing", ["dispatch", "floor"])
def test_no_ratio_against_a_phase_not_run(missing: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load_scale(monkeypatch)
    ran = phase(scale, "ran", [100, 200, 300], 10)
    empty = scale.Phase(f"{missing} (not run)", 3)
    d, f = (empty, ran) if missing == "dispatch" else (ran, empty)
    ran.watches, ran.idle_watches = {"pods": 4}, {"pods": 2}
    ran.peak_rss, ran.cpu = {"kueue": 120.0}, {"kueue": 30.0}
    scale.table(d, f)
    out = capsys.readouterr().out
    rows = ratios(out)
    # What the phase that ran measured is shown, whichever column it is in.
    assert "peak RSS MB: kueue" in rows
    assert "CPU s: kueue" in rows
    assert len(rows) > 15
    assert set(rows.values()) == {"-"}, rows
    # Its watches are shown too, with no ratio against the phase not run.
    column = 0 if missing == "floor" else 1
    assert watch_cells(out, "API server watches at peak: pods")[column] == "4"
    assert watch_cells(out, "API server watches before: pods")[column] == "2"


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
        'apiserver_request_total{code="201",component="apiserver",dry_run="All",'
        'group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="",'
        'verb="POST",version="v1beta2"} 47',
        'apiserver_request_total{code="200",component="apiserver",group="",resource="pods",'
        'scope="namespace",subresource="status",verb="PATCH",version="v1"} 3',
        'apiserver_request_total{code="200",component="apiserver",group="",resource="pods",'
        'scope="namespace",subresource="status",verb="PATCH",version="v1"} 2.0',
        'apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 9',
    ])
    assert apiserver.parse_counts(metrics) == {
        "POST workloads": 6, "POST workloads 409": 70, "POST workloads dry-run": 47,
        "PATCH pods/status": 5}


def test_every_phase_samples_the_api_servers_watches_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The floor's phase was never sampled, the dispatch phase's waits every second: a load
    # on the API server the floor's decisions never met (issue 28 item 3). Now the phase's
    # frame samples them, whichever client runs in it.
    load_scale(monkeypatch)
    import asyncio

    import phases  # bench/phases.py, on the path load_scale put there
    import sampler
    reads: list[str] = []

    async def watch_count() -> dict[str, int]:
        reads.append("watches")
        return {"pods": len(reads)}

    async def request_counts() -> Counter[str]:
        return Counter()

    class Observer:
        def __init__(self, *_: object) -> None: ...
        async def ready_to_watch(self) -> None: ...
        def latencies_ms(self) -> list[float]:
            return [1.0]
        def close(self) -> None: ...

    async def in_own_process(_pids: object, client: str, *_: object) -> Any:
        await asyncio.sleep(0.05)  # the client runs while the sampler reads
        return phases.Phase(client, 1), {}, {}

    monkeypatch.setattr(sampler, "watch_count", watch_count)
    monkeypatch.setattr(phases, "watch_count", watch_count)
    monkeypatch.setattr(phases, "request_counts", request_counts)
    monkeypatch.setattr(phases, "Observer", Observer)
    monkeypatch.setattr(phases, "in_own_process", in_own_process)
    admin: Any = None  # the stand-in Observer reads nothing through it
    for client in ("dispatch_client", "floor_client"):
        reads.clear()
        ph = asyncio.run(phases.observed(admin, "ns", "check", {}, client, "kc", 1))
        assert ph.idle_watches == {"pods": 1}, client
        assert ph.watches == {"pods": 2}, client
