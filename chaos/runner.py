"""The randomized runner: real jobs, operations and faults from a seeded schedule, judged.

``python -m chaos.runner --runs N --seed S --kubeconfig K [--cluster NAME] [--out DIR]
[--jobs K] [--ops M]`` makes N runs; run ``i`` draws everything from
``random.Random(S + i)``, so ``--seed S+i --runs 1`` replays it. Per run:

1. **health**: every node Ready, the controller Deployment available, its Lease held by a
   live pod of it; otherwise the runner stops without judging and names the component;
2. **setup**: a namespace ``chaos-<S>-<i>``, a ClusterQueue and LocalQueue listing the
   AdmissionCheck ``dispatch-admission``, and a ClusterTrainingRuntime of the suite's own
   whose trainer container mounts a host directory at ``/ledger`` (hostPath,
   DirectoryOrCreate; every node of the local cluster runs on this machine);
3. **jobs**: K jobs started through the library (nodes 1 or 2; some fail once, so JobSet
   restarts them and J > 0; some linger on TERM, as a checkpoint on TERM does; in some
   rank 1 ends early, exit 0, while rank 0 runs on); the ledger program and its
   ``LEDGER_*`` settings travel in the request's command (``env K=V ... sh -c
   <ledger.sh>``), since a StartRequest carries a command and no environment;
4. **schedule**: M operations (open, hold with and without expiry, release with the right
   and a wrong instance, stop_job, a second start with the same and with a different
   request; and, since plan mix 2, delete the job's JobSet, delete its Workload running or
   held, and a later attempt of the submission after a StopJob) and faults (see
   :data:`FAULTS`), interleaved; one fault at a time runs in the background while
   operations go on; every node or process a fault touched is restored in a ``finally``;
5. **end**: wait (bounded) for the jobs to settle, observe what the checker needs, read the
   ledger, judge, write the run's record and its history, clean up.
"""

# Each step has its module: the plan (chaos.plan), health (chaos.health), setup and the
# jobs' requests (chaos.objects), the schedule's operations (chaos.operations) and faults
# (chaos.faults), every call recorded (chaos.recorder), the end (chaos.end), one run and its
# judging (chaos.run); here, many runs and the command line.

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from chaos.faults import local_faults_available
from chaos.health import HEALTH_WAIT, wait_healthy
from chaos.plan import FAULTS, MIX
from chaos.run import Run, RunResult
from dispatch_kubeflow import DispatchError
from dispatch_kubeflow.kube import Kube

REPO = Path(__file__).resolve().parent.parent
STOP_FILE = "STOP"
"""A file of this name in --out stops the campaign before its next run."""


def summary_table(results: Sequence[RunResult]) -> str:
    props = ("clock", "a", "b", "c", "d", "e", "f", "g", "start")
    head = f"{'seed':>8} {'secs':>6} {'ops':>4} {'faults':<44} " + \
        " ".join(f"{p:>5}" for p in props) + "  note"
    rows = [head]
    for res in results:
        faults = ",".join(f"{k}={v}" for k, v in sorted(res.faults.items())) or "-"
        marks = " ".join(f"{('ok' if res.verdicts[p] else 'FAIL') if p in res.verdicts else '-':>5}"
                         for p in props)
        note = res.error[:60] if res.error else ("; ".join(res.violations)[:60] or "")
        rows.append(f"{res.seed:>8} {res.duration_s:>6.1f} {sum(res.ops.values()):>4} "
                    f"{faults:<44} {marks}  {note}")
    ok = sum(1 for res in results if res.ok)
    rows.append(f"{ok}/{len(results)} runs without violation or error")
    return "\n".join(rows)


async def campaign(a: argparse.Namespace) -> int:
    out: Path = a.out
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    local, why = local_faults_available(a.cluster)
    faults = [f for f, need in FAULTS.items() if need == "api" or local]
    skipped = "" if local else (f"skipped {', '.join(f for f, n in FAULTS.items() if n != 'api')}"
                                f": {why}")
    if skipped:
        print(f"chaos: {skipped}", file=sys.stderr)
    results: list[RunResult] = []
    # (first seed, index): run i of --seed S is seed S + i; --seeds runs each one alone.
    runs = ([(s, 0) for s in a.seeds] if a.seeds else [(a.seed, i) for i in range(a.runs)])
    version = runner_version()
    try:
        kube = await Kube.connect(kubeconfig=a.kubeconfig)
    except DispatchError as exc:
        print(f"chaos: cannot reach the cluster: {exc}", file=sys.stderr)
        return 2
    code = 0
    try:
        for seed, i in runs:
            if (out / STOP_FILE).exists():
                # A campaign longer than a sitting: stop between runs, every fault healed.
                print(f"chaos: {out / STOP_FILE} exists; stopping before run {i} "
                      f"(seed {seed + i})", file=sys.stderr, flush=True)
                break
            problem = await wait_healthy(kube, HEALTH_WAIT)
            if problem:
                print(f"chaos: cluster unhealthy before run {i} (seed {seed + i}): {problem}; "
                      "stopping without judging", file=sys.stderr)
                code = 2
                break
            run = Run(seed=seed, index=i, kubeconfig=a.kubeconfig, cluster=a.cluster,
                      out=out, jobs=a.jobs, ops=a.ops, faults=faults, skipped_faults=skipped,
                      mix=a.mix)
            run.result.runner = version
            print(f"chaos: run {i} seed {run.run_seed} namespace {run.namespace}: "
                  f"{len(run.plan.steps)} steps (mix {run.plan.mix})", file=sys.stderr,
                  flush=True)
            res = await run.execute(kube)
            results.append(res)
            with (out / "runs.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps({**asdict(res), "ok": res.ok,
                                    "at": datetime.now(UTC).isoformat()}) + "\n")
            print(f"chaos: run {i} seed {res.seed}: {'ok' if res.ok else 'NOT OK'} in "
                  f"{res.duration_s:.1f} s {res.error}", file=sys.stderr, flush=True)
    finally:
        await kube.close()
        print(summary_table(results))
    if code == 0 and not all(res.ok for res in results):
        code = 1
    return code


def _seed_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds: {text!r} is not a comma-separated list of integers") from None


def runner_version() -> str:
    """``git describe`` of the checkout the runner runs from ("" outside a git checkout)."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.runner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=_seed_list, default=(),
                    help="comma-separated seeds to run, each alone (instead of --runs/--seed)")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--cluster", default=None,
                    help="the local cluster's name, for its fault tools (deploy/local); "
                         "without it those faults are skipped")
    ap.add_argument("--out", type=Path, default=Path("chaos-results"))
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--ops", type=int, default=8)
    ap.add_argument("--mix", type=int, choices=(1, MIX), default=MIX,
                    help=f"the plan's mix (default {MIX}); 1 replays the seeds of before "
                         "issue 26's operations")
    a = ap.parse_args(argv)
    try:
        return asyncio.run(campaign(a))
    except KeyboardInterrupt:
        print("chaos: interrupted (cleaned up what the run made)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
