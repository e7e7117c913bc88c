"""Which view a stop keeps of each kind: its own, or one shared with the Backend's stops.

Concurrent stops of one Backend share their watches. A kind's view is then its own list
(the consistent read the proof needs, selector-scoped to the job) followed by the Backend's
informer of that kind (:mod:`dispatch_kubeflow.informer`: one watch of the namespace, keyed
by the job-id label, or the Workloads' by the job's UID) instead of a watch of its own.
resourceVersions of one kind are comparable integers (KEP-5504), and the informer's cache
is the namespace's state at the version it is at, R. So an object listed at version v is
gone once R >= v and the cache no longer holds its UID (it existed at v, and at R it does
not); a newer version of it in the cache replaces the listed one; and an object of the job
the cache holds at a version above the list's is one made since. That is exactly what a
watch from the list's version would have said, and the list stays the proof's read. A kind
follows the informer only when every object its list holds is among the informer's (its
selector), when its resourceVersions are integers, and when sharing pays: the informer runs
already (a wait's, another stop's) or at least ``Limits.crowd`` stops of the Backend are
running (a lone stop's own watch is one request, a new informer's list and watch two). An
informer whose watch ended by an error (401, 403, 404) sends the kind back to a list and a
watch of its own.

A crowd's lists are shared as well (:mod:`dispatch_kubeflow.stop.rounds`), and the orphan
scan of the Workloads reads the Backend's Workload informer when there is one (one list for
every concurrent stop). :class:`Sharing` is the one place that picks, for each kind, which
of these a stop uses; a stop that runs alone has nothing to share, and it picks its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dispatch_kubeflow.informer import Feed, View, revision
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import WORKLOAD
from dispatch_kubeflow.stop.limits import Limits
from dispatch_kubeflow.stop.rounds import WIDE, Crowd, Rounds


class Sharing:
    """What one stop shares with the Backend's other stops (nothing, when it runs alone),
    and the choice, per kind, of the view it keeps (see the module docstring)."""

    def __init__(self, kube: KubeAPI, namespace: str, limits: Limits, *,
                 crowd: Crowd | None = None, view: View | None = None,
                 feeds: Mapping[Resource, Feed] | None = None,
                 scan: Feed | None = None) -> None:
        self.kube, self.namespace, self.limits = kube, namespace, limits
        self.crowd = crowd
        """The Backend's stops, whose shared lists a crowd of stops uses (None: alone)."""
        self.view = view
        """The subscription to the Backend's informers (None: this stop watches alone)."""
        self.feeds = dict(feeds or {})
        self.scan = scan
        """The informer of the namespace's Workloads, for the orphan scan (None: a list)."""
        self.subscribed: set[tuple[Feed, str]] = set()
        self.broken: set[Feed] = set()
        """Informers whose watch ended by an error: this stop watches their kinds alone."""

    def crowded(self) -> bool:
        """Whether at least ``Limits.crowd`` stops of the Backend run now (see the module
        doc)."""
        return self.crowd is not None and self.crowd.running >= self.limits.crowd

    def rounds(self, res: Resource, sel: str | None) -> Rounds | None:
        """The crowd's shared list a list of ``res`` by ``sel`` is a round of, or None: the
        stop's own list."""
        feed = self.feeds.get(res)
        wide = WIDE.get(res)
        if (self.crowd is None or feed is None or feed in self.broken or wide is None
                or sel is None or not self.crowded()):
            return None
        return self.crowd.rounds(self.kube, res, self.namespace, wide)

    def feed_for(self, res: Resource, rv: str, live: Iterable[Mapping[str, Any]]
                 ) -> Feed | None:
        """The informer a view of ``res`` listed at ``rv`` holding ``live`` follows from its
        list, or None: a watch of its own."""
        feed = self.feeds.get(res)
        if (self.view is None or feed is None or feed in self.broken
                or revision(rv) is None
                or not all(feed.covers(o) for o in live)):
            return None
        if res is WORKLOAD or self.crowded() or self.view.running(feed):
            return feed
        return None

    def scanner(self) -> Feed | None:
        """The informer the orphan scan reads, or None: one unselected list."""
        if self.scan is None or self.view is None or self.scan in self.broken:
            return None
        return self.scan

    def subscribe(self, feed: Feed, key: str) -> None:
        assert self.view is not None
        if (feed, key) not in self.subscribed:
            self.subscribed.add((feed, key))
            self.view.add(feed, key)
