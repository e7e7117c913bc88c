"""A campaign's table: the records of many runs (``runs.jsonl`` files), summed up.

    python -m chaos.campaign chaos-results/runs.jsonl [more/runs.jsonl ...]
    python -m chaos.campaign --json chaos-results/runs.jsonl   # the same figures as JSON

Prints the runs (how many, seeds, the runner's commits, total and median duration), the
faults injected and the operations made, by kind, and each property's verdicts: passed,
failed, not judged (a run that ended in an error is not judged). Exits 1 when any run has
a violation or an error, as the runner does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROPERTIES = ("clock", "a", "b", "c", "d", "e", "f", "g", "start")


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for path in paths:
        runs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return runs


def _seeds(seeds: Sequence[int]) -> str:
    """``3000-3041, 126, 127``: consecutive seeds as ranges."""
    out: list[str] = []
    for s in sorted(set(seeds)):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def table(runs: Sequence[dict[str, Any]]) -> str:
    if not runs:
        return "no runs"
    durations = [float(r["duration_s"]) for r in runs]
    faults: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    failed_faults: Counter[str] = Counter()
    for r in runs:
        faults.update(r.get("faults") or {})
        ops.update(r.get("ops") or {})
        failed_faults.update((r.get("faults_failed") or {}).keys())
    lines = [
        f"runs: {len(runs)}; seeds {_seeds([int(r['seed']) for r in runs])}",
        f"runner commits: {', '.join(sorted({r.get('runner') or '?' for r in runs}))}",
        f"duration: {sum(durations) / 3600:.2f} h in all, median "
        f"{statistics.median(durations):.0f} s a run, longest {max(durations):.0f} s",
        f"executions judged: {sum(int(r.get('executions') or 0) for r in runs)}; ledger lines: "
        f"{sum(int(r.get('ledger_lines') or 0) for r in runs)}",
        "",
        "| fault | injected | its tool failed |",
        "|---|---:|---:|",
        *(f"| {k} | {v} | {failed_faults.get(k, 0)} |" for k, v in sorted(faults.items())),
        f"| all | {sum(faults.values())} | {sum(failed_faults.values())} |",
        "",
        "| operation | calls |",
        "|---|---:|",
        *(f"| {k} | {v} |" for k, v in sorted(ops.items())),
        f"| all | {sum(ops.values())} |",
        "",
        "| property | passed | failed | not judged |",
        "|---|---:|---:|---:|",
    ]
    for p in PROPERTIES:
        verdicts = [r["verdicts"].get(p) for r in runs]
        lines.append(f"| {p} | {sum(v is True for v in verdicts)} | "
                     f"{sum(v is False for v in verdicts)} | {sum(v is None for v in verdicts)} |")
    bad = [r for r in runs if r.get("error") or not r.get("ok")]
    lines += ["", f"runs with a violation or an error: {len(bad)}"]
    lines += [f"  seed {r['seed']}: {r.get('error') or '; '.join(r.get('violations') or [])}"[:300]
              for r in bad]
    # A judged run in which nothing ran proves little (seed 9504 passed so, on a Backend that
    # refused every Start): listed, so that the count of runs is not taken at face value.
    empty = [r for r in runs if r not in bad and not r.get("executions")]
    lines += [f"judged runs in which nothing ran: {len(empty)}"
              + (f" (seeds {_seeds([int(r['seed']) for r in empty])})" if empty else "")]
    return "\n".join(lines)


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures :func:`table` prints, as data: docs/data/campaigns.json holds them and
    docs/gen_figures.py draws the docs' tables and plots from them. Faults are
    ``[injected, its tool failed]``, verdicts ``[passed, failed, not judged]``, keyed by the
    checker's keys."""
    durations = [float(r["duration_s"]) for r in runs] or [0.0]
    faults: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    failed_faults: Counter[str] = Counter()
    for r in runs:
        faults.update(r.get("faults") or {})
        ops.update(r.get("ops") or {})
        failed_faults.update((r.get("faults_failed") or {}).keys())
    verdicts: dict[str, list[int]] = {}
    for p in PROPERTIES:
        vs = [r["verdicts"].get(p) for r in runs]
        verdicts[p] = [sum(v is True for v in vs), sum(v is False for v in vs),
                       sum(v is None for v in vs)]
    bad = [r for r in runs if r.get("error") or not r.get("ok")]
    empty = [r for r in runs if r not in bad and not r.get("executions")]
    return {
        "runs": len(runs),
        "seeds": _seeds([int(r["seed"]) for r in runs]),
        "runner_commits": sorted({r.get("runner") or "?" for r in runs}),
        "hours": round(sum(durations) / 3600, 2),
        "median_s": round(statistics.median(durations)),
        "longest_s": round(max(durations)),
        "executions": sum(int(r.get("executions") or 0) for r in runs),
        "ledger_lines": sum(int(r.get("ledger_lines") or 0) for r in runs),
        "faults": {k: [v, failed_faults.get(k, 0)] for k, v in sorted(faults.items())},
        "ops": dict(sorted(ops.items())),
        "verdicts": verdicts,
        "bad": [f"seed {r['seed']}: {r.get('error') or '; '.join(r.get('violations') or [])}"
                [:300] for r in bad],
        "empty_seeds": sorted(int(r["seed"]) for r in empty),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.campaign", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", type=Path, nargs="+", help="runs.jsonl files of the runner")
    ap.add_argument("--json", action="store_true",
                    help="print the figures as JSON (summary()), not as tables")
    a = ap.parse_args(argv)
    runs = load(a.runs)
    print(json.dumps(summary(runs), indent=1) if a.json else table(runs))
    return 0 if runs and all(r.get("ok") and not r.get("error") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
