"""The conformance suite: does a cluster give the adapter every guarantee the seed shows?

Run it against any cluster you have a kubeconfig for (the local cluster, kind, your own)::

    python -m dispatch_kubeflow.conformance --kubeconfig PATH [--namespace NS] [--keep-going]

or, installed, ``dispatch-conformance --kubeconfig PATH``. From code, ``await run(Options(...))``.

The suite makes what it needs and removes it afterwards, even when a check fails or it is
interrupted: a namespace of its own (``dk-conformance-<random>`` unless named), a
ClusterQueue of the same name that lists the AdmissionCheck with no ``onFlavors``, and a
LocalQueue ``lq``. It then runs one two-node job through the seed's steps and checks, in
order (each check needs the ones before it):

1. ``preflight``: opening the backend proves ReadmissionGate, AttemptInjection and
   HoldCapability (yes, probed), and the backend is not observe-only;
2. ``start-gated``: Start returns a ``gated`` job; no pod is created and the Workload gets
   no quota while it stays closed;
3. ``open-running``: Open leads to ``running``, and rank 0's log shows the first identity
   (A = 1);
4. ``hold``: a hold ends the execution (``held``, no pod left), and the job is not admitted
   again while held;
5. ``higher-identity``: after the release, rank 0's log (read through the library's
   Output) shows A + 1 and a higher ``DISPATCH_EPOCH``;
6. ``no-overlap``: the job is held again and released while the pods of its execution are
   still terminating (its command traps SIGTERM and sleeps). Watching pods and the
   Workload, the AdmissionCheck must not let the Workload be admitted (check ``Ready`` with
   quota reserved) before the last of those pods is gone; then the next execution runs
   with A + 1. The order is judged by resourceVersion (one etcd revision sequence), or by
   the order the watch events arrived when resourceVersions are not numbers;
7. ``stop``: StopJob reports nothing alive or unproven, Find finds nothing, and no
   TrainJob, runtime copy, Workload, JobSet, Job or pod of the job is left.

It prints one line per check (``PASS <check>: <what it saw>`` or ``FAIL <check>: <why>``)
and a closing line ``N passed, N failed``. Without ``keep_going`` it stops at the first
failure (the checks not run are listed as ``SKIP``).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.backend import NAME, Backend
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import is_true, meta
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.model import (
    Actor,
    ActorKind,
    CallMeta,
    Capability,
    CapabilitySource,
    CapabilityValue,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    OutputStream,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.registry import AdapterConfig, open_backend
from dispatch_kubeflow.waits import cancel_all

__all__ = ["CHECKS", "CheckResult", "Options", "Summary", "run"]

IMAGE = "localhost/dispatch-busybox:kind"
RUNTIME = "dispatch-kind"
FLAVOR = "default-flavor"
MARKER = "conformance-ready"
MANAGED_BY = "dispatch-conformance"
SEED_CAPABILITIES = (Capability.READMISSION_GATE, Capability.ATTEMPT_INJECTION, Capability.HOLD)

CHECKS: tuple[tuple[str, str], ...] = (
    ("preflight", "preflight proves ReadmissionGate, AttemptInjection and HoldCapability"),
    ("start-gated", "Start returns gated with no pod"),
    ("open-running", "Open leads to running"),
    ("hold", "a hold ends the execution and keeps it from readmission until release"),
    ("higher-identity", "the released execution has a strictly higher identity"),
    ("no-overlap", "the controller never approves while a pod of the previous execution "
                   "exists"),
    ("stop", "StopJob leaves nothing of the job behind"),
)
"""Every check, in the order it runs: (name, the guarantee it checks)."""

_ATTEMPT = re.compile(r"^DISPATCH_ATTEMPT=(\S+)$", re.MULTILINE)
_EPOCH = re.compile(r"^DISPATCH_EPOCH=(\d+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Options:
    """What to run against. ``namespace`` None: a fresh ``dk-conformance-<random>``."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    keep_going: bool = False
    runtime: str = RUNTIME
    """The ClusterTrainingRuntime the job and the preflight probe run on."""
    image: str = IMAGE
    """The image of the job's containers: it needs ``/bin/sh``, ``env``, ``grep``, ``sort``."""
    flavor: str = FLAVOR
    """The ResourceFlavor of the suite's ClusterQueue."""
    admission_check: str = names.ADMISSION_CHECK
    linger: int = 8
    """Seconds the job's pods keep running after SIGTERM (at most 25: grace is 30 s)."""
    quiet: float = 5.0
    """Seconds a closed or held job is watched for a pod or an admission that must not come."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome: ``passed`` None when it was not run."""

    name: str
    passed: bool | None
    detail: str
    seconds: float = 0.0

    @property
    def line(self) -> str:
        word = {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]
        return f"{word} {self.name}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Summary:
    """Every check's result and what cleaning up could not do."""

    results: tuple[CheckResult, ...]
    cleanup_problems: tuple[str, ...] = ()
    namespace: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for c in self.results if c.passed is True)

    @property
    def failed(self) -> int:
        return sum(1 for c in self.results if c.passed is False) + len(self.cleanup_problems)

    @property
    def not_run(self) -> int:
        return sum(1 for c in self.results if c.passed is None)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.not_run == 0 and self.passed == len(CHECKS)

    @property
    def line(self) -> str:
        text = f"{self.passed} passed, {self.failed} failed"
        return text + (f", {self.not_run} not run" if self.not_run else "")


class CheckFailed(Exception):
    """A check saw something the guarantee forbids (the message says what)."""


# --- small helpers ------------------------------------------------------------------------------


async def _poll(what: str, limit: float, probe: Callable[[], Awaitable[bool]],
                interval: float = 0.5) -> float:
    """Call ``probe`` until it holds; CheckFailed after ``limit`` seconds. Returns the wait."""
    start = time.monotonic()
    while True:
        if await probe():
            return time.monotonic() - start
        if time.monotonic() - start > limit:
            raise CheckFailed(f"never saw {what} within {limit:g}s")
        await asyncio.sleep(interval)


@dataclass(frozen=True, slots=True)
class Identity:
    """The identity an execution printed: DISPATCH_ATTEMPT split, and DISPATCH_EPOCH."""

    attempt: str
    admissions: int
    restarts: int
    epoch: int

    @classmethod
    def parse(cls, log: str, job: JobID) -> Identity:
        attempt = _ATTEMPT.search(log)
        epoch = _EPOCH.search(log)
        if attempt is None or epoch is None:
            raise CheckFailed(f"rank 0's log has no DISPATCH_ATTEMPT or DISPATCH_EPOCH: {log!r}")
        parts = attempt.group(1).split(".")
        if len(parts) != 5 or parts[0] != str(job) or parts[1:3] != ["1", "1"] or not (
                parts[3].isdigit() and parts[4].isdigit()):
            raise CheckFailed(f"DISPATCH_ATTEMPT={attempt.group(1)} is not "
                              f"{job}.1.1.<A>.<J>")
        return cls(attempt.group(1), int(parts[3]), int(parts[4]), int(epoch.group(1)))

    def __str__(self) -> str:
        return f"DISPATCH_ATTEMPT={self.attempt} DISPATCH_EPOCH={self.epoch}"


def _rv(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def _check_state(workload: Mapping[str, Any], check: str) -> tuple[str, str]:
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == check:
            return str(entry.get("state") or ""), str(entry.get("message") or "")
    return "", ""


@dataclass(frozen=True, slots=True)
class _Mark:
    """Where in the event order something happened: resourceVersion and arrival number."""

    rv: str
    seq: int

    def after(self, other: _Mark) -> bool:
        if self.rv.isdigit() and other.rv.isdigit():
            return int(self.rv) > int(other.rv)
        return self.seq > other.seq


@dataclass
class _ReleaseWatch:
    """Pods of the previous execution and the Workload's check, watched across a release."""

    check: str
    seq: int = 0
    old: dict[str, str] = field(default_factory=dict)
    """uid -> name of the pods that existed when the watch began (the old execution)."""
    gone: dict[str, _Mark] = field(default_factory=dict)
    approval: _Mark | None = None
    early_pods: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    released: bool = False
    pods_synced: asyncio.Event = field(default_factory=asyncio.Event)
    workload_synced: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def _next(self, obj: Mapping[str, Any]) -> _Mark:
        self.seq += 1
        return _Mark(_rv(obj), self.seq)

    def on_pods(self, typ: str, obj: Mapping[str, Any], items: tuple[dict[str, Any], ...]) -> None:
        if typ == "SYNC":
            present = {str(meta(p).get("uid")) for p in items}
            if not self.pods_synced.is_set():
                self.old = {str(meta(p).get("uid")): str(meta(p).get("name")) for p in items}
                self.pods_synced.set()
            else:  # a re-list after the watch expired: what is missing went meanwhile
                for uid in self.old:
                    if uid not in present and uid not in self.gone:
                        self.gone[uid] = _Mark("", self._next({}).seq)
            self.changed.set()
            return
        uid = str(meta(obj).get("uid"))
        mark = self._next(obj)
        if typ == "DELETED" and uid in self.old:
            self.gone.setdefault(uid, mark)
        elif typ == "ADDED" and uid not in self.old and self.approval is None:
            self.early_pods.append(str(meta(obj).get("name")))
        self.changed.set()

    def on_workload(self, typ: str, obj: Mapping[str, Any],
                    items: tuple[dict[str, Any], ...]) -> None:
        for wl in (items if typ == "SYNC" else (obj,)):
            mark = self._next(wl)
            if typ == "DELETED":
                continue
            state, message = _check_state(wl, self.check)
            if not self.released:
                continue
            if state != "Ready" and message and message not in self.messages:
                self.messages.append(message)
            if (state == "Ready" and is_true(wl, "QuotaReserved") and self.approval is None):
                self.approval = mark
        if typ == "SYNC":
            self.workload_synced.set()
        self.changed.set()

    @property
    def old_left(self) -> list[str]:
        return [name for uid, name in self.old.items() if uid not in self.gone]

    def overlap(self) -> list[str]:
        """Pods of the previous execution still there when the check let the Workload in."""
        if self.approval is None:
            return []
        return [self.old[uid] for uid, mark in self.gone.items() if mark.after(self.approval)]


async def _consume(kube: Kube, res: r.Resource, ns: str, selector: str,
                   sink: Callable[[str, Mapping[str, Any], tuple[dict[str, Any], ...]], None]
                   ) -> None:
    async for ev in kube.observe(res, ns, label_selector=selector):
        sink(ev.type, ev.object, ev.items)


# --- the suite ----------------------------------------------------------------------------------


class Suite:
    """One run of the checks against one cluster. Use :func:`run`."""

    def __init__(self, options: Options, kube: Kube, namespace: str) -> None:
        self.o = options
        self.kube = kube
        self.ns = namespace
        self.backend: Backend | None = None
        self.job: JobID | None = None
        self.ref: ObjectRef | None = None
        self.first: Identity | None = None
        self.second: Identity | None = None
        self.stopped = False

    # --- what every check needs ---------------------------------------------------------------
    def _need_backend(self) -> Backend:
        if self.backend is None:
            raise CheckFailed("not run: the backend did not open (see preflight)")
        return self.backend

    def _need_job(self) -> tuple[Backend, JobID, ObjectRef]:
        backend = self._need_backend()
        if self.job is None or self.ref is None:
            raise CheckFailed("not run: no job was started (see start-gated)")
        return backend, self.job, self.ref

    def settings(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {}
        if self.o.kubeconfig:
            cluster["kubeconfig"] = self.o.kubeconfig
        if self.o.context:
            cluster["context"] = self.o.context
        return {
            "cluster": cluster,
            "namespace": self.ns,
            "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": self.o.runtime},
            "kueue": {"localQueue": "lq", "admissionCheck": self.o.admission_check},
            "timeouts": {"request": "10s", "stopJob": "3m"},
        }

    def spec(self) -> JobSpec:
        linger = max(0, min(self.o.linger, 25))
        command = (f"env | grep '^DISPATCH_' | sort; echo {MARKER}; "
                   f"trap 'sleep {linger}; exit 143' TERM; while :; do sleep 1; done")
        return JobSpec(["/bin/sh", "-c", command], 2,
                       [Image(self.o.image), RuntimeRef("ClusterTrainingRuntime",
                                                        self.o.runtime)])

    def hold_meta(self, instance: int) -> HoldMeta:
        now = datetime.now(UTC)
        return HoldMeta(instance, Actor(ActorKind.SYSTEM, MANAGED_BY),
                        CallMeta(now + timedelta(minutes=1)), until=now + timedelta(hours=1),
                        reason="the conformance suite's hold")

    async def trainjob_uid(self, ref: ObjectRef) -> str:
        tj = await self.kube.get(r.TRAINJOB, ref.name, ref.namespace)
        return str(meta(tj)["uid"])

    async def workload(self, ref: ObjectRef) -> dict[str, Any] | None:
        uid = await self.trainjob_uid(ref)
        items, _ = await self.kube.list(r.WORKLOAD, ref.namespace,
                                        label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}")
        return items[0] if items else None

    async def pods(self, ref: ObjectRef) -> list[dict[str, Any]]:
        items, _ = await self.kube.list(
            r.POD, ref.namespace, label_selector=f"{names.JOBSET_NAME_LABEL}={ref.name}")
        return items

    async def state(self, want: ObjectState) -> bool:
        backend, _, ref = self._need_job()
        return (await backend.inspect(ref)).state is want

    async def identity(self, want_admissions: int) -> Identity:
        """Rank 0's identity read through the library's Output, once it shows A."""
        backend, job, _ = self._need_job()
        seen: list[Identity] = []

        async def read() -> bool:
            try:
                async with await backend.output(job, 0, OutputStream.STDOUT) as log:
                    text = (await log.read()).decode(errors="replace")
            except errors.DispatchError:
                return False
            if MARKER not in text:
                return False
            ident = Identity.parse(text, job)
            seen[:] = [ident]
            return ident.admissions >= want_admissions

        try:
            await _poll(f"rank 0's log of execution A={want_admissions}", 120, read, 1)
        except CheckFailed:
            if seen:
                raise CheckFailed(f"rank 0's log shows {seen[0]}, not A={want_admissions}"
                                  ) from None
            raise
        return seen[0]

    async def quiet(self, ref: ObjectRef, seconds: float, want: ObjectState) -> None:
        """For ``seconds``: the job stays ``want``, with no pod and no quota or admission."""
        backend = self._need_backend()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            obs = await backend.inspect(ref)
            if obs.state is not want:
                raise CheckFailed(f"the job went {obs.state} ({obs.cause.detail})")
            pods = await self.pods(ref)
            if pods:
                raise CheckFailed(f"pod {meta(pods[0]).get('name')} was created")
            wl = await self.workload(ref)
            for kind in ("QuotaReserved", "Admitted"):
                if wl is not None and is_true(wl, kind):
                    raise CheckFailed(f"Workload {meta(wl).get('name')} got {kind}")
            await asyncio.sleep(0.5)

    # --- the checks ---------------------------------------------------------------------------
    async def check_preflight(self) -> str:
        config = AdapterConfig(backend=NAME, settings=self.settings())
        self.backend = await open_backend(config)
        caps = await self.backend.capabilities()
        # The seed's three must be yes and probed; StartGate must be yes too, or the
        # backend is observe-only.
        bad = [f"{c}: {st.value} ({st.source}) {st.reason}" for c, st in caps.items()
               if st.value is not CapabilityValue.YES
               or (c in SEED_CAPABILITIES and st.source is not CapabilitySource.PROBED)]
        if bad or self.backend.observe_only:
            raise CheckFailed("; ".join(bad) or "the backend is observe-only: "
                              + "; ".join(self.backend.observe_only_reasons))
        return ", ".join(f"{c} yes (probed)" for c in SEED_CAPABILITIES)

    async def check_start_gated(self) -> str:
        backend = self._need_backend()
        self.job = JobID.new()
        self.ref = await backend.start(StartRequest(self.job, 1, 1, self.spec()))
        obs = await backend.inspect(self.ref)
        if obs.state is not ObjectState.GATED:
            raise CheckFailed(f"Start returned {self.ref.id} {obs.state}, not gated "
                              f"({obs.cause.detail})")
        await self.quiet(self.ref, self.o.quiet, ObjectState.GATED)
        return (f"{self.ref.id} gated; no pod and no quota for the {self.o.quiet:g}s it was "
                "watched")

    async def check_open_running(self) -> str:
        backend, _, ref = self._need_job()
        await backend.open(ref)
        took = await _poll("the job running", 180, lambda: self.state(ObjectState.RUNNING))
        self.first = await self.identity(1)
        if self.first.admissions != 1:
            raise CheckFailed(f"the first execution has A={self.first.admissions}, not 1")
        return f"running {took:.0f}s after Open; {self.first}"

    async def check_hold(self) -> str:
        backend, _, ref = self._need_job()
        await backend.hold(ref, self.hold_meta(1))

        async def held() -> bool:
            obs = await backend.inspect(ref)
            return obs.state is ObjectState.HELD and obs.hold_instance == 1 and obs.pods == 0

        took = await _poll("the job held with no pod left", 120, held)
        await self.quiet(ref, self.o.quiet, ObjectState.HELD)
        return (f"held with no pod {took:.0f}s after Hold; not admitted again for the "
                f"{self.o.quiet:g}s it was watched")

    async def check_higher_identity(self) -> str:
        backend, _, ref = self._need_job()
        if self.first is None:
            raise CheckFailed("not run: the first identity is unknown (see open-running)")
        await backend.release(ref, self.hold_meta(1))
        await _poll("the job running again", 180, lambda: self.state(ObjectState.RUNNING))
        self.second = await self.identity(self.first.admissions + 1)
        if self.second.admissions != self.first.admissions + 1:
            raise CheckFailed(f"A went from {self.first.admissions} to "
                              f"{self.second.admissions}, not up by one")
        if self.second.epoch <= self.first.epoch:
            raise CheckFailed(f"DISPATCH_EPOCH went from {self.first.epoch} to "
                              f"{self.second.epoch}, not up")
        return (f"A {self.first.admissions} -> {self.second.admissions}, DISPATCH_EPOCH "
                f"{self.first.epoch} -> {self.second.epoch}")

    async def check_no_overlap(self) -> str:
        backend, _, ref = self._need_job()
        if self.second is None:
            raise CheckFailed("not run: the second identity is unknown (see higher-identity)")
        previous = self.second.admissions
        await backend.hold(ref, self.hold_meta(2))

        async def ended_but_lingering() -> bool:
            wl = await self.workload(ref)
            pods = await self.pods(ref)
            if wl is None or is_true(wl, "Admitted") or not pods:
                return not pods  # gone already: judged below
            return all(meta(p).get("deletionTimestamp") for p in pods)

        await _poll("the execution ending", 60, ended_but_lingering, 0.2)
        watch = _ReleaseWatch(self.o.admission_check)
        uid = await self.trainjob_uid(ref)
        tasks = [
            asyncio.ensure_future(_consume(self.kube, r.POD, ref.namespace,
                                           f"{names.JOBSET_NAME_LABEL}={ref.name}",
                                           watch.on_pods)),
            asyncio.ensure_future(_consume(self.kube, r.WORKLOAD, ref.namespace,
                                           f"{names.KUEUE_JOB_UID_LABEL}={uid}",
                                           watch.on_workload)),
        ]
        try:
            async with asyncio.timeout(30):
                await watch.pods_synced.wait()
                await watch.workload_synced.wait()
            if not watch.old:
                raise CheckFailed(
                    "inconclusive: every pod of the previous execution was gone before the "
                    f"release (their command sleeps {self.o.linger}s after SIGTERM); nothing "
                    "was left to wait for")
            lingering = len(watch.old)
            watch.released = True
            released_at = time.monotonic()
            await backend.release(ref, self.hold_meta(2))
            try:
                async with asyncio.timeout(180):
                    while watch.approval is None or watch.old_left:
                        watch.changed.clear()
                        await watch.changed.wait()
            except TimeoutError:
                if watch.approval is None:
                    raise CheckFailed("the AdmissionCheck never let the Workload in within "
                                      f"180s; messages: {watch.messages}") from None
                raise CheckFailed(f"pods {watch.old_left} of the previous execution were "
                                  "still there 180s after the release") from None
        finally:
            await cancel_all(tasks)
        overlap = watch.overlap()
        if overlap:
            raise CheckFailed(f"the Workload was let in (check Ready, resourceVersion "
                              f"{watch.approval.rv if watch.approval else '?'}) while pods "
                              f"{overlap} of the previous execution still existed")
        if watch.early_pods:
            raise CheckFailed(f"pods {watch.early_pods} were created before the check let "
                              "the Workload in")
        waited = time.monotonic() - released_at
        await _poll("the job running again", 180, lambda: self.state(ObjectState.RUNNING))
        third = await self.identity(previous + 1)
        if third.admissions != previous + 1 or third.epoch <= self.second.epoch:
            raise CheckFailed(f"the next execution shows {third}, not A={previous + 1} with a "
                              f"DISPATCH_EPOCH above {self.second.epoch}")
        theirs = [m for m in watch.messages if "previous execution" in m] or watch.messages
        said = f" (it said: {theirs[0]})" if theirs else ""
        return (f"released with {lingering} pods of the previous execution terminating; the "
                f"check let the Workload in only after the last was gone{said}; "
                f"approved {waited:.0f}s after the release; next execution A={third.admissions}")

    async def check_stop(self) -> str:
        backend, job, ref = self._need_job()
        report = await backend.stop_job(job, "the conformance suite is over")
        self.stopped = True
        if report.alive or report.unproven:
            raise CheckFailed(f"StopJob left alive {[o.id for o in report.alive]}, unproven "
                              f"{[o.id for o in report.unproven]}")
        found = await backend.find(job)
        if found:
            raise CheckFailed(f"Find still finds {[str(o) for o in found]}")
        left = await self.objects_of(job)
        if left:
            raise CheckFailed(f"still there: {left}")
        return (f"stopped {len(report.stopped)} objects of {ref.id}; no TrainJob, runtime "
                "copy, Workload, JobSet, Job or pod of the job is left")

    async def objects_of(self, job: JobID) -> list[str]:
        out = []
        for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.WORKLOAD, r.JOBSET, r.JOB, r.POD):
            items, _ = await self.kube.list(res, self.ns)
            out += [f"{res.kind}/{meta(i).get('name')}" for i in items
                    if job.lower() in str(meta(i).get("name"))
                    or (meta(i).get("labels") or {}).get(names.JOB_ID_LABEL) == str(job)]
        return out

    def methods(self) -> list[Callable[[], Awaitable[str]]]:
        return [self.check_preflight, self.check_start_gated, self.check_open_running,
                self.check_hold, self.check_higher_identity, self.check_no_overlap,
                self.check_stop]


# --- setting up and cleaning up -------------------------------------------------------------------


async def _make_queues(kube: Kube, ns: str, o: Options,
                       made: list[tuple[r.Resource, str]]) -> None:
    """The namespace, ClusterQueue and LocalQueue; what was made goes into ``made``."""
    labels = {names.MANAGED_BY_LABEL: MANAGED_BY}
    if await kube.get_or_none(r.NAMESPACE, ns) is not None:
        raise CheckFailed(f"namespace {ns} exists already: the suite makes a namespace of its "
                          "own and deletes it afterwards, so name one that does not exist")
    if await kube.get_or_none(r.CLUSTER_QUEUE, ns) is not None:
        raise CheckFailed(f"ClusterQueue {ns} exists already: name another namespace")
    await kube.create(r.NAMESPACE, {"metadata": {"name": ns, "labels": labels}})
    made.append((r.NAMESPACE, ns))
    await kube.create(r.CLUSTER_QUEUE, {
        "metadata": {"name": ns, "labels": labels},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "admissionChecksStrategy": {"admissionChecks": [{"name": o.admission_check}]},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": o.flavor,
                "resources": [{"name": "cpu", "nominalQuota": "1"},
                              {"name": "memory", "nominalQuota": "1Gi"}]}]}],
        },
    })
    made.append((r.CLUSTER_QUEUE, ns))
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq", "labels": labels},
                                      "spec": {"clusterQueue": ns}}, ns)


async def _delete_and_wait(kube: Kube, res: r.Resource, name: str, limit: float) -> str | None:
    """Delete a cluster-scoped object and wait until it is gone; the problem, or None."""
    try:
        await kube.delete(res, name, propagation="Background")
        start = time.monotonic()
        while await kube.get_or_none(res, name) is not None:
            if time.monotonic() - start > limit:
                return f"{res.kind} {name} was still there {limit:g}s after its deletion"
            await asyncio.sleep(1)
    except errors.KubeError as exc:
        return f"could not delete {res.kind} {name}: {exc}"
    return None


async def _clean_up(suite: Suite | None, kube: Kube, made: list[tuple[r.Resource, str]],
                    out: Callable[[str], None]) -> list[str]:
    problems: list[str] = []
    if suite is not None:
        if suite.backend is not None and suite.job is not None and not suite.stopped:
            try:
                async with asyncio.timeout(200):
                    await suite.backend.stop_job(suite.job, "the conformance suite is over")
            except (errors.DispatchError, TimeoutError) as exc:
                out(f"cleanup: StopJob of {suite.job} failed ({exc}); deleting the namespace")
        if suite.backend is not None:
            await suite.backend.close()
    # The namespace first (it takes the job's Workloads with it), then the ClusterQueue,
    # whose finalizer waits for its workloads.
    for res, limit in ((r.NAMESPACE, 240.0), (r.CLUSTER_QUEUE, 120.0)):
        for made_res, name in made:
            if made_res == res:
                problem = await _delete_and_wait(kube, res, name, limit)
                if problem:
                    problems.append(problem)
    return problems


async def run(options: Options, *, out: Callable[[str], None] = print) -> Summary:
    """Run every check against the cluster; print a line per check; clean up; summarise.

    Cancelling the task (Ctrl-C in the command) stops the checks and still cleans up.
    """
    ns = options.namespace or f"dk-conformance-{uuid.uuid4().hex[:8]}"
    results: list[CheckResult] = []
    kube = await Kube.connect(kubeconfig=options.kubeconfig, context=options.context,
                              request_timeout=30)
    made: list[tuple[r.Resource, str]] = []
    suite: Suite | None = None
    problems: list[str] = []
    try:
        try:
            await _make_queues(kube, ns, options, made)
        except (CheckFailed, errors.DispatchError) as exc:
            # Nothing can be checked without the queues: every check fails with the reason.
            for name, _ in CHECKS:
                results.append(CheckResult(name, False, f"could not set up {ns}: {exc}"))
                out(results[-1].line)
        else:
            out(f"conformance: namespace {ns}, ClusterQueue {ns}, LocalQueue {ns}/lq")
            suite = Suite(options, kube, ns)
            await _run_checks(suite, options, results, out)
    except asyncio.CancelledError:
        out("conformance: interrupted; cleaning up")
        raise
    finally:
        try:
            problems = await _clean_up(suite, kube, made, out)
        finally:
            await kube.close()
        for p in problems:
            out(f"FAIL cleanup: {p}")
        if made and not problems:
            out(f"conformance: removed namespace {ns} and ClusterQueue {ns}")
    return Summary(tuple(results), tuple(problems), ns)


async def _run_checks(suite: Suite, options: Options, results: list[CheckResult],
                      out: Callable[[str], None]) -> None:
    failed = False
    for (name, _), method in zip(CHECKS, suite.methods(), strict=True):
        if failed and not options.keep_going:
            results.append(CheckResult(name, None, "not run: an earlier check failed"))
            out(results[-1].line)
            continue
        start = time.monotonic()
        try:
            detail = await method()
            res = CheckResult(name, True, detail, time.monotonic() - start)
        except CheckFailed as exc:
            res = CheckResult(name, False, str(exc), time.monotonic() - start)
        except errors.DispatchError as exc:
            res = CheckResult(name, False, f"{type(exc).__name__}: {exc}",
                              time.monotonic() - start)
        except TimeoutError as exc:
            res = CheckResult(name, False, f"timed out: {exc or type(exc).__name__}",
                              time.monotonic() - start)
        failed = failed or not res.passed
        results.append(res)
        out(res.line)
