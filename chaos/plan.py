"""The plan of a run: its jobs and its schedule of operations and faults, a pure function of
the seed, the faults available and the mix (``chaos.runner``'s steps 3 and 4 draw from it)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

# Operation kinds of the schedule (the history's kinds, plus which variant).
SCHEDULE_OPS_1 = ("open", "hold", "hold-expiry", "release", "release-wrong", "stop_job",
                  "start-same", "start-different")
# Issue 26: paths that make a pod without passing the readmission gate. delete-jobset:
# Trainer re-makes it under the admitted Workload; delete-workload(-held): Kueue re-makes
# the Workload (the held variant places a hold first unless the job is held); next-attempt:
# StopJob (unless stopped), then Start of the same submission at attempt + 1, then Open.
SCHEDULE_OPS = (*SCHEDULE_OPS_1, "delete-jobset", "delete-workload", "delete-workload-held",
                "next-attempt")
MIX = 2
"""The plan's version: the seed draws the same plan for as long as the mix stays. Mix 1 is
the plan before issue 26 (``--mix 1`` replays its seeds); mix 2 adds :data:`SCHEDULE_OPS`'s
new operations, TERM lingers and ranks that end early."""
TERM_LINGERS = (0.0, 0.0, 3.0, 12.0)  # seconds (below the pods' 30 s grace period)
# Faults: name -> what it needs ("api": the API alone; "local": the local cluster's tools).
FAULTS: dict[str, str] = {
    "delete-leader-pod": "api",
    "apiserver-restart": "local",
    "etcd-compaction": "local",
    "node-pause": "local",
    "node-cut": "local",
    "kubelet-restart": "local",
    "controller-sigkill": "local",
    "controller-sigstop": "local",
}
NODE_MONITOR_GRACE = 20.0  # the local cluster's node-monitor-grace-period
LEASE_DURATION = 15.0      # the Deployment's (the controller's default)


@dataclass(frozen=True)
class JobPlan:
    nodes: int
    fail_once: bool
    run_seconds: float
    open_at_start: bool
    term_linger: float = 0.0  # seconds each rank lingers on TERM (0: exits at once)
    early_exit: float = 0.0   # > 0: rank 1 exits 0 after this many seconds (nodes is 2)


@dataclass(frozen=True)
class Step:
    """One step of the schedule: after ``delay`` seconds, an operation or a fault."""

    kind: str    # "op" or "fault"
    name: str    # one of SCHEDULE_OPS or FAULTS
    job: int     # the job's index (ops); -1 for faults
    delay: float
    arg: float = 0.0  # hold-expiry: seconds until it expires; faults: how long it lasts


@dataclass(frozen=True)
class Plan:
    seed: int
    jobs: tuple[JobPlan, ...]
    steps: tuple[Step, ...]
    mix: int = MIX


def make_plan(seed: int, *, jobs: int = 3, ops: int = 8,
              faults: Sequence[str] = tuple(FAULTS), mix: int = MIX) -> Plan:
    """The run's jobs and schedule, a pure function of the seed, the faults available and
    the mix (mix 1 draws exactly the plans of before issue 26).

    Every fault of ``faults`` gets an equal chance; about one step in three is a fault, at
    most ``max(1, ops // 2)`` of them. In mix 2 job 1 always lingers on TERM, and a job
    whose rank 1 ends early has two nodes and a rank 0 that runs long enough for a hold to
    find it running.
    """
    if mix not in (1, 2):
        raise ValueError(f"mix: 1 or 2, not {mix}")
    rng = random.Random(seed)
    plans = []
    for k in range(jobs):
        job = JobPlan(nodes=rng.choice((1, 2)),
                      # at least one job of every run fails once (J > 0)
                      fail_once=(k == 0) or rng.random() < 0.4,
                      run_seconds=rng.choice((3.0, 5.0, 8.0)),
                      open_at_start=rng.random() < 0.8)
        if mix >= 2:
            linger = rng.choice(TERM_LINGERS[2:] if k == 1 else TERM_LINGERS)
            early = round(rng.uniform(0.5, 2.0), 1) if rng.random() < 0.35 else 0.0
            job = JobPlan(nodes=2 if early else job.nodes, fail_once=job.fail_once,
                          run_seconds=rng.choice((15.0, 25.0)) if early else job.run_seconds,
                          open_at_start=job.open_at_start, term_linger=linger,
                          early_exit=early)
        plans.append(job)
    schedule_ops = SCHEDULE_OPS_1 if mix == 1 else SCHEDULE_OPS
    steps: list[Step] = []
    fault_budget = max(1, ops // 2) if faults else 0
    n_ops = 0
    while n_ops < ops:
        delay = round(rng.uniform(0.2, 4.0), 2)
        if fault_budget and rng.random() < 0.35:
            name = rng.choice(sorted(faults))
            steps.append(Step("fault", name, -1, delay, _fault_length(rng, name)))
            fault_budget -= 1
            continue
        name = rng.choice(schedule_ops)
        arg = round(rng.uniform(3.0, 10.0), 1) if name == "hold-expiry" else 0.0
        steps.append(Step("op", name, rng.randrange(jobs), delay, arg))
        n_ops += 1
    return Plan(seed, tuple(plans), tuple(steps), mix)


def _fault_length(rng: random.Random, name: str) -> float:
    if name == "node-pause":     # past the node monitor's grace, short of the eviction
        return round(NODE_MONITOR_GRACE + rng.uniform(3.0, 7.0), 1)
    if name == "controller-sigstop":  # past the lease
        return round(LEASE_DURATION + rng.uniform(3.0, 8.0), 1)
    if name == "node-cut":
        return round(rng.uniform(5.0, 15.0), 1)
    if name == "apiserver-restart":
        return float(rng.choice((0, 2, 5)))
    return 0.0
