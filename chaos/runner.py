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

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from chaos import ledger as ledger_mod
from chaos.checker import executions, judge
from chaos.history import (
    OP_DELETE_JOBSET,
    OP_DELETE_WORKLOAD,
    OP_FIND,
    OP_HOLD,
    OP_INSPECT,
    OP_OPEN,
    OP_RELEASE,
    OP_START,
    OP_STOP,
    Final,
    JobFinal,
    ObjectMeta,
    Operation,
    append_operation,
    read_ledger,
    write_final,
)
from chaos.report import format_verdicts
from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    DispatchError,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    RuntimeRef,
    StartRequest,
    StopReport,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import newest_workload
from dispatch_kubeflow.core.kueue import trainjob_of
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube import resources as r

REPO = Path(__file__).resolve().parent.parent
LOCAL_TOOLS = REPO / "deploy" / "local"
IMAGE = "localhost/dispatch-busybox:kind"
LEDGER_HOST_ROOT = Path("/var/lib/dispatch-chaos")
CONTROLLER = "dispatch-admission"  # the Deployment, its pods' app label, and the Lease
QUEUE = "lq"
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")

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
QUOTA_PODS = 6  # the ClusterQueue's quota, in pods of 100m / 32Mi
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
# Seconds each call may take before it counts as hung (its absolute deadline).
DEADLINES = {OP_START: 150.0, OP_OPEN: 150.0, OP_HOLD: 60.0, OP_RELEASE: 60.0,
             OP_STOP: 150.0, OP_INSPECT: 30.0, OP_FIND: 30.0, OP_DELETE_JOBSET: 30.0,
             OP_DELETE_WORKLOAD: 30.0}
# The library gets the deadline itself where it takes one; the runner waits this much
# longer before it calls the call hung (the checker allows 1 s past the deadline).
HUNG_GRACE = 3.0
NODE_MONITOR_GRACE = 20.0  # the local cluster's node-monitor-grace-period
LEASE_DURATION = 15.0      # the Deployment's (the controller's default)
SETTLE_SECONDS = 150.0
HEALTH_WAIT = 120.0
STOP_FILE = "STOP"
"""A file of this name in --out stops the campaign before its next run."""


def now_us() -> int:
    """The ledger's clock: CLOCK_REALTIME in µs."""
    return time.time_ns() // 1000


# --- the plan: pure, from the seed ---------------------------------------------------------


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


# --- the recorder: every call, timed, typed, bounded ---------------------------------------


class Recorder:
    """Records every call as a :class:`~chaos.history.Operation` (and appends it to
    ``path`` when given). A call not done by its deadline plus :data:`HUNG_GRACE` is
    abandoned and recorded as never returned; an error is recorded by its class name."""

    def __init__(self, path: Path | None = None, *, hung_grace: float = HUNG_GRACE) -> None:
        self.path = path
        self.hung_grace = hung_grace
        self.ops: list[Operation] = []

    async def call(self, op: str, job: str, make: Callable[[], Awaitable[Any]], *,
                   seconds: float, args: dict[str, Any] | None = None,
                   summary: Callable[[Any], Any] = lambda x: x) -> tuple[Operation, Any]:
        call_us = now_us()
        deadline_us = call_us + int(seconds * 1_000_000)
        rec = Operation(id=len(self.ops) + 1, op=op, job=job, call_us=call_us,
                        args=dict(args or {}), deadline_us=deadline_us)
        value: Any = None
        abandon = asyncio.timeout(seconds + self.hung_grace)
        try:
            async with abandon:
                value = await make()
        except Exception as exc:
            # Only this timer's own expiry is a hang. The library's DeadlineExceeded is a
            # TimeoutError too, and the typed answer a call gives at its deadline.
            if not (isinstance(exc, TimeoutError) and abandon.expired()):
                rec = _replace(rec, return_us=now_us(), error=type(exc).__name__,
                               error_message=str(exc)[:500])
        else:
            rec = _replace(rec, return_us=now_us(), result=_jsonable(summary(value)))
        self.ops.append(rec)
        if self.path is not None:
            append_operation(self.path, rec)
        return rec, value

    def record(self, op: str, call_us: int, result: Any, *,
               args: dict[str, Any] | None = None) -> Operation:
        """A fault's record: it ran from ``call_us`` to now."""
        rec = Operation(id=len(self.ops) + 1, op=op, job="", call_us=call_us,
                        return_us=now_us(), args=dict(args or {}), result=_jsonable(result))
        self.ops.append(rec)
        if self.path is not None:
            append_operation(self.path, rec)
        return rec


def _replace(op: Operation, **kw: Any) -> Operation:
    return Operation(**{**asdict(op), **kw})


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def stop_summary(rep: StopReport) -> dict[str, Any]:
    return {"stopped": len(rep.stopped), "alive": len(rep.alive), "unproven": len(rep.unproven)}


# --- the cluster's objects -----------------------------------------------------------------


def runtime_body(name: str, host_dir: Path) -> dict[str, Any]:
    """deploy/base.yaml's ``dispatch-kind``, with the ledger's hostPath volume and, from the
    downward API, the node's name, the pod's UID and the UID of the JobSet that made the
    pod (its label), so that the ledger names pods and executions, not identity strings;
    the command comes from each job's request."""
    return {
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "dispatch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {"spec": {
                "failurePolicy": {"maxRestarts": 3},
                "replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {
                            "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "template": {"spec": {
                                "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 30,
                                "volumes": [{"name": "ledger", "hostPath": {
                                    "path": str(host_dir), "type": "DirectoryOrCreate"}}],
                                "containers": [{
                                    "name": "node",
                                    "image": IMAGE,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["/bin/sh", "-c", "echo dispatch-chaos"],
                                    "env": [
                                        _field_env("NODE_NAME", "spec.nodeName"),
                                        _field_env("POD_UID", "metadata.uid"),
                                        _field_env("JOBSET_UID", "metadata.labels['"
                                                   f"{names.JOBSET_UID_LABEL}']")],
                                    "volumeMounts": [{"name": "ledger",
                                                      "mountPath": ledger_mod.LEDGER_DIR}],
                                    "resources": {
                                        "requests": {"cpu": "100m", "memory": "32Mi"},
                                        "limits": {"cpu": "100m", "memory": "32Mi"}},
                                }],
                            }},
                        },
                    },
                }],
            }},
        },
    }


def workload_of(items: Sequence[dict[str, Any]], trainjob: str) -> dict[str, Any] | None:
    """The Workload, of ``items``, that Kueue made for the TrainJob ``trainjob`` (its
    controller owner reference), chosen as the library chooses it: one being deleted only
    when there is no other (core.admission_count.newest_workload)."""
    return newest_workload(wl for wl in items if trainjob_of(wl) == trainjob)


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def job_command(plan: JobPlan, *, variant: str = "") -> list[str]:
    """The ledger program with its settings in front (``env K=V ... sh -c <script>``)."""
    env = ledger_mod.env(run_seconds=plan.run_seconds, fail_once=plan.fail_once,
                         term_linger=plan.term_linger,
                         early_rank=1 if plan.early_exit else None,
                         early_seconds=plan.early_exit or 1)
    if variant:
        env["LEDGER_VARIANT"] = variant  # a different request: same job, other command
    # Kubernetes expands $(VAR) in a container's command and turns $$ into $: every $ of
    # the script is doubled so that the shell gets the script as written ($$ is its pid).
    shell, flag, script, name = ledger_mod.command()
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())),
            shell, flag, script.replace("$", "$$"), name]


def job_request(job: JobID, plan: JobPlan, runtime: str, *, variant: str = "",
                submission: int = 1, attempt: int = 1) -> StartRequest:
    return StartRequest(job, submission, attempt, JobSpec(
        job_command(plan, variant=variant), plan.nodes,
        [Image(IMAGE, "IfNotPresent"), RuntimeRef("ClusterTrainingRuntime", runtime)]))


def backend_settings(kubeconfig: str, namespace: str) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": QUEUE, "admissionCheck": names.ADMISSION_CHECK},
        # transient 90 s: the local cluster's API server takes up to ~45 s to restart on two
        # busy cores, longer than the library's default window of 30 s a request.
        # preflightProbe: the probe ends as soon as Kueue reports it gated (probeWatch
        # "proof"); the bound only matters on a loaded cluster, where 5 s was too short.
        "timeouts": {"request": "10s", "stopJob": "2m", "preflightProbe": "20s",
                     "transient": "90s"},
    }


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


# --- health --------------------------------------------------------------------------------


async def health_problem(kube: Kube) -> str:
    """"" when healthy, else which component is not."""
    nodes, _ = await kube.list(r.NODE)
    if not nodes:
        return "nodes: none"
    for n in nodes:
        ready = [c for c in (n.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"]
        if not ready or ready[0].get("status") != "True":
            return f"node {n['metadata']['name']}: not Ready"
    dep = await kube.get_or_none(DEPLOYMENT, CONTROLLER, names.CONTROLLER_NAMESPACE)
    if dep is None:
        return f"controller: no Deployment {names.CONTROLLER_NAMESPACE}/{CONTROLLER}"
    st = dep.get("status") or {}
    want = (dep.get("spec") or {}).get("replicas", 1)
    if st.get("availableReplicas", 0) < want or st.get("readyReplicas", 0) < want:
        return (f"controller: Deployment {CONTROLLER} has {st.get('readyReplicas', 0)}/{want} "
                "replicas ready")
    holder = await lease_holder(kube)
    pods = await controller_pods(kube)
    if not holder or holder not in pods:
        return f"controller: Lease {CONTROLLER} held by {holder or 'nobody'}, not a live pod"
    return ""


async def lease_holder(kube: Kube) -> str:
    lease = await kube.get_or_none(r.LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def controller_pods(kube: Kube) -> list[str]:
    pods, _ = await kube.list(r.POD, names.CONTROLLER_NAMESPACE,
                              label_selector=f"app.kubernetes.io/name={CONTROLLER}")
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]


async def wait_healthy(kube: Kube, limit: float) -> str:
    deadline = time.monotonic() + limit
    problem = "not checked"
    while time.monotonic() < deadline:
        try:
            problem = await health_problem(kube)
        except Exception as exc:
            problem = f"API server: {type(exc).__name__}: {exc}"
        if not problem:
            return ""
        await asyncio.sleep(2)
    return problem


# --- faults --------------------------------------------------------------------------------


def tool(script: str, *args: str, timeout: float = 120) -> str:
    # DISPATCH_KEEP_ON_FAILURE=1: a failing node.sh step (a kubelet whose healthz does not
    # answer within 30 s) otherwise runs down.sh and takes the whole cluster with it.
    # start_new_session: a Ctrl-C meant for the runner must not reach the tool. Cut between
    # its kill of a kubelet and the kubelet's start again, node.sh left the node without
    # one; in its own session it runs to its end while the runner cleans up.
    done = subprocess.run([str(LOCAL_TOOLS / script), *args], capture_output=True, text=True,
                          timeout=timeout, check=False, start_new_session=True,
                          env={**os.environ, "DISPATCH_KEEP_ON_FAILURE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)}: rc={done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout.strip()


def local_faults_available(cluster: str | None) -> tuple[bool, str]:
    """Whether the local cluster's fault tools work for ``cluster``, and why not."""
    if not cluster:
        return False, "no --cluster given: not a local cluster"
    try:
        tool("node.sh", "status", cluster, f"{cluster}-worker", timeout=20)
        tool("apiserver.sh", "status", cluster, timeout=20)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return False, f"local tools fail for {cluster}: {exc}"
    if shutil.which("pgrep") is None:
        return False, "no pgrep"
    return True, ""


def controller_pid(holder: str) -> int | None:
    """The host pid of the controller process whose ``--identity`` is ``holder``."""
    done = subprocess.run(["pgrep", "-f", CONTROLLER], capture_output=True, text=True,
                          check=False)
    for pid in done.stdout.split():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--identity={holder}".encode() in argv:
            return int(pid)
    return None


class Faults:
    """Runs faults and remembers what to restore."""

    def __init__(self, kube: Kube, cluster: str | None, rng: random.Random) -> None:
        self.kube = kube
        self.cluster = cluster or ""
        self.rng = rng
        self.undo: dict[str, Callable[[], object]] = {}

    def restore_all(self) -> list[str]:
        errors = []
        for key, fn in list(self.undo.items()):
            try:
                fn()
            except Exception as exc:
                errors.append(f"{key}: {exc}")
            self.undo.pop(key, None)
        return errors

    def _worker(self) -> str:
        return self.rng.choice((f"{self.cluster}-worker", f"{self.cluster}-worker2"))

    async def run(self, name: str, length: float) -> dict[str, Any]:
        fn = getattr(self, "_" + name.replace("-", "_"))
        out: dict[str, Any] = await fn(length)
        return out

    async def _delete_leader_pod(self, length: float) -> dict[str, Any]:
        holder = await lease_holder(self.kube)
        if not holder:
            return {"skipped": "no Lease holder"}
        await self.kube.delete(r.POD, holder, names.CONTROLLER_NAMESPACE)
        return {"pod": holder}

    async def _apiserver_restart(self, length: float) -> dict[str, Any]:
        await asyncio.to_thread(tool, "apiserver.sh", "restart", self.cluster, f"{length:g}")
        return {"down_s": length}

    async def _hold_off(self, key: str, on: Callable[[], object], off: Callable[[], object],
                        length: float) -> None:
        self.undo[key] = off
        await asyncio.to_thread(on)
        try:
            await asyncio.sleep(length)
        finally:
            self.undo.pop(key, None)
            await asyncio.to_thread(off)

    async def _etcd_compaction(self, length: float) -> dict[str, Any]:
        # Compacts and restarts the apiserver: its new watch cache starts after the compacted
        # revision, so every watch resumed from before gets 410 and must list again.
        rev = await asyncio.to_thread(tool, "apiserver.sh", "compact", self.cluster)
        return {"revision": int(rev.splitlines()[-1])}

    async def _node_pause(self, length: float) -> dict[str, Any]:
        node = self._worker()
        await self._hold_off(f"pause {node}",
                             lambda: tool("node.sh", "pause", self.cluster, node),
                             lambda: tool("node.sh", "resume", self.cluster, node), length)
        return {"node": node, "seconds": length}

    async def _node_cut(self, length: float) -> dict[str, Any]:
        node = self._worker()
        await self._hold_off(f"cut {node}", lambda: tool("node.sh", "cut", self.cluster, node),
                             lambda: tool("node.sh", "heal", self.cluster, node), length)
        return {"node": node, "seconds": length}

    async def _kubelet_restart(self, length: float) -> dict[str, Any]:
        node = self._worker()
        await asyncio.to_thread(tool, "node.sh", "restart-kubelet", self.cluster, node)
        return {"node": node}

    async def _leader_pid(self) -> tuple[str, int | None]:
        holder = await lease_holder(self.kube)
        return holder, (await asyncio.to_thread(controller_pid, holder)) if holder else None

    async def _controller_sigkill(self, length: float) -> dict[str, Any]:
        holder, pid = await self._leader_pid()
        if pid is None:
            return {"skipped": f"no process of Lease holder {holder!r}"}
        os.kill(pid, signal.SIGKILL)
        return {"pod": holder, "pid": pid}

    async def _controller_sigstop(self, length: float) -> dict[str, Any]:
        holder, pid = await self._leader_pid()
        if pid is None:
            return {"skipped": f"no process of Lease holder {holder!r}"}
        await self._hold_off(f"sigstop {pid}", lambda: os.kill(pid, signal.SIGSTOP),
                             lambda: _cont(pid), length)
        return {"pod": holder, "pid": pid, "seconds": length}


def _cont(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


# --- one run -------------------------------------------------------------------------------


@dataclass
class JobState:
    plan: JobPlan
    job: JobID
    ref: ObjectRef | None = None
    hold_instance: int = 0   # the instance of the hold this runner placed last (0: none)
    next_instance: int = 1
    # After a StopJob a caller starts the job again as a new submission (its identity
    # must stay higher than every execution before); the runner does the same.
    submission: int = 1
    attempt: int = 1  # a later attempt of the submission follows a StopJob (next-attempt)
    stopped: bool = False
    variant: str = ""  # the request variant the current submission was started with
    held: bool = False  # a hold of the runner's succeeded and no Release removed it since


class NotJudged(Exception):
    """A run that cannot be judged; the message says why (the run's recorded error)."""


@dataclass
class RunResult:
    seed: int
    run: int
    namespace: str
    duration_s: float = 0.0
    ops: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    faults_failed: dict[str, str] = field(default_factory=dict)
    skipped_faults: str = ""
    verdicts: dict[str, bool] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    ledger_lines: int = 0
    executions: int = 0
    error: str = ""
    history: str = ""
    runner: str = ""
    """The commit the runner ran from: a seed replays its schedule with that version."""
    mix: int = MIX
    """The plan's mix (:data:`MIX`): ``--seed S --mix M`` draws the same plan."""

    @property
    def ok(self) -> bool:
        return not self.error and all(self.verdicts.values()) and bool(self.verdicts)


class Run:
    def __init__(self, *, seed: int, index: int, kubeconfig: str, cluster: str | None,
                 out: Path, jobs: int, ops: int, faults: Sequence[str],
                 skipped_faults: str, mix: int = MIX) -> None:
        self.seed, self.index = seed, index
        self.run_seed = seed + index
        self.kubeconfig, self.cluster = kubeconfig, cluster
        self.namespace = f"chaos-{seed}-{index}"
        self.runtime = f"dispatch-chaos-{seed}-{index}"
        self.host_dir = LEDGER_HOST_ROOT / f"{seed}-{index}"
        self.dir = out / f"{seed}-{index}"
        self.plan = make_plan(self.run_seed, jobs=jobs, ops=ops, faults=faults, mix=mix)
        self.rng = random.Random(self.run_seed ^ 0x5EED)  # for choices made while running
        self.result = RunResult(seed=self.run_seed, run=index, namespace=self.namespace,
                                skipped_faults=skipped_faults, history=str(self.dir), mix=mix)
        self.jobs: list[JobState] = []
        self.rec: Recorder | None = None
        self.kube: Kube | None = None  # for the operations that act on objects directly
        # What the library must answer beyond the checker's properties: a second Start of
        # the same submission returns the same object, or ConflictError for another request.
        self.expect: list[str] = []

    async def execute(self, kube: Kube) -> RunResult:
        t0 = time.monotonic()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.rec = Recorder(self.dir / "ops.jsonl")
        self.kube = kube
        faults = Faults(kube, self.cluster, self.rng)
        try:
            await self._setup(kube)
            async with await self._backend() as be:
                await self._start_jobs(be)
                await self._schedule(be, faults)
                await self._settle(be)
                final = await self._final(be, kube)
            self._judge(final)
        except Exception as exc:
            self.result.error = f"{type(exc).__name__}: {exc}"
        finally:
            for err in faults.restore_all():
                self.result.error += f"; restore failed: {err}"
            await _uninterrupted(self._cleanup(kube))
            self.result.duration_s = round(time.monotonic() - t0, 1)
            assert self.rec is not None
            self.result.ops = dict(Counter(o.op for o in self.rec.ops
                                           if not o.op.startswith("fault:")))
            self.result.faults = dict(Counter(o.op.removeprefix("fault:")
                                              for o in self.rec.ops
                                              if o.op.startswith("fault:")))
        return self.result

    async def _backend(self) -> Backend:
        """A Backend that may Start. An observe-only one (its preflight could not prove a
        capability: a loaded Kueue slow to report the probe gated) refuses every Start, and
        a run judged on it would pass with nothing run (seed 9504). So it is opened again
        once, and if it stays observe-only the run ends unjudged, saying why."""
        for attempt in (1, 2):
            be = await Backend.connect(backend_settings(self.kubeconfig, self.namespace))
            if not be.observe_only:
                return be
            reasons = "; ".join(be.observe_only_reasons)
            await be.close()
            if attempt == 1:
                print(f"chaos: the Backend is observe-only ({reasons}); opening it again",
                      file=sys.stderr)
                await asyncio.sleep(5)
        raise NotJudged(f"the Backend stayed observe-only, nothing could start: {reasons}")

    async def _setup(self, kube: Kube) -> None:
        self.host_dir.mkdir(parents=True, exist_ok=True)
        self.host_dir.chmod(0o777)
        (self.host_dir / "ledger.jsonl").touch()
        (self.host_dir / "ledger.jsonl").chmod(0o666)
        await kube.create(r.NAMESPACE, {"metadata": {"name": self.namespace}})
        await kube.create(r.CLUSTER_QUEUE, {
            "metadata": {"name": self.namespace},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                "admissionChecksStrategy": {"admissionChecks": [
                    {"name": names.ADMISSION_CHECK}]},
                "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                    "name": "default-flavor",
                    # six pods of 100m / 32Mi: three jobs of two nodes
                    "resources": [{"name": "cpu", "nominalQuota": "600m"},
                                  {"name": "memory", "nominalQuota": "192Mi"}]}]}],
            },
        })
        await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": QUEUE},
                                          "spec": {"clusterQueue": self.namespace}},
                          self.namespace)
        await kube.create(r.CLUSTER_TRAINING_RUNTIME, runtime_body(self.runtime, self.host_dir))

    async def _start_jobs(self, be: Backend) -> None:
        assert self.rec is not None
        for plan in self.plan.jobs:
            st = JobState(plan, JobID.new())
            self.jobs.append(st)
            req = job_request(st.job, plan, self.runtime)
            _, ref = await self.rec.call(
                OP_START, st.job, lambda req=req: be.start(req),  # type: ignore[misc]
                seconds=DEADLINES[OP_START],
                args={"nodes": plan.nodes, "fail_once": plan.fail_once,
                      "run_seconds": plan.run_seconds, "term_linger": plan.term_linger,
                      "early_exit": plan.early_exit, "submission": 1, "attempt": 1},
                summary=lambda ref: ref.id)
            st.ref = ref
        for st in self.jobs:
            if st.plan.open_at_start and st.ref is not None:
                await self._op(be, "open", st, 0.0)

    async def _schedule(self, be: Backend, faults: Faults) -> None:
        assert self.rec is not None
        running: asyncio.Task[None] | None = None
        try:
            for step in self.plan.steps:
                await asyncio.sleep(step.delay)
                if step.kind == "op":
                    await self._op(be, step.name, self.jobs[step.job], step.arg)
                    continue
                if running is not None:  # one fault at a time
                    await running
                running = asyncio.create_task(self._fault(faults, step))
            if running is not None:
                await running
        finally:
            if running is not None and not running.done():
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running

    async def _fault(self, faults: Faults, step: Step) -> None:
        assert self.rec is not None
        call_us = now_us()
        try:
            result = await faults.run(step.name, step.arg)
        except Exception as exc:
            result = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
            self.result.faults_failed[step.name] = result["failed"]
        self.rec.record(f"fault:{step.name}", call_us, result, args={"length_s": step.arg})

    async def _op(self, be: Backend, name: str, st: JobState, arg: float) -> None:
        assert self.rec is not None
        ref = st.ref
        if ref is None and name not in ("start-same", "start-different", "next-attempt"):
            return  # its start failed: nothing to operate on
        job = str(st.job)
        if name == "open":
            assert ref is not None
            await self.rec.call(OP_OPEN, job, lambda: be.open(ref), seconds=DEADLINES[OP_OPEN])
        elif name in ("hold", "hold-expiry"):
            await self._hold(be, st, arg if name == "hold-expiry" else 0.0)
        elif name in ("release", "release-wrong"):
            assert ref is not None
            instance = st.hold_instance or 1
            if name == "release-wrong":
                instance += 1 + self.rng.randrange(3)
            secs = DEADLINES[OP_RELEASE]
            meta = HoldMeta(instance, Actor(ActorKind.SERVICE, "chaos"),
                            CallMeta(datetime.now(UTC) + timedelta(seconds=secs)))
            rec, _ = await self.rec.call(
                OP_RELEASE, job, lambda: be.release(ref, meta), seconds=secs,
                args={"instance": instance, "wrong": name == "release-wrong"},
                summary=lambda out: str(out))
            if rec.ok and name == "release":
                st.held = False
        elif name == "stop_job":
            await self._stop(be, st)
        elif name == "delete-jobset":
            assert ref is not None
            await self._delete_jobset(st, ref)
        elif name in ("delete-workload", "delete-workload-held"):
            assert ref is not None
            if name == "delete-workload-held" and not st.held:
                await self._hold(be, st, 0.0)
            await self._delete_workload(st, ref)
        elif name == "next-attempt":
            await self._next_attempt(be, st)
        else:
            await self._start_again(be, name, st)

    async def _hold(self, be: Backend, st: JobState, until_s: float) -> None:
        """A hold with the next instance; ``until_s`` > 0: it expires after that long."""
        assert self.rec is not None
        assert st.ref is not None
        ref = st.ref
        instance = st.next_instance
        st.next_instance += 1
        secs = DEADLINES[OP_HOLD]
        now = datetime.now(UTC)
        until = now + timedelta(seconds=until_s) if until_s else None
        meta = HoldMeta(instance, Actor(ActorKind.SERVICE, "chaos"),
                        CallMeta(now + timedelta(seconds=secs)), until=until,
                        reason=f"chaos {self.namespace}")
        rec, _ = await self.rec.call(OP_HOLD, str(st.job), lambda: be.hold(ref, meta),
                                     seconds=secs,
                                     args={"instance": instance,
                                           "until_s": until_s if until else None},
                                     summary=lambda _: "held")
        if rec.ok:
            st.hold_instance = instance
            st.held = until is None  # an expiring hold ends by itself

    async def _stop(self, be: Backend, st: JobState) -> None:
        assert self.rec is not None
        await self.rec.call(OP_STOP, str(st.job),
                            lambda: be.stop_job(st.job, f"chaos {self.namespace}"),
                            seconds=DEADLINES[OP_STOP], summary=stop_summary,
                            args={"submission": st.submission, "attempt": st.attempt})
        st.stopped = True
        st.held = False

    async def _delete_jobset(self, st: JobState, ref: ObjectRef) -> None:
        """``kubectl delete jobset <name>``: background propagation. Trainer makes it again
        at once for the TrainJob Kueue still holds admitted; the gate never runs."""
        assert self.rec is not None
        assert self.kube is not None
        kube = self.kube

        async def delete() -> dict[str, Any]:
            gone = await kube.delete(r.JOBSET, ref.name, ref.namespace,
                                     propagation="Background")
            return {"jobset": ref.name,
                    "uid": ((gone or {}).get("metadata") or {}).get("uid", ""),
                    "found": gone is not None}

        await self.rec.call(OP_DELETE_JOBSET, str(st.job), delete,
                            seconds=DEADLINES[OP_DELETE_JOBSET],
                            args={"held": st.held, "attempt": st.attempt})

    async def _delete_workload(self, st: JobState, ref: ObjectRef) -> None:
        """Delete the Workload of the job's TrainJob (by its owner reference): Kueue makes a
        new one. A held job must stay held (issue 26, case 4)."""
        assert self.rec is not None
        assert self.kube is not None
        kube = self.kube

        async def delete() -> dict[str, Any]:
            items, _ = await kube.list(r.WORKLOAD, ref.namespace)
            wl = workload_of(items, ref.name)
            if wl is None:
                return {"found": False}
            meta = wl["metadata"]
            await kube.delete(r.WORKLOAD, meta["name"], ref.namespace, uid=meta.get("uid"),
                              propagation="Background")
            return {"found": True, "workload": meta["name"], "uid": meta.get("uid", ""),
                    "active": (wl.get("spec") or {}).get("active", True)}

        await self.rec.call(OP_DELETE_WORKLOAD, str(st.job), delete,
                            seconds=DEADLINES[OP_DELETE_WORKLOAD],
                            args={"held": st.held, "attempt": st.attempt})

    async def _next_attempt(self, be: Backend, st: JobState) -> None:
        """A later attempt of the same submission (issue 26, case 2): StopJob unless the job
        is stopped, then Start at attempt + 1 and Open. Its epochs must lie above every
        epoch of the attempts before it (checker, b)."""
        assert self.rec is not None
        if not st.stopped:
            await self._stop(be, st)
        attempt = st.attempt + 1
        req = job_request(st.job, st.plan, self.runtime, variant=st.variant,
                          submission=st.submission, attempt=attempt)
        rec, ref = await self.rec.call(
            OP_START, str(st.job), lambda: be.start(req), seconds=DEADLINES[OP_START],
            args={"submission": st.submission, "attempt": attempt, "next_attempt": True,
                  "variant": st.variant or "plain"},
            summary=lambda ref: ref.id)
        if not rec.ok:
            return  # still stopped: a later start or next-attempt tries again
        st.ref, st.attempt, st.stopped = ref, attempt, False
        st.hold_instance, st.held = 0, False
        await self.rec.call(OP_OPEN, str(st.job), lambda: be.open(ref),
                            seconds=DEADLINES[OP_OPEN])

    async def _start_again(self, be: Backend, name: str, st: JobState) -> None:
        """start-same / start-different: a second Start of the submission (the same object,
        or ConflictError), or after a StopJob a new submission."""
        assert self.rec is not None
        job = str(st.job)
        again = not st.stopped and st.ref is not None  # the same submission again
        if st.stopped:
            st.submission += 1
            st.attempt = 1
            st.stopped = False
        # "Different" is different from the request this submission was started with
        # (a new submission after a stop may have been started with the other variant).
        if name == "start-different":
            variant = ("other" if st.variant == "" else "") if again else "other"
        else:
            variant = st.variant if again else ""
        req = job_request(st.job, st.plan, self.runtime, variant=variant,
                          submission=st.submission, attempt=st.attempt)
        rec, ref2 = await self.rec.call(
            OP_START, job, lambda: be.start(req), seconds=DEADLINES[OP_START],
            args={"same": name == "start-same", "submission": st.submission,
                  "attempt": st.attempt, "variant": variant or "plain"},
            summary=lambda ref: ref.id)
        if again and name == "start-different" and rec.error != "ConflictError" \
                and rec.return_us:
            self.expect.append(f"operation {rec.id}: a second Start of {job} with a "
                               f"different request gave {rec.error or rec.result!r}, "
                               "not ConflictError")
        if again and name == "start-same" and rec.ok and st.ref is not None \
                and ref2.id != st.ref.id:
            self.expect.append(f"operation {rec.id}: a second Start of {job} with the "
                               f"same request gave {ref2.id}, not {st.ref.id}")
        if rec.ok:
            if not again:
                st.variant = variant
                st.hold_instance, st.held = 0, False
            st.ref = ref2

    async def _settle(self, be: Backend) -> None:
        """Wait (bounded) until every job is done, held, gone or never opened."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline:
            busy = False
            for st in self.jobs:
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

    async def _final(self, be: Backend, kube: Kube) -> Final:
        assert self.rec is not None
        stopped = {o.job for o in self.rec.ops if o.op == OP_STOP and o.ok}
        states: dict[str, str] = {}
        seen: list[tuple[JobState, bool, str]] = []
        for st in self.jobs:
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
        nodes = {str(st.job): st.plan.nodes for st in self.jobs}
        jobs = []
        for st, held, reason in seen:
            job = str(st.job)
            find_empty = direct_empty = None
            if job in stopped:
                found = await be.find(st.job)
                find_empty = not found
                direct_empty = not await self._labelled(kube, job)
            jobs.append(JobFinal(job, held=held, find_empty=find_empty,
                                 direct_list_empty=direct_empty, reason=reason,
                                 state=states.get(job, ""),
                                 quota_free=quota_free(job, states, nodes)))
        objects = []
        for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.JOBSET, r.JOB, r.POD, r.WORKLOAD):
            items, _ = await kube.list(res, self.namespace)
            for it in items:
                m = it["metadata"]
                objects.append(ObjectMeta(res.kind, self.namespace, m["name"],
                                          dict(m.get("annotations") or {}),
                                          dict(m.get("labels") or {}),
                                          list(m.get("finalizers") or [])))
        return Final(jobs, objects)

    async def _labelled(self, kube: Kube, job: str) -> list[str]:
        found = []
        for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.JOBSET, r.JOB, r.POD):
            items, _ = await kube.list(res, self.namespace,
                                       label_selector=f"{names.JOB_ID_LABEL}={job}")
            found += [f"{res.kind}/{it['metadata']['name']}" for it in items]
        return found

    def _judge(self, final: Final) -> None:
        assert self.rec is not None
        shutil.copy(self.host_dir / "ledger.jsonl", self.dir / "ledger.jsonl")
        write_final(self.dir / "final.json", final)
        ledger = read_ledger(self.dir / "ledger.jsonl")
        verdicts = judge(ledger, self.rec.ops, final)
        self.result.ledger_lines = len(ledger)
        self.result.executions = sum(len(exs) for exs in executions(ledger).values())
        self.result.verdicts = {v.prop: v.ok for v in verdicts}
        self.result.violations = [f"({v.prop}) {v.message.splitlines()[0] if v.message else ''}"
                                  for v in verdicts if not v.ok]
        self.result.verdicts["start"] = not self.expect
        self.result.violations += [f"(start) {e}" for e in self.expect]
        text = format_verdicts(verdicts, self.run_seed)
        text += "\n" + ("ok   (start) a second Start of a submission: the same object, or "
                        "ConflictError" if not self.expect else
                        "FAIL (start) a second Start of a submission:\n  "
                        + "\n  ".join(self.expect))
        (self.dir / "verdicts.txt").write_text(text + "\n", encoding="utf-8")
        if not all(v.ok for v in verdicts) or self.expect:
            print(text, file=sys.stderr)

    async def _cleanup(self, kube: Kube) -> None:
        problems = []
        for res, name in ((r.NAMESPACE, self.namespace), (r.CLUSTER_QUEUE, self.namespace),
                          (r.CLUSTER_TRAINING_RUNTIME, self.runtime)):
            try:
                await asyncio.wait_for(kube.delete(res, name), 30)
            except (DispatchError, TimeoutError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
        # Wait (bounded) for the namespace to go, so its pods stop writing the ledger.
        last = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if await kube.get_or_none(r.NAMESPACE, self.namespace) is None:
                    break
            except DispatchError as exc:  # the API server restarting: ask again
                last = f"{type(exc).__name__}: {exc}"
            else:
                last = "still there"
            await asyncio.sleep(1)
        else:
            problems.append(f"namespace {self.namespace} not gone after 90 s ({last})")
        if (self.host_dir / "ledger.jsonl").exists() and not (self.dir / "ledger.jsonl").exists():
            shutil.copy(self.host_dir / "ledger.jsonl", self.dir / "ledger.jsonl")
        shutil.rmtree(self.host_dir, ignore_errors=True)
        if problems:
            self.result.error += ("; " if self.result.error else "") + \
                "cleanup: " + "; ".join(problems)


async def _uninterrupted(work: Awaitable[None]) -> None:
    """Await ``work`` to its end even when this task is cancelled meanwhile (Ctrl-C during
    a run's cleanup must not leave its namespace, queue or host directory), then let the
    cancellation go on."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


# --- many runs -----------------------------------------------------------------------------


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
