"""The mode: everything that differs between Kueue mode and plain mode, behind one interface.

A backend chooses its mode once, when it opens (:func:`dispatch_kubeflow.backend.select_mode`):
:class:`~dispatch_kubeflow.mode_multikueue.MultiKueueMode` when the settings' ``kueue``
section has a ``multiKueue`` one (Kueue mode in a manager cluster, the pods in a worker:
see that module), :class:`~dispatch_kubeflow.mode_kueue.KueueMode` when they have a
``kueue`` section, :class:`~dispatch_kubeflow.mode_plain.PlainMode` otherwise. Nothing else
asks which mode it is in: each operation states what it needs of the mode
(:class:`~.start.StartMode`, :class:`~.observe.ObserveMode`,
:class:`~.preflight.mode.PreflightMode`) and :class:`Mode` is all of them, with what the
backend itself delegates (open, hold, release, and the kinds find, StopJob and the job
listing read).

What differs (Kueue mode / plain mode):

* the start gate: ``kueue.x-k8s.io/admission-gated-by`` and the queue labels, Start waiting
  for the Workload / ``spec.suspend``;
* open: remove dispatch's gate / the job's first admission (raise A, then unsuspend);
* hold and release: on the Workload (``spec.active``) / on the TrainJob (``spec.suspend``);
* an expired hold: released by the admission controller / by the library, in ``wait``
  (never in ``inspect``, which only reads);
* what inspect reads: the TrainJob, its pods and its Workload / the TrainJob and its pods;
* what find and StopJob list: every kind / every kind but Workloads;
* what the preflight proves: Kueue's API, the queue's AdmissionCheck and its controller, a
  gated probe, A writable by the controller alone / a suspended probe, readmission by the
  mode itself, A writable by the library.
"""

from __future__ import annotations

from typing import Protocol

from dispatch_kubeflow.jobs import Listed
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.model import HoldMeta, ObjectRef
from dispatch_kubeflow.observe import ObserveMode
from dispatch_kubeflow.preflight.mode import PreflightMode
from dispatch_kubeflow.start import StartMode


class Mode(StartMode, ObserveMode, PreflightMode, Protocol):
    """Kueue mode or plain mode (see the module docstring)."""

    @property
    def name(self) -> str:
        """``multikueue``, ``kueue`` or ``plain``."""
        ...

    @property
    def kinds(self) -> tuple[Resource, ...]:
        """The kinds a job's objects may be of, owners first (what find and StopJob list)."""
        ...

    @property
    def listed(self) -> Listed:
        """What the job listing reads beyond TrainJobs and pods."""
        ...

    async def open(self, kube: KubeAPI, ref: ObjectRef) -> None:
        """Remove dispatch's start gate (harmless when already open)."""
        ...

    async def hold(self, kube: KubeAPI, ref: ObjectRef, meta: HoldMeta) -> None:
        ...

    async def release(self, kube: KubeAPI, ref: ObjectRef, instance: int) -> bool:
        """Release hold ``instance``; False when the job was not held."""
        ...
