"""A fake Backend for a service's unit tests: the same API, no cluster.

::

    from dispatch_kubeflow.testing import FakeBackend

    async with FakeBackend() as backend:          # Kueue mode, namespace "default"
        ref = await backend.start(request)        # gated, as on a cluster
        await backend.open(ref)                   # queued, admitted: running (A = 1)
        backend.finish(ref)                       # every rank exits 0: succeeded

`FakeBackend` is a `dispatch_kubeflow.Backend` with the same public methods and
signatures, the same typed errors for the same bad input (it runs the library's own checks),
and the states of docs/states.md, judged by the library's own state table from in-memory
objects. The test drives what the cluster would do: `FakeBackend.admit`,
`FakeBackend.finish`, `FakeBackend.fail`, `FakeBackend.lose_pod`,
`FakeBackend.slow`, `FakeBackend.write_output`. Identities follow the core's
rules (`dispatch_kubeflow.core.identity`): `FakeBackend.identity`.

`register_fake` makes ``dispatch_kubeflow.open_backend`` open fakes, for a service that
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
    ``options``, as [FakeBackend][dispatch_kubeflow.testing.FakeBackend] takes them); returns
    the list each one opened is appended to, so the test can drive it. Registering the name
    again replaces the factory.

    Args:
        name: The backend name the service's configuration gives.
        **options: Keyword arguments of [FakeBackend][dispatch_kubeflow.testing.FakeBackend]
            (``auto_admit``, ``grace``, ...); the settings come from the config.

    Returns:
        The fakes opened under the name, in the order opened (empty until one is).

    Raises:
        ValueError: ``name`` is empty.
    """
    opened: list[FakeBackend] = []

    async def factory(config: AdapterConfig) -> Backend:
        fake = FakeBackend(config.settings or None, **options)
        opened.append(fake)
        return fake

    register(name, factory, replace=True)
    return opened
