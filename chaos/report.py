"""Print a run's verdicts: one line per property; for a violation the seed, the property,
and the ledger lines and operations around it.

``python -m chaos.report --ledger L --ops O [--final F] [--seed S]`` judges a recorded run
and exits 1 if any property is violated.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from chaos.checker import Verdict, judge
from chaos.history import Final, read_final, read_ledger, read_operations


def format_verdicts(verdicts: Sequence[Verdict], seed: int | str | None = None) -> str:
    out: list[str] = []
    for v in verdicts:
        out.append(f"{'ok  ' if v.ok else 'FAIL'} ({v.prop}) {v.title}"
                   + (f": {v.message.splitlines()[0]}" if v.ok and v.message else ""))
    for v in verdicts:
        if v.ok:
            continue
        out += ["", f"VIOLATION seed={seed} property ({v.prop}) {v.title}", v.message]
        if v.lines:
            out.append("ledger lines around it:")
            out += ["  " + json.dumps(asdict(ln), separators=(",", ":")) for ln in v.lines]
        if v.operations:
            out.append("operations around it:")
            out += ["  " + json.dumps(asdict(o), separators=(",", ":"), default=str)
                    for o in v.operations]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.report", description=__doc__)
    ap.add_argument("--ledger", type=Path, required=True)
    ap.add_argument("--ops", type=Path, required=True)
    ap.add_argument("--final", type=Path)
    ap.add_argument("--seed", default=None)
    a = ap.parse_args(argv)
    final = read_final(a.final) if a.final else Final()
    verdicts = judge(read_ledger(a.ledger), read_operations(a.ops), final)
    print(format_verdicts(verdicts, a.seed))
    return 0 if all(v.ok for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
