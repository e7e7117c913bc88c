"""The scale benchmark's tables: each figure of the dispatch phase beside its floor, a ratio
only between two phases that ran; StopJob of a job whose objects go promptly; P4."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from p4 import P4
from phases import Phase
from prompt import Prompt

WATCHED = ("trainjobs", "workloads", "pods", "jobsets")
"""The kinds whose watches the waits would multiply (a bare script holds one per wait)."""
APISERVER_ROWS = 25
"""How many of the API server's kinds of request each table shows (the most served)."""


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and b == b else "-"  # b == b: not nan


def table(d: Phase, f: Phase, workers: int | None = None) -> None:
    with_workers = "" if workers is None else f", the controller with --workers={workers}"
    # The fenced floor's column says so: its approver sends three fenced requests.
    floor = "fenced" if f.name == "fenced floor" else "floor"
    print(f"\nN = {d.n} two-node jobs ({d.wall_s:.0f} s dispatch, {f.wall_s:.0f} s {floor}"
          f"{with_workers})")
    print(f"  {'':<44}{'dispatch':>10}{floor:>10}{'ratio':>8}")

    # A phase not run (--no-floor, --no-dispatch) has no wall time: no ratio against it.
    both_ran = d.wall_s > 0 and f.wall_s > 0

    def row(label: str, a: float | None, b: float | None, fmt: str = ".0f") -> None:
        sa = "-" if a is None else format(a, fmt)
        sb = "-" if b is None else format(b, fmt)
        text = ratio(a, b) if a is not None and b is not None and both_ran else "-"
        print(f"  {label:<44}{sa:>10}{sb:>10}{text:>8}")
    for p in (50, 90, 99):
        row(f"decision latency p{p}, ms", pct(d.decisions_ms, p), pct(f.decisions_ms, p))
    row("decision latency max, ms", max(d.decisions_ms, default=0), max(f.decisions_ms,
                                                                         default=0))
    row("decisions seen", len(d.decisions_ms), len(f.decisions_ms))
    for call in ("start", "open", "wait", "stop"):
        row(f"requests per job: {call}", d.requests.get(call), f.requests.get(call), ".1f")
    row("requests per job: whole lifecycle", sum(d.requests.values()),
        sum(f.requests.values()), ".1f")
    row("StopJob of all at once, wall s", d.stop_wall_s, f.stop_wall_s, ".1f")
    row("StopJob per job p10, s", pct(d.stop_s, 10), pct(f.stop_s, 10), ".2f")
    row("StopJob per job p50, s", pct(d.stop_s, 50), pct(f.stop_s, 50), ".2f")
    row("StopJob per job max, s", max(d.stop_s, default=0), max(f.stop_s, default=0), ".2f")
    row("jobs lost", d.lost, f.lost)
    row("jobs failed", d.failed, f.failed)
    row("requests failed a try (timeout, 429, ...)",
        sum(d.transient_failures.values()), sum(f.transient_failures.values()))
    row("jobs with A != 1", d.bad_a, None)
    row("waits ended early (DeadlineExceeded)", d.early_deadlines, None)
    # Either phase's names: with --no-dispatch only the floor measured them.
    for name in dict.fromkeys([*d.peak_rss, *f.peak_rss]):
        row(f"peak RSS MB: {name}", d.peak_rss.get(name) or None, f.peak_rss.get(name) or None)
    for call, mb in d.rss_by_call.items():
        row(f"peak RSS MB: client, {call} done", mb, f.rss_by_call.get(call))
    for name in dict.fromkeys([*d.cpu, *f.cpu]):
        row(f"CPU s: {name}", d.cpu.get(name), f.cpu.get(name), ".1f")
    def watches(read: dict[str, int], res: str) -> int | None:
        return read.get(res, 0) if read else None  # an empty read: the phase did not run
    for res in WATCHED:
        row(f"API server watches at peak: {res}", watches(d.watches, res),
            watches(f.watches, res))
        row(f"API server watches before: {res}", watches(d.idle_watches, res),
            watches(f.idle_watches, res))
    # Everyone's requests (controllers, kubelets, webhooks' reads): where the API server's
    # work differs between the phases.
    served = sorted(set(d.apiserver) | set(f.apiserver),
                    key=lambda k: -max(d.apiserver.get(k, 0), f.apiserver.get(k, 0)))
    for key in served[:APISERVER_ROWS]:
        row(f"API server {key}", d.apiserver.get(key, 0), f.apiserver.get(key, 0))
    for side in (d, f):
        if side.transient_failures:
            print(f"  note: {side.name}'s failed tries by reason: {side.transient_failures}")
    for note in sorted(set(d.notes + f.notes))[:10]:
        print(f"  note: {note}")
    for side in (d, f):
        if side.profile:
            print(f"\nAPI server CPU profile, {side.name} phase ({side.n} jobs): "
                  f"{side.profile}")


def p4_table(rows: list[P4]) -> None:
    print("\nP4: from the change (as a watch saw it) to the waiter returning, ms")
    print(f"  {'change':<12}{'Backend.wait p50':>18}{'max':>8}{'SDK wait p50':>14}{'max':>8}")
    for row in rows:
        sdk = (f"{statistics.median(row.sdk_ms):>14.0f}{max(row.sdk_ms):>8.0f}"
               if row.sdk_ms else f"{'-':>14}{'-':>8}")
        print(f"  {row.change:<12}{statistics.median(row.ours_ms):>18.0f}"
              f"{max(row.ours_ms):>8.0f}{sdk}")
        for why in sorted(set(row.sdk_never)):
            print(f"    the SDK never returned ({len(row.sdk_never)}x): {why}")
    print("  (held: the SDK has no such status)")


def prompt_table(p: Prompt) -> None:
    print(f"\nStopJob of a job whose objects go promptly ({p.k} jobs, one at a time)")
    print(f"  {'':<44}{'dispatch':>10}{'floor':>10}{'ratio':>8}")
    rows: list[tuple[str, Mapping[str, Sequence[float]], Callable[[Sequence[float]], float],
                     str]] = [
        ("requests p50", p.requests, statistics.median, ".1f"),
        ("requests max", p.requests, max, ".0f"),
        ("seconds p50", p.seconds, statistics.median, ".2f"),
        ("seconds max", p.seconds, max, ".2f")]
    for label, of, pick, fmt in rows:
        a, b = float(pick(of["dispatch"])), float(pick(of["floor"]))
        print(f"  {label:<44}{a:>10{fmt}}{b:>10{fmt}}{ratio(a, b):>8}")
    for note in sorted(set(p.notes))[:10]:
        print(f"  note: {note}")
