"""What puts a Workload on the readmission's queue (feed listeners: synchronous and cheap).

A Workload is judged again when something a decision reads of it may have changed: the
Workload itself; its TrainJob arriving (a Workload judged before its TrainJob was indexed);
its JobSet made or re-made (what an approval names); a pod of its job coming, going or
finishing (what a wait counts); what an AdmissionCheck or ClusterQueue says that decisions
read; leadership won; a re-list after a watch gap, once quiet. Nothing else re-queues:
Kueue's own status churn must not put every decision behind the whole backlog (issue 11).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from admission.intake import LISTED, Caches, Feed, Key, Obj, key_of
from admission.workqueue import WorkQueue
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.kueue import checks_listed, is_our_check
from dispatch_kubeflow.core.objects import labels_of

_UNSEEN = object()


class Triggers:
    def __init__(self, queue: WorkQueue[Key], caches: Caches, *, workloads: Feed,
                 trainjobs: Feed, pods: Feed, jobsets: Feed, admission_checks: Feed,
                 cluster_queues: Feed, forget: Callable[[Key], None],
                 relist_quiet: float = 1.0) -> None:
        self.queue = queue
        self.caches = caches
        self._forget = forget
        """Called with a deleted Workload's key (the readmission forgets what it said)."""
        self.relist_quiet = relist_quiet
        """Seconds without a pod listing event after which a re-list counts as over."""
        self.warm = False
        """Set once the indexes are warm: pod listing events after that are a re-list."""
        self._relisted: asyncio.TimerHandle | None = None
        self._setup: dict[tuple[str, str], object] = {}
        """What decisions read of each AdmissionCheck and ClusterQueue, as last seen."""
        workloads.subscribe(self._on_workload)
        trainjobs.subscribe(self._on_trainjob)
        pods.subscribe(self._on_pod)
        jobsets.subscribe(self._on_jobset)
        admission_checks.subscribe(
            lambda typ, ac: self._on_setup("admissionchecks", typ, ac, is_our_check(ac)))
        cluster_queues.subscribe(
            lambda typ, cq: self._on_setup("clusterqueues", typ, cq, checks_listed(cq)))

    def _on_workload(self, typ: str, obj: Obj) -> None:
        key = key_of(obj)
        if typ == "DELETED":
            self._forget(key)
            return
        self.queue.add(key)

    def _on_trainjob(self, typ: str, obj: Obj) -> None:
        if typ == "ADDED":  # a Workload judged before its TrainJob was indexed
            self._enqueue_job(*key_of(obj))

    def _on_jobset(self, typ: str, obj: Obj) -> None:
        if typ != "MODIFIED":  # a JobSet made, or re-made: what an approval names
            self._enqueue_job(*key_of(obj))

    def _enqueue_job(self, ns: str, trainjob: str) -> None:
        for wl in self.caches.workloads_of_job(ns, trainjob):
            self.queue.add((ns, wl))

    def _on_pod(self, typ: str, obj: Obj) -> None:
        if typ == "MODIFIED" and is_alive(obj):
            # Only a pod's coming, going or finishing changes what a Workload waits for.
            return
        ns, _ = key_of(obj)
        self._enqueue_job(ns, str(labels_of(obj).get(names.JOBSET_NAME_LABEL)))
        if typ == LISTED and self.warm:
            # kopf re-lists after a watch gap without DELETED events for what went meanwhile:
            # once the re-list is quiet, judge every Workload again from a live read.
            if self._relisted is not None:
                self._relisted.cancel()
            self._relisted = asyncio.get_running_loop().call_later(
                self.relist_quiet, self.enqueue_all)

    def _on_setup(self, plural: str, typ: str, obj: Obj, read: object) -> None:
        """Judge every Workload again only when what a decision reads of an AdmissionCheck
        (is it ours) or a ClusterQueue (the checks it lists) changed. Kueue rewrites a
        ClusterQueue's status on every admission and every finish: re-queueing all Workloads
        on each of those put every decision behind the whole backlog, and judged again keys
        whose index had not yet brought our own Ready (a stale judgement, a 409; 62 of 200
        decisions at N = 200, issue 11)."""
        name = (plural, key_of(obj)[1])
        if typ == "DELETED":
            self._setup.pop(name, None)
        elif self._setup.get(name, _UNSEEN) == read:
            return
        else:
            self._setup[name] = read
        self.enqueue_all()

    def enqueue_all(self) -> None:
        for wl in self.caches.workloads():
            self.queue.add(key_of(wl))

    def close(self) -> None:
        if self._relisted is not None:
            self._relisted.cancel()
