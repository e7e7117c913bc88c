"""A fake Backend for a service's unit tests: the same API, no cluster.

::

    from dispatch_kubeflow.testing import FakeBackend

    async with FakeBackend() as backend:          # Kueue mode, namespace "default"
        ref = await backend.start(request)        # gated, as on a cluster
        await backend.open(ref)                   # queued, admitted: running (A = 1)
        backend.finish(ref)                       # every rank exits 0: succeeded

:class:`FakeBackend` is a :class:`~dispatch_kubeflow.Backend` with the same public methods and
signatures, the same typed errors for the same bad input (it runs the library's own checks),
and the states of docs/states.md, judged by the library's own state table from in-memory
objects. The test drives what the cluster would do: :meth:`~FakeBackend.admit`,
:meth:`~FakeBackend.finish`, :meth:`~FakeBackend.fail`, :meth:`~FakeBackend.lose_pod`,
:meth:`~FakeBackend.slow`, :meth:`~FakeBackend.write_output`. Identities follow the core's
rules (:mod:`dispatch_kubeflow.core.identity`): :meth:`~FakeBackend.identity`.

:func:`register_fake` makes ``dispatch_kubeflow.open_backend`` open fakes, for a service that
opens its backend from its configuration. Nothing of the library imports this package.
See docs/testing.md.
"""

from __future__ import annotations

from typing import Any

from dispatch_kubeflow.backend import Backend
from dispatch_kubeflow.model import AdapterConfig
from dispatch_kubeflow.registry import register
from dispatch_kubeflow.testing.backend import SETTINGS, FakeBackend

__all__ = ["SETTINGS", "FakeBackend", "register_fake"]


def register_fake(name: str = "fake", **options: Any) -> list[FakeBackend]:
    """Make ``open_backend(AdapterConfig(name, settings))`` open a FakeBackend (made with
    ``options``, as :class:`FakeBackend` takes them); returns the list each one opened is
    appended to, so the test can drive it. Registering the name again replaces the factory."""
    opened: list[FakeBackend] = []

    async def factory(config: AdapterConfig) -> Backend:
        fake = FakeBackend(config.settings or None, **options)
        opened.append(fake)
        return fake

    register(name, factory, replace=True)
    return opened
