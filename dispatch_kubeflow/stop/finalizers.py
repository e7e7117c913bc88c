"""The one thing of another controller's StopJob may release.

One thing of another controller's StopJob may release: the Job controller's
``batch.kubernetes.io/job-tracking`` finalizer, on a pod being deleted whose Job is gone
(a GET of the owner by name finds nothing, or another UID), once the Job controller has had
``Limits.gc_grace`` to do it. The finalizer only lets the Job controller count the pod in
its Job's status; with the Job gone nothing is left to count, and the Job controller
releases such pods itself. When it does not (its informers stale after etcd compactions,
seen in the fault suite), the pod would otherwise stay, and the namespace with it, until
someone restarted the kube-controller-manager. The kubelet still ends the pod's containers
as it would; the finalizer does not hold them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.find import Found
from dispatch_kubeflow.kube.resources import JOB, POD
from dispatch_kubeflow.stop.deletes import uncertain
from dispatch_kubeflow.stop.views import Views

log = logging.getLogger(__name__)


def job_owners(m: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A pod's owning Jobs: (name, UID) of each ownerReference of kind Job."""
    return [(str(o.get("name")), str(o.get("uid"))) for o in m.get("ownerReferences") or []
            if o.get("kind") == "Job" and str(o.get("apiVersion", "")).startswith("batch/")]


class Releases:
    """One stop's releases of the job-tracking finalizer (see the module docstring)."""

    def __init__(self, views: Views, grace: float) -> None:
        self.views = views
        self.grace = grace
        """The Job controller's grace: ``Limits.gc_grace``, at most a quarter of the stop's
        time."""
        self.release_at: dict[str, float] = {}
        """When StopJob releases a pod's job-tracking finalizer, by UID, if it still holds."""
        self.released: dict[str, str] = {}
        """The resourceVersion each pod's finalizer was last released at (once per version)."""
        views.on_deleted.append(lambda uid: self.release_at.pop(uid, None))

    def due_releases(self, now: float) -> list[Found]:
        """The pods whose job-tracking finalizer StopJob releases now (the module docstring):
        being deleted, held by it, no owning Job in the Job view, and the grace passed."""
        pods, jobs = self.views.kinds.get(POD), self.views.kinds.get(JOB)
        if pods is None or jobs is None or not jobs.current:
            return []
        out = []
        for f in pods.live.values():
            m = meta(f.obj)
            if (not m.get("deletionTimestamp")
                    or names.JOB_TRACKING_FINALIZER not in (m.get("finalizers") or [])
                    or any(uid in jobs.live for _, uid in job_owners(m))):
                self.release_at.pop(f.uid, None)
            elif self.released.get(f.uid) != str(m.get("resourceVersion")) and (
                    now >= self.release_at.setdefault(f.uid, now + self.grace)):
                out.append(f)
        return out

    async def release(self, f: Found) -> None:
        try:
            await self._release(f)
        except errors.KubeError as exc:
            if not uncertain(exc):
                raise
            wait = self.views.pass_wait
            log.warning("StopJob %s: releasing pod %s failed (%s); again in %.1fs",
                        self.views.job, meta(f.obj).get("name"), exc, wait)
            self.released.pop(f.uid, None)
            self.release_at[f.uid] = self.views.loop.time() + wait

    async def _release(self, f: Found) -> None:
        kube, namespace, job = self.views.kube, self.views.namespace, self.views.job
        m = meta(f.obj)
        name, rv = str(m["name"]), str(m.get("resourceVersion"))
        self.release_at.pop(f.uid, None)
        self.released[f.uid] = rv
        for owner, uid in job_owners(m):
            got = await kube.get_or_none(JOB, owner, namespace)
            if got is not None and meta(got).get("uid") == uid:
                # Its Job is there (not one of this job's, by its labels): the Job
                # controller's to release. Looked at again after a while.
                del self.released[f.uid]
                self.release_at[f.uid] = self.views.loop.time() + 4 * self.grace
                return
        rest = [x for x in m.get("finalizers") or [] if x != names.JOB_TRACKING_FINALIZER]
        log.info("StopJob %s: pod %s is held by the Job controller's finalizer of a Job "
                 "that is gone; releasing it", job, name)
        # Fenced by the resourceVersion judged above: any change since (the Job controller
        # released it, a finalizer was added) is a 409, and the watch brings the version to
        # judge again. Released already or gone: the watch says so.
        try:
            await kube.patch(POD, name, {"metadata": {"resourceVersion": rv,
                                                      "finalizers": rest}}, namespace)
        except (errors.KubeConflict, errors.KubeNotFound):
            pass
        except errors.KubeForbidden as exc:
            log.warning("StopJob %s: may not release the finalizer of pod %s (%s); it stays "
                        "until the Job controller does", job, name, exc)
