"""A crowd of stops: a Backend's concurrent stops, and the shared lists they make.

A crowd of stops (``Limits.crowd`` or more) shares its lists too. A kind's list is then a
round of that kind's shared list in the namespace: one list, selected by the label every
job's objects carry (the job-id label; a Workload's, Kueue's job-uid label), kept as
metadata, and filtered by each stop as its own selector would have been on the server. A
round serves exactly the stops that asked before it was sent; a stop asking while one is in
flight joins the next. So each stop's list is still a consistent read sent after its makers
were proven gone, which is all the proof (:mod:`dispatch_kubeflow.stop.views`) asks of it,
and N stops in one chain pass make a few lists of each kind instead of N (issue 11: 1,000
stops at once were 1,000 lists per pass on a saturated API server). A round that fails
fails each of its stops as its own list would have, and each lists again after
``Limits.pass_wait``. A round waits for a connection as the oldest stop that joined it would
(:mod:`dispatch_kubeflow.kube.slots`: of a crowd, the stops begun first run through first).

The crowd is the Backend's, beside its informers (:class:`Crowd`): how many of its stops
run now, and its shared lists by kind and namespace. It owns the tasks that send the rounds
until the Backend closes it: then a stop still waiting for a round raises DispatchError, as
one waiting on an informer does, and no sender outlives the Backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import metadata_only
from dispatch_kubeflow.errors import DispatchError
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import (
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.kube.slots import CALL_BEGAN
from dispatch_kubeflow.waits import Owned

Obj = dict[str, Any]

WIDE: Mapping[Resource, str] = {
    **{res: names.JOB_ID_LABEL for res in (TRAINJOB, TRAINING_RUNTIME, JOBSET, JOB, POD)},
    WORKLOAD: names.KUEUE_JOB_UID_LABEL,
}
"""The selector of a kind's shared list: the label a stop's own selector names, for every
job (a stop keeps those of its job, as its own selector would have)."""


class Rounds:
    """One kind's shared list in a namespace, for a crowd of stops (the module docstring):
    a round is one list, and it serves every stop that asked for one before it was sent, so
    each stop's proof still rests on a consistent read sent after it asked."""

    def __init__(self, kube: KubeAPI, res: Resource, namespace: str, wide: str,
                 tasks: Owned | None = None) -> None:
        self.kube, self.res, self.namespace, self.wide = kube, res, namespace, wide
        self.next: asyncio.Future[tuple[list[Obj], str]] | None = None
        """The round not sent yet, which every stop asking now joins."""
        self.flying: asyncio.Future[tuple[list[Obj], str]] | None = None
        """The round sent, not answered yet."""
        self.tasks = tasks or Owned()
        """The owner of the task that sends the rounds (the crowd's, or its own)."""
        self.sending: asyncio.Task[None] | None = None
        self.next_began: float | None = None
        """When the oldest stop that joined the next round began (kube.slots): the round's
        list waits for a connection as that stop's own requests would."""

    async def fresh(self) -> tuple[list[Obj], str]:
        if self.next is None:
            self.next = asyncio.get_running_loop().create_future()
            # Retrieved here should every stop of the round have been cancelled meanwhile.
            self.next.add_done_callback(lambda f: f.cancelled() or f.exception())
        began = CALL_BEGAN.get()
        if began is not None and (self.next_began is None or began < self.next_began):
            self.next_began = began
        joined = self.next
        if self.sending is None or self.sending.done():
            self.sending = self.tasks.start(self._send())
        # Shielded: one stop cancelled does not cancel the round the others wait for.
        return await asyncio.shield(joined)

    async def _send(self) -> None:
        while self.next is not None:
            # Taken before the list is sent: whoever asks from now on joins the next round.
            round_, self.next = self.next, None
            began, self.next_began = self.next_began, None
            # The sender's own context (its task's): the mark is this round's alone.
            CALL_BEGAN.set(began)
            self.flying = round_
            try:
                # Metadata alone, sent and kept: all a stop reads (names, labels, owners,
                # versions), and a tenth of a pod's bytes on a busy API server.
                got = await self.kube.list(self.res, self.namespace, label_selector=self.wide,
                                           trim=metadata_only, metadata=True)
            except asyncio.CancelledError:
                round_.cancel()
                raise
            except Exception as exc:
                # Handed on, not handled: every stop of the round judges the failure as it
                # would its own list's, and a bug is raised in each of them.
                round_.set_exception(exc)
            else:
                round_.set_result(got)
            finally:
                self.flying = None

    def closed(self) -> None:
        """Every stop waiting for a round raises DispatchError: the Backend closed."""
        for round_ in (self.flying, self.next):
            if round_ is not None and not round_.done():
                round_.set_exception(DispatchError("the backend was closed while waiting"))
        self.next = None

    async def close(self) -> None:
        """Stop sending (:meth:`closed`); the sender ends, and what it ended with other than
        its cancellation is raised (:class:`~dispatch_kubeflow.waits.Owned`)."""
        self.closed()
        await self.tasks.close()


class Crowd:
    """A Backend's stops, owned by the Backend beside its informers: the informers they
    follow, how many run now, and their shared lists (:class:`Rounds`) by kind and
    namespace."""

    def __init__(self, informers: Informers) -> None:
        self.informers = informers
        self.running = 0
        """How many stops of the Backend run now."""
        self.lists: dict[tuple[Resource, str], Rounds] = {}
        """The Backend's shared lists, by kind and namespace."""
        self.tasks = Owned()
        """The senders of its shared lists, until :meth:`close`."""

    @contextmanager
    def joined(self) -> Iterator[None]:
        """One stop of the crowd runs while this is entered."""
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1

    def rounds(self, kube: KubeAPI, res: Resource, namespace: str, wide: str) -> Rounds:
        """The shared list of ``res`` in ``namespace`` (made by the first stop to ask)."""
        key = (res, namespace)
        rounds = self.lists.get(key)
        if rounds is None:
            rounds = self.lists[key] = Rounds(kube, res, namespace, wide, self.tasks)
        return rounds

    async def close(self) -> None:
        """End the shared lists (the Backend closes): see :meth:`Rounds.close`."""
        for rounds in self.lists.values():
            rounds.closed()
        await self.tasks.close()
