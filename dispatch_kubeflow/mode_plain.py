"""Plain mode: no Kueue, no controller; the TrainJob's ``spec.suspend`` is the gate.

A TrainJob is created suspended; Open is its first admission and Release of a job opened
before is another (:mod:`dispatch_kubeflow.admission_count`: wait for the old pods, raise
A, unsuspend); Hold suspends the TrainJob and records itself on it. Nobody else is there to
release an expired hold, so the library does, where it acts anyway: in
:meth:`Backend.wait <dispatch_kubeflow.backend.Backend.wait>` (never in ``inspect``, which
only reads) and, for the hold's own instance, in Release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import errors, hold, state
from dispatch_kubeflow.admission_count import admit_plain
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admissions
from dispatch_kubeflow.core.execution import alive
from dispatch_kubeflow.core.hold import instance as hold_instance
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Feed, Informers
from dispatch_kubeflow.jobs import Listed
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import POD, TRAINJOB, WORKLOAD
from dispatch_kubeflow.model import HoldMeta, ObjectRef
from dispatch_kubeflow.preflight import proofs
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.waits import deadline_after, within

Obj = dict[str, Any]


class PlainMode:
    """Plain mode (see the module docstring)."""

    name = "plain"
    kinds: tuple[Resource, ...] = tuple(k for k in KINDS if k is not WORKLOAD)
    listed: Listed = ()

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    # --- start and open -------------------------------------------------------------------
    def trainjob_labels(self) -> dict[str, str]:
        return {}

    def closed_annotations(self) -> dict[str, str]:
        return {}  # created suspended: that is the gate

    def trainjob_spec(self) -> dict[str, Any]:
        return {}

    async def started(self, kube: KubeAPI, trainjob: Mapping[str, Any],
                      shared: Informers | None = None) -> None:
        return None  # nothing makes anything of a suspended TrainJob

    async def open(self, kube: KubeAPI, ref: ObjectRef) -> None:
        trainjob = await kube.get_or_none(TRAINJOB, ref.name, ref.namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {ref.id} not found")
        if hold_instance(trainjob):
            raise errors.HoldError(
                f"TrainJob {ref.id} is held (instance {hold_instance(trainjob)}): in "
                "plain mode the start gate and the hold are both spec.suspend, so open it "
                "after Release")

        def never_opened(tj: Mapping[str, Any]) -> bool:
            return admissions(tj) == 0 and not hold_instance(tj)

        async with within(deadline_after(self.settings.timeouts.start), f"Open of {ref.id}"):
            await admit_plain(kube, ref.namespace, ref.name, should_admit=never_opened)

    # --- inspect and wait -----------------------------------------------------------------
    async def workload(self, kube: KubeAPI, trainjob: Mapping[str, Any]) -> Obj | None:
        return None

    def watched(self, namespace: str) -> list[Feed]:
        return []

    def hold_expiry(self, trainjob: Mapping[str, Any] | None,
                    pods: Sequence[Mapping[str, Any]]) -> datetime | None:
        """The hold's ``hold-until``, once no pod of the job is alive (the release waits for
        them anyway), when the TrainJob carries dispatch's hold."""
        if trainjob is None or alive(pods):
            return None
        obs = state.observe(trainjob, None, pods)
        return obs.hold_until if obs.hold_instance else None

    def pods_in(self, kube: KubeAPI, workload: Mapping[str, Any] | None
                ) -> Mapping[str, KubeAPI]:
        return {"": kube}  # the backend's own cluster

    async def remark(self, kube: KubeAPI, trainjob: Mapping[str, Any] | None,
                     workload: Mapping[str, Any] | None) -> str:
        return ""  # nothing beyond the TrainJob and its pods to say

    async def release_expired(self, kube: KubeAPI, ref: ObjectRef) -> None:
        """Release the TrainJob's hold, whatever its instance, if it expired. Reads the
        TrainJob and its pods itself: plain mode has no Workload to ask anyone for."""
        trainjob = await kube.get_or_none(TRAINJOB, ref.name, ref.namespace)
        if trainjob is None:
            return
        pods, _ = await kube.list(POD, ref.namespace,
                                  label_selector=names.pods_of(ref.name))
        until = self.hold_expiry(trainjob, pods)
        if until is None or until > datetime.now(UTC):
            return
        async with within(deadline_after(self.settings.timeouts.request),
                          f"release of the expired hold of {ref.id}"):
            await hold.release_trainjob(kube, ref.namespace, ref.name, None)

    # --- hold and release -----------------------------------------------------------------
    async def hold(self, kube: KubeAPI, ref: ObjectRef, meta: HoldMeta) -> None:
        await hold.hold_trainjob(kube, ref.namespace, ref.name, meta)

    async def release(self, kube: KubeAPI, ref: ObjectRef, instance: int) -> bool:
        return await hold.release_trainjob(kube, ref.namespace, ref.name, instance)

    # --- what the preflight proves --------------------------------------------------------
    def proofs(self) -> Proofs:
        return proofs.plain(self.settings, labels=self.trainjob_labels(),
                            closed=self.closed_annotations())
