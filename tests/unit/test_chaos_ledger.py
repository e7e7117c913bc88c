"""The ledger program, run for real with the host's busybox (the job image's): it writes
whole lines the checker reads, beats every 100 ms, records TERM, fails once when asked."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from chaos import ledger
from chaos.checker import judge
from chaos.history import Final, read_ledger
from chaos.report import format_verdicts

REPO = Path(__file__).resolve().parents[2]
LEDGER_SH = REPO / "chaos" / "ledger.sh"
BUSYBOX = shutil.which("busybox") or "/bin/busybox"
JOB = "01JQ8Z6W3K9V7TQ2M5XH4N0RCB"


needs_busybox = pytest.mark.skipif(not Path(BUSYBOX).exists(), reason="no busybox")


def _ledger_env(path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LEDGER": str(path),
            "DISPATCH_ATTEMPT": f"{JOB}.1.1.1.0", "DISPATCH_EPOCH": "1000001",
            "HOSTNAME": "job-node-0-0-abcde", "JOB_COMPLETION_INDEX": "0",
            "POD_UID": "0f3c2a9e-1d2b-4c5d-8e7f-000000000001",
            "JOBSET_UID": "7a1b2c3d-0000-4000-8000-00000000000a", **extra}


FAIL_ONCE = [
    (f"{JOB}.1.1.1.0", "0", 1),   # J = 0, rank 0: fails once
    (f"{JOB}.1.1.1.1", "0", 0),   # J = 1: JobSet restarted it, it runs to the end
    (f"{JOB}.1.1.1.0", "1", 0),   # another rank does not fail
]


@dataclass(frozen=True, slots=True)
class Run:
    """One run of the ledger program: its ledger, exit statuses, pid, how long it took."""

    path: Path
    statuses: list[int]
    pid: int
    took: float


def _terminated(path: Path) -> Run:
    """Runs until TERM, which it gets after 0.55 s."""
    proc = subprocess.Popen([BUSYBOX, "sh", str(LEDGER_SH)],
                            env=_ledger_env(path, LEDGER_RUN_SECONDS="0"))
    try:
        time.sleep(0.55)
        proc.send_signal(signal.SIGTERM)
        return Run(path, [proc.wait(timeout=5)], proc.pid, 0.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _lingers(path: Path) -> Run:
    """Lingers 0.5 s on TERM, which it gets after 0.35 s, and again 0.2 s later."""
    proc = subprocess.Popen([BUSYBOX, "sh", str(LEDGER_SH)],
                            env=_ledger_env(path, LEDGER_RUN_SECONDS="0.3",
                                            LEDGER_TERM_LINGER="0.5",
                                            JOB_COMPLETION_INDEX="1"))
    try:
        t = time.monotonic()
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # the kubelet sends one; a second changes nothing
        return Run(path, [proc.wait(timeout=5)], proc.pid, time.monotonic() - t)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ends_early(path: Path) -> Run:
    """Ranks 0 and 1 of one execution; rank 1 ends early."""
    procs = [subprocess.Popen([BUSYBOX, "sh", str(LEDGER_SH)],
                              env=_ledger_env(path, JOB_COMPLETION_INDEX=str(rank),
                                              POD_UID=f"uid-{rank}", LEDGER_RUN_SECONDS="0.6",
                                              LEDGER_EARLY_RANK="1",
                                              LEDGER_EARLY_SECONDS="0.15"))
             for rank in (0, 1)]
    return Run(path, [p.wait(timeout=10) for p in procs], 0, 0.0)


def _fails_once(path: Path, attempt: str, rank: str) -> Run:
    env = _ledger_env(path, DISPATCH_ATTEMPT=attempt, JOB_COMPLETION_INDEX=rank,
                      LEDGER_RUN_SECONDS="0.45", LEDGER_FAIL_ONCE="1", LEDGER_FAIL_AFTER="0.2")
    t = time.monotonic()
    proc = subprocess.run([BUSYBOX, "sh", str(LEDGER_SH)], env=env, timeout=10)
    return Run(path, [proc.returncode], 0, time.monotonic() - t)


def _concurrent(path: Path) -> Run:
    procs = [subprocess.Popen([BUSYBOX, "sh", str(LEDGER_SH)],
                              env=_ledger_env(path, DISPATCH_ATTEMPT=f"J{n}.1.1.1.0",
                                              LEDGER_RUN_SECONDS="0.5"))
             for n in range(8)]
    return Run(path, [p.wait(timeout=10) for p in procs], 0, 0.0)


def _as_pod_runs_it(path: Path) -> Run:
    cmd = [BUSYBOX, "sh", *ledger.command(shell=BUSYBOX)[1:]]  # busybox is not linked as sh
    env = {k: v for k, v in _ledger_env(path).items() if k != "HOSTNAME"}
    env |= ledger.env(run_seconds=0.25, ledger=str(path))
    return Run(path, [subprocess.run(cmd, env=env, timeout=10).returncode], 0, 0.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Run]]]:
    """Every run of this module, started at once: each sleeps most of its half second, so
    together they take as long as the longest, not the sum. Each test judges its own."""
    tmp = tmp_path_factory.mktemp("ledgers")
    jobs: dict[str, Callable[[Path], Run]] = {
        "term": _terminated, "concurrent": _concurrent, "sh-c": _as_pod_runs_it,
        "linger": _lingers, "early": _ends_early,
        **{f"fail-{a}-{r}": functools.partial(_fails_once, attempt=a, rank=r)
           for a, r, _ in FAIL_ONCE}}
    for name in jobs:
        (tmp / name).mkdir()
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        yield {name: pool.submit(job, tmp / name / "ledger.jsonl") for name, job in jobs.items()}


@needs_busybox
def test_ledger_program_beats_and_records_term(runs: dict[str, Future[Run]]) -> None:
    run = runs["term"].result()
    assert run.statuses == [143]
    path = run.path
    raw = path.read_text().splitlines()
    assert all(json.loads(t) for t in raw)
    lines = read_ledger(path)
    kinds = [ln.kind for ln in lines]
    assert kinds[0] == "start"
    assert kinds[-2:] == ["term", "exit"]
    beats = [ln for ln in lines if ln.kind == "beat"]
    assert len(beats) >= 3
    assert set(kinds[1:-2]) == {"beat"}
    gaps = sorted((b.wall_us - a.wall_us) / 1000 for a, b in pairwise(lines[:-2]))
    # Each beat is due 100 ms after the one before (at t0 + k * 100 ms, not 100 ms after the
    # last): a loaded machine may delay one, and the next, on time, then follows it sooner.
    assert 80 <= gaps[len(gaps) // 2] <= 130, gaps
    assert all(0 < g <= 400 for g in gaps), gaps
    assert [ln.seq for ln in lines] == list(range(1, len(lines) + 1))
    walls = [ln.wall_us for ln in lines]
    assert walls == sorted(walls)
    assert len(set(walls)) == len(walls)
    assert [ln.uptime_cs for ln in lines] == sorted(ln.uptime_cs for ln in lines)
    assert abs(walls[0] - time.time_ns() // 1000) < 10_000_000  # the same clock as ours
    first = lines[0]
    assert (first.attempt, first.epoch, first.pod, first.rank) == (
        f"{JOB}.1.1.1.0", "1000001", "job-node-0-0-abcde", "0")
    # The pod's UID and its JobSet's: the checker judges pods and executions by them.
    assert {(ln.uid, ln.jobset) for ln in lines} == {
        ("0f3c2a9e-1d2b-4c5d-8e7f-000000000001", "7a1b2c3d-0000-4000-8000-00000000000a")}
    assert {ln.pod_key for ln in lines} == {"0f3c2a9e-1d2b-4c5d-8e7f-000000000001"}
    assert first.pid == run.pid
    assert {ln.started_us for ln in lines} == {first.wall_us}
    assert lines[-1].status == 143
    v = judge(lines, [], Final())
    assert all(x.ok for x in v), format_verdicts(v)


@needs_busybox
@pytest.mark.parametrize(("attempt", "rank", "rc"), FAIL_ONCE)
def test_ledger_program_fails_once_and_runs_for_its_seconds(
        runs: dict[str, Future[Run]], attempt: str, rank: str, rc: int) -> None:
    run = runs[f"fail-{attempt}-{rank}"].result()
    assert run.statuses == [rc]
    took = run.took
    lines = read_ledger(run.path)
    assert lines[-1].kind == "exit"
    assert lines[-1].status == rc
    span_ms = (lines[-1].wall_us - lines[0].wall_us) / 1000
    if rc:
        assert 190 <= span_ms < 400
        assert took < 2
    else:
        assert 440 <= span_ms < 700
        assert len(lines) >= 6


@needs_busybox
def test_ledger_lines_of_concurrent_writers_stay_whole(runs: dict[str, Future[Run]]) -> None:
    """Eight processes append to one file at once: every line parses, none is lost."""
    run = runs["concurrent"].result()
    assert run.statuses == [0] * 8
    lines = read_ledger(run.path)
    for n in range(8):
        mine = [ln for ln in lines if ln.attempt == f"J{n}.1.1.1.0"]
        assert [ln.seq for ln in mine] == list(range(1, len(mine) + 1))
        assert mine[0].kind == "start"
        assert mine[-1].kind == "exit"


@needs_busybox
def test_ledger_program_runs_as_sh_c_with_its_env(runs: dict[str, Future[Run]]) -> None:
    """The way a pod runs it: the script in the command, the behaviour in the env."""
    assert ledger.command(shell=BUSYBOX)[:2] == [BUSYBOX, "-c"]
    assert ledger.env(run_seconds=0.25)["LEDGER_RUN_SECONDS"] == "0.25"
    run = runs["sh-c"].result()
    assert run.statuses == [0]
    lines = read_ledger(run.path)
    assert [ln.kind for ln in lines][0::len(lines) - 1] == ["start", "exit"]
    assert lines[0].pod == os.uname().nodename  # no HOSTNAME: hostname(1)
    assert "LEDGER_TERM_LINGER" not in ledger.env()
    assert ledger.env(term_linger=12)["LEDGER_TERM_LINGER"] == "12"
    assert ledger.env(early_rank=1, early_seconds=0.5)["LEDGER_EARLY_SECONDS"] == "0.5"
    assert ledger.env(fail_once=True)["LEDGER_FAIL_ONCE"] == "1"


@needs_busybox
def test_ledger_program_lingers_on_term_and_beats_meanwhile(
        runs: dict[str, Future[Run]]) -> None:
    """A checkpoint on TERM: one term line, beats on for LEDGER_TERM_LINGER, then 143; the
    run's own seconds (0.3) end nothing once TERM came, and a second TERM changes nothing."""
    run = runs["linger"].result()
    assert run.statuses == [143]
    lines = read_ledger(run.path)
    kinds = [ln.kind for ln in lines]
    assert kinds.count("term") == 1
    assert kinds[-1] == "exit"
    assert lines[-1].status == 143
    term = next(ln for ln in lines if ln.kind == "term")
    after = [ln for ln in lines if ln.wall_us > term.wall_us and ln.kind == "beat"]
    assert len(after) >= 3  # it beats while it lingers: the pod is alive
    lingered_ms = (lines[-1].wall_us - term.wall_us) / 1000
    assert 480 <= lingered_ms < 900, lingered_ms
    assert run.took < 3
    assert {ln.rank for ln in lines} == {"1"}
    v = judge(lines, [], Final())
    assert all(x.ok for x in v), format_verdicts(v)


@needs_busybox
def test_ledger_program_ends_one_rank_early(runs: dict[str, Future[Run]]) -> None:
    """LEDGER_EARLY_RANK exits 0 after its own seconds; the other rank runs on. The two
    are two pods of one execution side by side, which the checker allows."""
    run = runs["early"].result()
    assert run.statuses == [0, 0]
    lines = read_ledger(run.path)
    span = {}
    for rank in ("0", "1"):
        mine = [ln for ln in lines if ln.rank == rank]
        assert mine[-1].kind == "exit"
        assert mine[-1].status == 0
        span[rank] = (mine[-1].wall_us - mine[0].wall_us) / 1000
    assert 140 <= span["1"] < 400, span
    assert 590 <= span["0"] < 1000, span
    assert {ln.uid for ln in lines} == {"uid-0", "uid-1"}
    v = judge(lines, [], Final())
    assert all(x.ok for x in v), format_verdicts(v)
