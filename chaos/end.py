"""The end of a run (``chaos.runner``'s step 5, but the judging): wait (bounded) for the
jobs to settle, observe what the checker needs, and clean up what the run made."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from chaos.history import OP_STOP, Final, JobFinal, ObjectMeta, Operation
from chaos.objects import QUOTA_PODS
from chaos.operations import JobState
from dispatch_kubeflow import Backend, DispatchError, ObjectState
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

SETTLE_SECONDS = 150.0


async def settle(be: Backend, jobs: Sequence[JobState]) -> None:
    """Wait (bounded) until every job is done, held, gone or never opened."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        busy = False
        for st in jobs:
            if st.ref is None:
                continue
            try:
                obs = await asyncio.wait_for(be.inspect(st.ref), 30)
            except (DispatchError, TimeoutError):  # the API server away: not settled
                busy = True
                continue
            if obs.state not in (ObjectState.SUCCEEDED, ObjectState.FAILED,
                                 ObjectState.GONE, ObjectState.HELD, ObjectState.GATED):
                busy = True
            elif obs.state is ObjectState.HELD and obs.hold_until is not None:
                busy = True  # a hold that expires: the job runs again after it
        if not busy:
            return
        await asyncio.sleep(2)


async def observe_final(be: Backend, kube: Kube, namespace: str,
                        job_states: Sequence[JobState], ops: Sequence[Operation]) -> Final:
    """What the checker needs of the run's end: each job's state, hold and quota, whether
    a stopped job is found no more, and the objects left in the namespace."""
    stopped = {o.job for o in ops if o.op == OP_STOP and o.ok}
    states: dict[str, str] = {}
    seen: list[tuple[JobState, bool, str]] = []
    for st in job_states:
        job = str(st.job)
        held, reason = False, ""
        if st.ref is not None:
            try:
                obs = await asyncio.wait_for(be.inspect(st.ref), 30)
                held = obs.state in (ObjectState.HELD, ObjectState.HOLDING) \
                    or bool(obs.hold_instance)
                states[job] = obs.state.value
                if obs.state in (ObjectState.QUEUED, ObjectState.ADMITTING,
                                 ObjectState.RUNNING):
                    reason = (f"not finished when the settle bound ({SETTLE_SECONDS:g} s) "
                              f"passed: {obs.state.value} {obs.cause.reason}".strip())
            except Exception as exc:
                reason = "" if job in stopped else f"inspect failed: {type(exc).__name__}"
        seen.append((st, held, reason))
    nodes = {str(st.job): st.plan.nodes for st in job_states}
    jobs = []
    for st, held, reason in seen:
        job = str(st.job)
        find_empty = direct_empty = None
        if job in stopped:
            found = await be.find(st.job)
            find_empty = not found
            direct_empty = not await _labelled(kube, namespace, job)
        jobs.append(JobFinal(job, held=held, find_empty=find_empty,
                             direct_list_empty=direct_empty, reason=reason,
                             state=states.get(job, ""),
                             quota_free=quota_free(job, states, nodes)))
    objects = []
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.JOBSET, r.JOB, r.POD, r.WORKLOAD):
        items, _ = await kube.list(res, namespace)
        for it in items:
            m = it["metadata"]
            objects.append(ObjectMeta(res.kind, namespace, m["name"],
                                      dict(m.get("annotations") or {}),
                                      dict(m.get("labels") or {}),
                                      list(m.get("finalizers") or [])))
    return Final(jobs, objects)


async def _labelled(kube: Kube, namespace: str, job: str) -> list[str]:
    found = []
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.JOBSET, r.JOB, r.POD):
        items, _ = await kube.list(res, namespace,
                                   label_selector=f"{names.JOB_ID_LABEL}={job}")
        found += [f"{res.kind}/{it['metadata']['name']}" for it in items]
    return found


async def cleanup(kube: Kube, namespace: str, runtime: str, host_dir: Path,
                  run_dir: Path) -> list[str]:
    """Delete what the run made and wait (bounded) for its namespace to go; what could not
    be done."""
    problems = []
    for res, name in ((r.NAMESPACE, namespace), (r.CLUSTER_QUEUE, namespace),
                      (r.CLUSTER_TRAINING_RUNTIME, runtime)):
        try:
            await asyncio.wait_for(kube.delete(res, name), 30)
        except (DispatchError, TimeoutError) as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
    # Wait (bounded) for the namespace to go, so its pods stop writing the ledger.
    last = ""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if await kube.get_or_none(r.NAMESPACE, namespace) is None:
                break
        except DispatchError as exc:  # the API server restarting: ask again
            last = f"{type(exc).__name__}: {exc}"
        else:
            last = "still there"
        await asyncio.sleep(1)
    else:
        problems.append(f"namespace {namespace} not gone after 90 s ({last})")
    if (host_dir / "ledger.jsonl").exists() and not (run_dir / "ledger.jsonl").exists():
        shutil.copy(host_dir / "ledger.jsonl", run_dir / "ledger.jsonl")
    shutil.rmtree(host_dir, ignore_errors=True)
    return problems


def quota_free(job: str, states: dict[str, str], nodes: dict[str, int]) -> bool | None:
    """Whether ``job`` had quota at the end: its Workload reserves it (admitting, running,
    holding), or the ClusterQueue (:data:`QUOTA_PODS`, the run's alone) had room for its
    pods beside every job that reserves some. None when its state is not known."""
    reserving = ("admitting", "running", "holding")
    state = states.get(job)
    if state is None:
        return None
    if state in reserving:
        return True
    used = sum(nodes.get(j, 0) for j, s in states.items() if s in reserving and j != job)
    return used + nodes.get(job, 0) <= QUOTA_PODS
