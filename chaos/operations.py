"""The schedule's operations on a run's jobs (``chaos.runner``'s step 4), each made through
the library (or, for the deletes, on the objects directly) and recorded."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chaos.history import (
    OP_DELETE_JOBSET,
    OP_DELETE_WORKLOAD,
    OP_HOLD,
    OP_OPEN,
    OP_RELEASE,
    OP_START,
    OP_STOP,
)
from chaos.objects import job_request, workload_of
from chaos.plan import JobPlan
from chaos.recorder import DEADLINES, Recorder, stop_summary
from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    HoldMeta,
    JobID,
    ObjectRef,
)
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r


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


class Operations:
    """The operations of :data:`chaos.plan.SCHEDULE_OPS` on the run's jobs, recorded by
    ``rec``; the deletes act on the objects through ``kube``, and ``rng`` makes the choices
    made while running (shared with the run's faults)."""

    def __init__(self, rec: Recorder, kube: Kube, *, namespace: str, runtime: str,
                 rng: random.Random) -> None:
        self.rec, self.kube = rec, kube
        self.namespace, self.runtime = namespace, runtime
        self.rng = rng
        # What the library must answer beyond the checker's properties: a second Start of
        # the same submission returns the same object, or ConflictError for another request.
        self.expect: list[str] = []

    async def op(self, be: Backend, name: str, st: JobState, arg: float) -> None:
        """The operation ``name`` of the schedule on the job ``st``."""
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
        await self.rec.call(OP_STOP, str(st.job),
                            lambda: be.stop_job(st.job, f"chaos {self.namespace}"),
                            seconds=DEADLINES[OP_STOP], summary=stop_summary,
                            args={"submission": st.submission, "attempt": st.attempt})
        st.stopped = True
        st.held = False

    async def _delete_jobset(self, st: JobState, ref: ObjectRef) -> None:
        """``kubectl delete jobset <name>``: background propagation. Trainer makes it again
        at once for the TrainJob Kueue still holds admitted; the gate never runs."""
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
