"""Kueue mode: Kueue admits the TrainJobs, dispatch's admission controller gates readmission.

A TrainJob is created with Kueue's queue labels and dispatch's ``admission-gated-by`` gate,
and Start waits for Kueue's Workload; Open removes the gate (:mod:`dispatch_kubeflow.gate`);
Hold and Release act on the TrainJob's record and the Workload
(:mod:`dispatch_kubeflow.hold`), and the admission
controller releases an expired hold and raises A. This is the only module that reads the
settings' ``kueue`` section.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import errors, find, gate, hold, state
from dispatch_kubeflow.core import hold as core_hold
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import newest_workload
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Feed, Informers
from dispatch_kubeflow.jobs import Listed
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD
from dispatch_kubeflow.model import HoldMeta, ObjectRef
from dispatch_kubeflow.preflight import proofs
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.settings import KueueSettings, Settings
from dispatch_kubeflow.waits import deadline_after, wait_for, within

Obj = dict[str, Any]


class KueueMode:
    """Kueue mode (see the module docstring)."""

    name = "kueue"
    kinds: tuple[Resource, ...] = KINDS
    listed: Listed = ((WORKLOAD, names.KUEUE_JOB_UID_LABEL),)

    def __init__(self, settings: Settings, kueue: KueueSettings) -> None:
        self.settings = settings
        self.kueue = kueue

    @classmethod
    def from_settings(cls, settings: Settings) -> KueueMode | None:
        """Kueue mode, when the settings have a ``kueue`` section (None: they have not)."""
        return cls(settings, settings.kueue) if settings.kueue is not None else None

    # --- start and open -------------------------------------------------------------------
    def trainjob_labels(self) -> dict[str, str]:
        labels = {names.QUEUE_NAME_LABEL: self.kueue.local_queue}
        if self.kueue.priority_class:
            labels[names.PRIORITY_CLASS_LABEL] = self.kueue.priority_class
        return labels

    def closed_annotations(self) -> dict[str, str]:
        return {names.ADMISSION_GATED_BY: names.GATE}

    def trainjob_spec(self) -> dict[str, Any]:
        return {}

    async def started(self, kube: KubeAPI, trainjob: Mapping[str, Any],
                      shared: Informers | None = None) -> None:
        """Wait for Kueue's Workload of the TrainJob (``timeouts.start``): through the
        Backend's informer of the namespace's Workloads when ``shared`` (the one its waits
        use, so concurrent Starts and waits share one watch), else a watch of its own."""
        uid = meta(trainjob)["uid"]
        limit = self.settings.timeouts.start
        async with within(deadline_after(limit),
                          f"Start of TrainJob {meta(trainjob)['name']}: waiting for Kueue's "
                          f"Workload ({limit})"):
            if shared is None:
                await wait_for(kube, WORKLOAD, self.settings.namespace,
                               lambda wls: True if wls else None,
                               label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}")
                return
            feed, = self.watched(self.settings.namespace)
            async with shared.watching([(feed, uid)]) as view:
                while not (await view.changed())[0]:
                    pass

    async def open(self, kube: KubeAPI, ref: ObjectRef) -> None:
        await gate.open_kueue_gate(kube, ref.namespace, ref.name)

    # --- inspect and wait -----------------------------------------------------------------
    async def workload(self, kube: KubeAPI, trainjob: Mapping[str, Any]) -> Obj | None:
        return await workload_of(kube, trainjob)

    def watched(self, namespace: str) -> list[Feed]:
        # Kueue labels each job's Workload with the job's UID: every such Workload of the
        # namespace, keyed by that label. Its cache keeps what the waits judge and what
        # StopJob's orphan scan reads, not the pod templates.
        return [Feed(WORKLOAD, namespace, label_selector=names.KUEUE_JOB_UID_LABEL,
                     key_label=names.KUEUE_JOB_UID_LABEL,
                     keep=state.WORKLOAD_READS + find.WORKLOAD_READS)]

    def hold_expiry(self, trainjob: Mapping[str, Any] | None,
                    pods: Sequence[Mapping[str, Any]]) -> datetime | None:
        return None  # the admission controller releases an expired hold

    async def release_expired(self, kube: KubeAPI, ref: ObjectRef) -> None:
        return None  # the admission controller releases an expired hold

    def pods_in(self, kube: KubeAPI, workload: Mapping[str, Any] | None
                ) -> Mapping[str, KubeAPI]:
        return {"": kube}  # the backend's own cluster

    async def remark(self, kube: KubeAPI, trainjob: Mapping[str, Any] | None,
                     workload: Mapping[str, Any] | None) -> str:
        return ""  # the Workload says all there is

    # --- hold and release -----------------------------------------------------------------
    async def hold(self, kube: KubeAPI, ref: ObjectRef, meta: HoldMeta) -> None:
        workload = await self._require_workload(kube, ref)
        held = core_hold.instance(workload)
        now = datetime.now(UTC)
        with _naming(ref):
            if held and held != meta.instance:  # before anything is written
                raise errors.HoldError(f"Workload {_name(workload)} is already held as "
                                       f"instance {held}; release that first")
            # The TrainJob first: its record outlives a re-made Workload (core.hold).
            await hold.hold_trainjob(kube, ref.namespace, ref.name, meta, suspend=False,
                                     now=now)
            await hold.hold_workload(kube, workload, meta, now=now)

    async def release(self, kube: KubeAPI, ref: ObjectRef, instance: int) -> bool:
        trainjob = await kube.get_or_none(TRAINJOB, ref.name, ref.namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {ref.id} not found")
        workload = await self.workload(kube, trainjob)
        with _naming(ref):
            for kind, obj in (("TrainJob", trainjob), ("Workload", workload)):
                held = core_hold.instance(obj)  # refused before anything is written
                if held and held != instance:
                    raise errors.HoldError(f"{kind} {_name(obj)} "
                                           f"is held as instance {held}, not {instance}; "
                                           "the hold stays")
            # The TrainJob's record first: the controller puts a hold it still records back
            # on the Workload, so clearing the Workload first could be undone.
            cleared = await hold.clear_trainjob_hold(kube, ref.namespace, ref.name, instance)
            # Read again: the controller may have put the hold back on a re-made Workload
            # since the read above.
            workload = await self.workload(kube, trainjob) if cleared else workload
            released = workload is not None and \
                await hold.release_workload(kube, workload, instance, mark=cleared)
        return cleared or released

    async def _require_workload(self, kube: KubeAPI, ref: ObjectRef) -> Obj:
        trainjob = await kube.get_or_none(TRAINJOB, ref.name, ref.namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {ref.id} not found")
        workload = await self.workload(kube, trainjob)
        if workload is None:
            raise errors.NotFound(f"TrainJob {ref.id} has no Workload (yet)")
        return workload

    # --- what the preflight proves --------------------------------------------------------
    def proofs(self) -> Proofs:
        return proofs.kueue(self.settings, self.kueue, labels=self.trainjob_labels(),
                            closed=self.closed_annotations())


def _name(obj: Mapping[str, Any] | None) -> str:
    m = meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}"


@contextlib.contextmanager
def _naming(ref: ObjectRef) -> Iterator[None]:
    """A HoldError about the Workload also names the TrainJob the caller passed."""
    try:
        yield
    except errors.HoldError as exc:
        raise errors.HoldError(f"TrainJob {ref.id}: {exc}") from None


async def workload_of(kube: KubeAPI, trainjob: Mapping[str, Any]) -> Obj | None:
    """Kueue's Workload of ``trainjob`` (labelled with its UID; the newest, should Kueue have
    made another), read live; None when there is none."""
    m = meta(trainjob)
    items, _ = await kube.list(
        WORKLOAD, m["namespace"], label_selector=f"{names.KUEUE_JOB_UID_LABEL}={m['uid']}")
    return newest_workload(items)
