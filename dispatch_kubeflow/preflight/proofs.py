"""Each mode's proofs, picked once from the modules that hold them (:class:`.mode.Proofs`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from dispatch_kubeflow.core import names
from dispatch_kubeflow.preflight import a_writes, access, probe_watch, readmission
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.settings import KueueSettings, Settings


def kueue(settings: Settings, queue: KueueSettings, *, labels: Mapping[str, str],
          closed: Mapping[str, str]) -> Proofs:
    """Kueue mode: Kueue's API, the queue's AdmissionCheck and its live controller, a gated
    probe, A and the gate's way past writable by the controller (and Kueue) alone."""
    ns = settings.namespace
    return Proofs(
        api_versions=((names.KUEUE_GROUP, names.KUEUE_VERSION),),
        permissions=tuple(access.kueue_permissions(ns)),
        hold_reason=access.kueue_hold_reason(ns),
        readmission=functools.partial(readmission.check_readmission, ns=ns, kueue=queue),
        trainjob_labels=dict(labels), closed_annotations=dict(closed),
        watch_probe=probe_watch.watch_workload, judge_probe=probe_watch.judge_gated,
        judge_a_writes=a_writes.judge_kueue_a_writes, judge_guard=a_writes.judge_kueue_guard)


def plain(settings: Settings, *, labels: Mapping[str, str],
          closed: Mapping[str, str]) -> Proofs:
    """Plain mode: a suspended probe, readmission by the library itself, A and the resume
    writable by the library."""
    ns = settings.namespace
    return Proofs(
        api_versions=(),
        permissions=tuple(access.plain_permissions(ns)),
        hold_reason=access.plain_hold_reason(ns),
        readmission=readmission.plain_readmission,
        trainjob_labels=dict(labels), closed_annotations=dict(closed),
        watch_probe=probe_watch.watch_suspend, judge_probe=probe_watch.judge_suspended,
        judge_a_writes=a_writes.judge_plain_a_writes, judge_guard=a_writes.judge_plain_guard)
