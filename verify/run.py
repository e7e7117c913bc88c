#!/usr/bin/env python3
"""Model-check the readmission protocol (verify/readmission.pml) with spin, and the worker
permit across clusters (verify/multikueue.pml).

Each variant of the model is generated with ``spin -a``, compiled with gcc in safety mode
and searched exhaustively by pan, in a temporary directory (nothing is written into the
repository). The protocol must verify with no error and no truncated search on every path
that makes a pod: the gate alone, ranks finishing early, JobSets re-made and restarted
(with the rebind and the pod fence), a second attempt, a re-made Workload, and the check
removed from the ClusterQueue. Each variant with a piece of the protocol removed, and each
known limit, must produce a counterexample, whose trail is replayed with ``spin -t`` and
told by the model's ``MSC:`` lines.

The second model, of the worker permit that keeps the promise across a MultiKueue manager
and two worker clusters (docs/multikueue-fence.md), must verify the same way, and each of
its variants with a rule of the permit removed must produce a counterexample
(``MK_VARIANTS``, whose names begin with ``mk-``).

Run it with ``make verify`` or ``python verify/run.py``; ``--only NAME`` runs one variant.
The exit status is 0 when every variant did what it must.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

MODEL = Path(__file__).resolve().with_name("readmission.pml")
MK_MODEL = MODEL.with_name("multikueue.pml")
MAX_DEPTH = 1_000_000
"""pan's -m: far above the depth the search reaches, which the result reports."""
TIMEOUT = 600.0
PROPERTIES = {
    "a": "never alive pods of two executions at once",
    "b": "A rises exactly once per admission (and once per rebind of a JobSet)",
    "c": "each execution's epoch is strictly higher than the previous one's, "
         "and all its pods have its identity",
    "d": "the gate never waits on finished pods alone",
    "e": "never alive pods of two identities at once",
    "f": "a hold is never lost: while the user holds the job, no Workload is approved "
         "(check Ready) or admitted",
    "g": "a release is never lost: a released hold's record never comes back onto the "
         "Workload",
    "h": "a held job runs nothing: once the hold is done and the TrainJob suspended, no "
         "pod starts until the release",
}
MK_PROPERTIES = {
    "a": "never alive pods of two executions at once, in any clusters",
    "c": "each execution's identity A is strictly higher than the previous one's, whichever "
         "worker runs it: a pod starts only at the job's latest admission",
}
PROPERTIES_OF = {MODEL.name: PROPERTIES, MK_MODEL.name: MK_PROPERTIES}
"""Each model's properties, by the label of their assertions."""
MEMLIM_MB = 4096
"""pan's memory bound: a variant that needs more stops, reported as not complete."""
TRUNCATED = ("max search depth too small", "out of memory", "Search not completed")


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    defines: tuple[str, ...]
    must_fail: bool
    what: str
    bfs: bool = False
    """Breadth-first: the counterexample found is a shortest one."""
    unreached_ok: bool = False
    """A variant that must verify but removes a check, whose 'else' is then unreachable."""
    model: str = MODEL.name
    """The model file, in verify/."""


VARIANTS = (
    # --- the gate alone: one JobSet, one attempt, no rank finishes early, no pod fence ---
    Variant("fenced", (), False, "the protocol: every property holds"),
    Variant("leaseconfirm", ("LEASECONFIRM",), False,
            "with a GET of the Lease before each write (the confirms before issue 11)"),
    Variant("noleader", ("NOLEADER",), False,
            "with no leadership check in the decision at all: the fences alone",
            unreached_ok=True),
    Variant("nofence", ("NOFENCE",), True,
            "the Ready write without the fence (shortest counterexample)", bfs=True),
    Variant("nofence-a", ("NOFENCE", "PROPS=1"), True,
            "the Ready write without the fence, checking (a) only", bfs=True),
    Variant("noevictguard", ("NOEVICTGUARD",), True,
            "decide() without the eviction guard", bfs=True),
    Variant("tokeneq", ("TOKENEQ",), True,
            "the token rule by equality, not by order", bfs=True),
    Variant("cachedpods", ("CACHEDPODS",), True,
            "the job's pods from a cache instead of a live list", bfs=True),
    # --- ranks that finish early -------------------------------------------------------
    Variant("finish", ("FINISH",), False,
            "ranks finish early; the gate counts alive pods only"),
    Variant("finishedblock", ("FINISH", "FINISHEDBLOCK"), True,
            "the gate counting finished pods too: it waits on a pod that never goes",
            bfs=True),
    # --- JobSets re-made and restarted, the rebind, the pod fence ------------------------
    Variant("jobsets", ("JOBSETS", "RAISEPASTJ", "FINISH", "MAXHOLD=1"), False,
            "JobSet re-made and restarted, ranks finishing early, the rebind and the pod "
            "fence; a raise that records another JobSet jumps past its restarts"),
    Variant("jobsets-norestart", ("JOBSETS", "MAXRESTART=0", "MAXHOLD=1"), False,
            "JobSet re-made, never restarted: the rebind raising A by one suffices"),
    Variant("rebindbyone", ("JOBSETS", "MAXHOLD=1"), True,
            "JobSet re-made and restarted, a raise that records another JobSet raising A "
            "by one: the new JobSet's J = 0 undoes the old one's restarts", bfs=True),
    Variant("nopodfence", ("JOBSETS", "RAISEPASTJ", "NOPODFENCE", "MAXHOLD=1"), True,
            "the webhook admitting any pod: a re-made JobSet runs beside the old one",
            bfs=True),
    Variant("nojobsetrecord", ("JOBSETS", "RAISEPASTJ", "NOJOBSETRECORD", "MAXHOLD=1"), True,
            "no approved JobSet and no rebind: the webhook's check (2) alone", bfs=True),
    Variant("cachedjobset", ("JOBSETS", "RAISEPASTJ", "CACHEDJOBSET", "MAXHOLD=1"), True,
            "the rebind reading the JobSet from its cache instead of live", bfs=True),
    Variant("recordnone", ("JOBSETS", "RAISEPASTJ", "RECORDNONE", "MAXHOLD=1",
                           "MAXRECREATE=2"), True,
            "the approval recording no JobSet when its cache has none, and the webhook "
            "skipping check (1) then", bfs=True),
    # --- attempts, and Workloads re-made ------------------------------------------------
    Variant("attempts", ("ATTEMPTS=2", "MAXHOLD=1"), False,
            "StopJob and a second attempt from A = 0"),
    Variant("noattemptbase", ("ATTEMPTS=2", "NOATTEMPTBASE", "MAXHOLD=1"), True,
            "the epoch without the attempt's base", bfs=True),
    Variant("nowlconfirm", ("ATTEMPTS=2", "NOWLCONFIRM", "MAXHOLD=1"), True,
            "raising A without first GETting the Workload live: a decision about attempt "
            "1's Workload raises A on attempt 2's TrainJob", bfs=True),
    Variant("remake", ("REMAKE", "MAXHOLD=1"), False,
            "Kueue re-makes the Workload, at any moment, a held one too: the hold outlives "
            "it, and a release is never lost"),
    # --- the approval's reads in the controller's order (issue 28): the TrainJob first, then
    # the list and the Workload's GET side by side, so each order of the two must verify ---
    Variant("earlytj-remake", ("REMAKE", "EARLYTJ", "MAXHOLD=1"), False,
            "the TrainJob read before the list, the GET after it"),
    Variant("getfirst-remake", ("REMAKE", "EARLYTJ", "GETFIRST", "MAXHOLD=1"), False,
            "the TrainJob read before the list, the GET before it too"),
    Variant("getfirst-attempts", ("ATTEMPTS=2", "EARLYTJ", "GETFIRST", "MAXHOLD=1"), False,
            "the same reads' order, across a second attempt"),
    Variant("nowlconfirm-remake", ("REMAKE", "NOWLCONFIRM", "MAXHOLD=1"), True,
            "the same without the live GET of the Workload: a decision about the old "
            "Workload raises A after the new one's raise", bfs=True),
    # --- holds that outlive a re-made Workload: the hold record on the TrainJob --------
    Variant("noholdrecord", ("REMAKE", "NOHOLDRECORD", "MAXHOLD=1"), True,
            "the hold on the Workload only: the re-made Workload of a held job is approved",
            bfs=True),
    Variant("cachedholdcopy", ("REMAKE", "CACHEDHOLDCOPY", "MAXHOLD=1"), True,
            "the hold copy judging the TrainJob from its cache, not live: a released hold "
            "comes back", bfs=True),
    Variant("noreleasewrite", ("REMAKE", "NORELEASEWRITE", "MAXHOLD=1"), True,
            "the release not writing a re-made Workload that carries no record: a hold "
            "copy judged before the release lands after it", bfs=True),
    Variant("releasewlfirst", ("REMAKE", "RELEASEWLFIRST", "MAXHOLD=1"), True,
            "the release reactivating the Workload before removing the TrainJob's record: "
            "the hold copy holds it again", bfs=True),
    # --- the check removed from the ClusterQueue ---------------------------------------
    Variant("checkremoval", ("CHECKREMOVAL", "JOBSETS", "MAXRESTART=0", "MAXHOLD=1",
                             "PROPS=26"), False,
            "an admin removes the check; JobSet re-made; checking (b), (d), (e): the pod "
            "fence still keeps one identity at a time"),
    Variant("nocheckpodfence", ("CHECKREMOVAL", "JOBSETS", "RAISEPASTJ", "NOPODFENCE",
                                "MAXHOLD=0", "PROPS=16"), True,
            "the check removed and no pod fence: two identities at once", bfs=True),
    Variant("checkremoval-a", ("CHECKREMOVAL", "MAXHOLD=1", "PROPS=5"), False,
            "the check removed, checking (a) and (c): the webhook runs no pod of an "
            "admission whose token was not recorded with A"),
    Variant("nopodtoken", ("CHECKREMOVAL", "NOPODTOKEN", "MAXHOLD=1", "PROPS=5"), True,
            "without the webhook's token rule: with the check removed a readmission is no "
            "new execution to the fence; it reruns the same identity beside the last one's "
            "pods", bfs=True),
    # --- a JobSet built from the attempt before's runtime copy ---------------------------
    Variant("staleruntime", ("ATTEMPTS=2", "STALERUNTIME", "MAXHOLD=1"), False,
            "a second attempt whose JobSet Trainer may build from the first attempt's "
            "runtime copy: the webhook refuses pods whose attempt label is not the "
            "TrainJob's"),
    Variant("noattemptlabel", ("ATTEMPTS=2", "STALERUNTIME", "NOATTEMPTLABEL", "MAXHOLD=1"),
            True, "without the attempt-label rule: attempt 2 runs at attempt 1's base",
            bfs=True),
    # --- a suspend that reaches the Jobs late -------------------------------------------
    Variant("joblag", ("JOBLAG", "REMAKE", "MAXHOLD=1"), False,
            "Kueue's suspend reaches the Jobs late, a re-made Workload too: a held job "
            "runs nothing"),
    Variant("nosuspendfence", ("JOBLAG", "REMAKE", "NOSUSPENDFENCE", "MAXHOLD=1"), True,
            "without the webhook's held/suspended rule: a Job that has not seen the "
            "suspend of a re-made Workload's job makes a pod at the A raised for the next "
            "admission, before it is admitted", bfs=True),
    Variant("nosuspendfence-nopodtoken", ("JOBLAG", "NOSUSPENDFENCE", "NOPODTOKEN",
                                          "MAXHOLD=1"), True,
            "without both: a Job that has not seen the suspend starts a rank of the held "
            "job", bfs=True),
    # --- the webhook's check and the pod's creation as two steps ------------------------
    Variant("podrace", ("PODRACE", "PROPS=16"), True,
            "without the scheduling gate: a pod the webhook admitted is stored after a new "
            "execution's pod, and runs beside it", bfs=True),
    Variant("gates", ("PODRACE", "GATES", "MAXHOLD=1"), False,
            "the webhook's judgement and the pod's creation two steps, every pod gated "
            "and its start judged after it is stored: every property holds"),
    Variant("nostarta", ("PODRACE", "GATES", "NOSTARTA", "MAXHOLD=1"), True,
            "the lift not checking that the pod is of the current execution: a pod "
            "admitted before a readmission starts after it", bfs=True),
)

_MK = MK_MODEL.name
MK_VARIANTS = (
    # --- the worker permit across clusters: a manager, two workers, MultiKueue ----------
    Variant("mk-permit", (), False,
            "the worker permit: MultiKueue dispatches to one of two workers and again when "
            "one is lost; a link cut; renewals that land and replies that arrive late; slow "
            "and fast clocks; the self-fence, the revocation and the grant again: every "
            "property holds", model=_MK),
    Variant("mk-twocuts", ("MAXCUT=2", "MAXA=3", "PERMIT=2"), False,
            "two cuts and three approvals (a shorter permit): the job may come back to a "
            "worker that was granted again", model=_MK),
    Variant("mk-drift2", ("DRIFT=2",), False,
            "twice the drift, and twice the margin", model=_MK),
    Variant("mk-nodrift-nomargin", ("DRIFT=0", "NOMARGIN"), False,
            "no drift and no margin: the wait of the permit's length (and the tick) is "
            "enough, so the margin is there for drift alone", model=_MK),
    Variant("mk-noselffence", ("NOSELFFENCE",), True,
            "pods that never fence themselves: the cut-off worker's pod runs on beside the "
            "execution dispatched again to the other worker", bfs=True, model=_MK),
    Variant("mk-norevoke", ("NOREVOKE",), True,
            "the gate approving once the manager's wait is over, without the revoking "
            "write: a renewal in flight lands after it", bfs=True, model=_MK),
    Variant("mk-nomargin", ("NOMARGIN",), True,
            "the manager waiting the permit's length, not the margin too: a slow worker "
            "clock outlasts a fast manager clock", bfs=True, model=_MK),
    Variant("mk-latestart", ("LATESTART",), True,
            "the agent measuring its permit from the reply's arrival, not from before its "
            "request: a late reply outlasts the revocation", bfs=True, model=_MK),
    Variant("mk-noconfirm", ("NOCONFIRM",), True,
            "the agent answering a pod without reading the job's Workload in the manager "
            "(the design as first written): a remote TrainJob left on a lost worker makes a "
            "pod at an old identity when the worker comes back", bfs=True, model=_MK),
    Variant("mk-deleteremotes", ("NOCONFIRM", "DELETEREMOTES"), True,
            "no read, but the gate waiting for a reachable worker's remote objects to go "
            "and a revoked agent deleting them: a remote made after the deletion is left "
            "behind", bfs=True, model=_MK),
    Variant("mk-regrantany", ("REGRANTANY",), True,
            "the permit granted again with pods of the worker left: one confirmed before "
            "the readmission starts on the new permit", bfs=True, model=_MK),
    Variant("mk-tworeads", ("TWOREADS",), False,
            "the agent's read in the code's two requests, the Workload then the TrainJob: "
            "every property holds", model=_MK),
    Variant("mk-tworeads-tjfirst", ("TWOREADS", "TJFIRST"), False,
            "the two reads the other way round, the TrainJob first: every property holds "
            "too, so their order is free (a pod exists before its reads: the gate lists it, "
            "or its worker is revoked and answers nothing until it is gone)", model=_MK),
)
ALL_VARIANTS = VARIANTS + MK_VARIANTS
"""Every variant of both models: what ``make verify`` runs."""


def variant(name: str) -> Variant:
    """The variant of either model named ``name``."""
    return next(v for v in ALL_VARIANTS if v.name == name)


@dataclass(slots=True)
class Result:
    variant: Variant
    errors: int = -1
    states: int = -1
    transitions: int = -1
    depth: int = -1
    seconds: float = -1.0
    """pan's own elapsed time for the search."""
    memory_mb: float = -1.0
    """pan's total actual memory usage."""
    wall: float = 0.0
    """Generate, compile and search, as measured here."""
    complete: bool = False
    """A full state-space search, not truncated by depth or memory."""
    unreached: list[str] = field(default_factory=list)
    """Statements of the model the search never executed (apart from end states)."""
    prop: str = ""
    """For a counterexample: the property it violates, a, b or c."""
    assertion: str = ""
    story: list[str] = field(default_factory=list)
    """For a counterexample: the trail, one MSC line per step that prints one."""
    output: str = ""

    @property
    def ok(self) -> bool:
        if self.variant.must_fail:
            return self.errors >= 1 and bool(self.prop)
        return (self.errors == 0 and self.complete
                and (not self.unreached or self.variant.unreached_ok))


def missing_tools() -> list[str]:
    return [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]


def _run(cmd: Sequence[str], cwd: Path) -> str:
    done = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                           f"{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def _number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else -1.0


def _unreached(text: str) -> list[str]:
    """Lines of pan's 'unreached in proctype' report, apart from each process's end."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if re.match(r"\S+\.pml:\d+, state \d+, ", line) and '"-end-"' not in line:
            out.append(line)
    return out


def _property_of_line(model: str, lineno: int) -> str:
    """The property a failed assertion belongs to: the '(a)' tag on its model line."""
    lines = model.splitlines()
    if 0 < lineno <= len(lines):
        m = re.search(r"/\* \(([a-h])\)", lines[lineno - 1])
        if m:
            return m.group(1)
    return ""


def check(variant: Variant, workdir: Path | None = None, model: str | None = None) -> Result:
    """Generate, compile and run one variant; replay its trail if it has one. ``model``
    replaces the model's text (the tests' probes)."""
    source = MODEL.with_name(variant.model)
    with tempfile.TemporaryDirectory(prefix=f"{source.stem}-") as tmp:
        where = workdir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        model = source.read_text() if model is None else model
        (where / source.name).write_text(model)
        flags = [f"-D{d}" for d in variant.defines]
        started = time.monotonic()
        _run(["spin", *flags, "-a", source.name], where)
        cflags = ["-O2", "-w", "-DSAFETY", f"-DMEMLIM={MEMLIM_MB}"] \
            + (["-DBFS"] if variant.bfs else [])
        _run(["gcc", *cflags, "-o", "pan", "pan.c"], where)
        # pan exits non-zero when it finds an error: read its report either way.
        done = subprocess.run(["./pan", f"-m{MAX_DEPTH}"], cwd=where, capture_output=True,
                              text=True, timeout=TIMEOUT, check=False)
        out = done.stdout + done.stderr
        res = Result(variant, output=out)
        res.errors = int(_number(r"errors: (\d+)", out))
        res.states = int(_number(r"(\d+) states, stored", out))
        res.transitions = int(_number(r"([\d.e+]+) transitions \(", out))
        res.depth = int(_number(r"depth reached (\d+)", out))
        res.seconds = _number(r"elapsed time ([\d.e+]+) seconds", out)
        res.memory_mb = _number(r"([\d.]+)\s+total actual memory usage", out)
        res.complete = ("Full statespace search" in out
                        and not any(t in out for t in TRUNCATED))
        if res.errors == 0:
            res.unreached = _unreached(out)
        else:
            trail = _run(["spin", *flags, "-t", source.name], where)
            res.story = [line.split("MSC: ", 1)[1] for line in trail.splitlines()
                         if "MSC: " in line]
            m = re.search(r"\.pml:(\d+), Error: assertion violated", trail)
            if m:
                res.prop = _property_of_line(model, int(m.group(1)))
            m = re.search(r"text of failed assertion: (.*)", trail)
            res.assertion = m.group(1).strip() if m else ""
        res.wall = time.monotonic() - started
        return res


def check_all(variants: Iterable[Variant], root: Path | None = None) -> list[Result]:
    """Every variant checked, in their order, as many at once as the machine has cores
    (each pan search is one process on one core: two cores halve the models' time in CI);
    each in a directory of its own under ``root`` (or a temporary one)."""
    def one(v: Variant) -> Result:
        return check(v, None if root is None else root / v.name)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, variants))


def report(res: Result) -> str:
    v = res.variant
    head = (f"{v.name}: {v.what}\n"
            f"  spin {' '.join('-D' + d for d in v.defines) or '(no macro)'}"
            f"{'' if v.model == MODEL.name else ' ' + v.model}"
            f"{', breadth-first' if v.bfs else ''}\n"
            f"  {res.states} states stored, {res.transitions} transitions, depth reached "
            f"{res.depth}, errors: {res.errors}, search {res.seconds:g} s "
            f"({res.wall:.1f} s with spin and gcc), "
            + ("stopped at the counterexample" if res.errors > 0
               else "complete" if res.complete else "NOT complete"))
    lines = [head]
    if res.unreached:
        lines.append("  unreached statements: " + "; ".join(res.unreached))
    if res.errors > 0:
        prop = PROPERTIES_OF[v.model].get(res.prop, "?")
        lines.append(f"  counterexample: ({res.prop or '?'}) {prop}: {res.assertion}")
        lines.extend(f"    {n:2}. {step}" for n, step in enumerate(res.story, 1))
    lines.append(f"  => {'as it must' if res.ok else 'WRONG'}"
                 f" ({'must fail' if v.must_fail else 'must verify'})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=[v.name for v in ALL_VARIANTS], action="append",
                        help="run only this variant (repeatable)")
    args = parser.parse_args(argv)
    missing = missing_tools()
    if missing:
        print(f"cannot verify: {' and '.join(missing)} not installed "
              "(Debian: apt-get install spin gcc)", file=sys.stderr)
        return 2
    print(_run(["spin", "-V"], Path.cwd()).strip())
    ok = True
    started = time.monotonic()
    for res in check_all(v for v in ALL_VARIANTS if not args.only or v.name in args.only):
        print(report(res), flush=True)
        ok = ok and res.ok
    print(f"{'every variant did what it must' if ok else 'SOME VARIANT DID NOT'}, "
          f"in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
