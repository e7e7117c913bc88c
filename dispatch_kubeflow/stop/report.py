"""StopJob's report: what it saw, as stopped, alive or unproven."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.find import Found
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import POD, TRAINING_RUNTIME
from dispatch_kubeflow.model import ObjectRef, StopReport
from dispatch_kubeflow.stop.views import Views


def report(views: Views) -> StopReport:
    """Everything the stop saw (whoever removed it): alive if a view still holds it or pods
    run beneath it, unproven if its kind (or the pods') could not be read to the end,
    stopped otherwise. A kind not read to the end adds a nameless reference to unproven:
    what of the job is of that kind but was never seen (an API server that answered no
    list would otherwise give an empty report, called complete)."""
    present = {uid for k in views.kinds.values() for uid in k.live}
    pods_left = list(views.kinds[POD].live.values()) if POD in views.kinds else []
    unreadable = {k.res for k in views.kinds.values() if not k.current}
    stopped: list[ObjectRef] = []
    alive: list[ObjectRef] = []
    unproven: list[ObjectRef] = []
    for uid, f in views.seen.items():
        if uid in present or (f.res is not POD and _has_pods_beneath(f, pods_left)):
            alive.append(f.ref)
        elif f.res in unreadable or (f.res is not POD and POD in unreadable):
            unproven.append(f.ref)
        else:
            stopped.append(f.ref)
    unproven += (_unread(views.namespace, res) for res in views.kinds if res in unreadable)
    return StopReport(tuple(sorted(stopped, key=_key)), tuple(sorted(alive, key=_key)),
                      tuple(sorted(unproven, key=_key)))


def _has_pods_beneath(f: Found, pods: list[Found]) -> bool:
    if f.res is TRAINING_RUNTIME:
        return False
    sub = labels_of(f.obj).get(names.SUBMISSION_LABEL)
    name = str(meta(f.obj).get("name", ""))
    for pod in pods:
        pl = labels_of(pod.obj)
        if pl.get(names.JOBSET_NAME_LABEL) == name or (
                sub and pl.get(names.SUBMISSION_LABEL) == sub):
            return True
    return False


def across(own: StopReport, workers: Mapping[str, StopReport]) -> StopReport:
    """One report of a stop in the backend's cluster and in each worker (MultiKueue), each
    worker's references naming it (``ObjectRef.cluster``)."""
    parts = [own, *(StopReport(*(tuple(replace(r, cluster=name) for r in refs)
                                 for refs in (rep.stopped, rep.alive, rep.unproven)))
                    for name, rep in workers.items())]
    return StopReport(*(tuple(r for p in parts for r in getattr(p, side))
                        for side in ("stopped", "alive", "unproven")))


def _unread(namespace: str, res: Resource) -> ObjectRef:
    return ObjectRef(namespace=namespace, name="", kind=res.kind,
                     api_version=res.api_version)


def _key(ref: ObjectRef) -> tuple[str, str]:
    return ref.kind, ref.name
