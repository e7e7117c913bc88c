"""MultiKueue mode's worker clusters: one connection to each, by its MultiKueueCluster name.

In MultiKueue mode the backend's own cluster is Kueue's manager, where the TrainJob is made
and admitted; Kueue's MultiKueue makes a copy of it in the worker that admits it, and its
JobSet, Jobs and pods exist there alone. The backend reaches each worker as the settings say
(``kueue.multiKueue.workers``), opens the connections when it opens and closes them with
its own. In the other modes there are none (:data:`NONE`), and every loop over them is
empty. Whatever a worker answers with an error is restated naming the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TypeVar

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import Kube, KubeAPI
from dispatch_kubeflow.settings import ClusterSettings, Settings

T = TypeVar("T")


class Workers(Mapping[str, KubeAPI]):
    """The worker clusters' connections, by MultiKueueCluster name (read-only mapping)."""

    def __init__(self, kubes: Mapping[str, KubeAPI], *, owned: bool = False) -> None:
        self._kubes = dict(kubes)
        self._owned = owned

    @classmethod
    async def connect(cls, settings: Settings, workers: Mapping[str, ClusterSettings],
                      given: Mapping[str, KubeAPI] | None = None) -> Workers:
        """Open a connection to each of ``workers`` (the mode's: none outside MultiKueue
        mode) with the settings' timeouts; ``given``: connections to use instead (left open
        on close).

        Raises:
            SettingsError: A worker's kubeconfig or context does not load; ``field`` is
                ``kueue.multiKueue.workers.<name>.<key>``.
        """
        if not workers:
            return NONE
        if given is not None:
            missing = sorted(set(workers) - set(given))
            if missing:
                raise errors.SettingsError(
                    f"kueue.multiKueue.workers: no connection given for {', '.join(missing)}",
                    field="kueue.multiKueue.workers")
            return cls({name: given[name] for name in workers})
        opened: dict[str, KubeAPI] = {}
        try:
            for name, cluster in workers.items():
                try:
                    opened[name] = await connect_cluster(cluster, settings)
                except errors.SettingsError as exc:
                    key = exc.field.removeprefix("cluster.")
                    raise errors.SettingsError(
                        f"kueue.multiKueue.workers.{name}: {exc}",
                        field=f"kueue.multiKueue.workers.{name}.{key}") from None
        except BaseException:
            await asyncio.gather(*(k.close() for k in opened.values()))
            raise
        return cls(opened, owned=True)

    async def close(self) -> None:
        """Close the connections this opened (not the ones it was given)."""
        if self._owned:
            await asyncio.gather(*(k.close() for k in self._kubes.values()))

    def __getitem__(self, name: str) -> KubeAPI:
        return self._kubes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kubes)

    def __len__(self) -> int:
        return len(self._kubes)

    async def each(self, fn: Callable[[str, KubeAPI], Awaitable[T]]) -> dict[str, T]:
        """``fn`` on every worker at once; the first worker's error (in settings order),
        naming that worker, once all have ended."""
        names = list(self._kubes)
        results = await asyncio.gather(*(fn(n, self._kubes[n]) for n in names),
                                       return_exceptions=True)
        out: dict[str, T] = {}
        for name, r in zip(names, results, strict=True):
            if isinstance(r, BaseException):
                raise named(name, r) if isinstance(r, errors.KubeError) else r
            out[name] = r
        return out


async def connect_cluster(cluster: ClusterSettings, settings: Settings) -> Kube:
    """A connection to ``cluster`` (the backend's own, or a worker) with the settings'
    request timeout and transient window."""
    return await Kube.connect(
        kubeconfig=cluster.kubeconfig, context=cluster.context,
        in_cluster=cluster.in_cluster,
        request_timeout=settings.timeouts.request.total_seconds(),
        transient_window=settings.timeouts.transient.total_seconds())


def named(worker: str, exc: errors.KubeError) -> errors.KubeError:
    """``exc``, its message naming the worker it came from."""
    return exc.restated(f"worker {worker}: {exc}")


NONE = Workers({})
"""No worker: Kueue mode and plain mode."""
